package jobctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/runonce"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Release ends the session of a lock's holder. Ending (not releasing) the
// session puts the key under the session's lock-delay, so the next holder
// acquires only after it, while the old holder's runner stops its command
// by its own stop rule (lockmodel.StopRule). For a run-once lock the
// holder's running attempt is recorded "released", with who and why.
func Release(ctx context.Context, args []string, e env) int {
	var c common
	fs := newFlags("release -lock NAME [-session ID] -reason TEXT [-yes]",
		"Breaks a stuck holder: ends the holder's Consul session (as consul session destroy), so the lock-delay still protects the old command, records who and why (for a run-once lock, in the run ledger: attempt outcome released), and prints when the next holder can start. -session picks a semaphore's holder, or checks that the mutex's holder is that session. Asks for confirmation on a terminal; refuses without -yes otherwise.", e, &c, true)
	session := fs.String("session", "", "the holder's session ID (required for a semaphore; for a mutex, release only if this session still holds)")
	yes := fs.Bool("yes", false, "do not ask for confirmation (required when standard input is not a terminal)")
	if code := c.parse(fs, args, &e, true); code >= 0 {
		return code
	}
	if *session != "" && !record.IsUUID(*session) {
		fmt.Fprintf(e.stderr, "consullock release: -session %q: want a session ID (a UUID); nothing was written\n", *session)
		return ExitUsage
	}
	if !*yes && !e.isTerminal() {
		fmt.Fprintf(e.stderr, "consullock release: refusing to end a holder's session without -yes: standard input is not a terminal; nothing was changed\n")
		return ExitRefused
	}
	client, l, profile, code := c.connect(ctx, e)
	if code >= 0 {
		return code
	}
	view, err := store.New(client).ReadLock(ctx, l.Key, true)
	if errors.Is(err, consul.ErrPermissionDenied) {
		fmt.Fprintf(e.stderr, "consullock release: the token may not see the holder of lock %s; nothing was changed. "+
			"consullock release needs session write on the holder's node: session_prefix \"<node>\" { policy = \"write\" } "+
			"(a per-node worker token releases only its own node's holder).\n%v\n", c.lock, err)
		return ExitConsul
	}
	if err != nil {
		return c.consulError(e, err)
	}
	holders := view.HolderSessions()
	target, msg := pickHolder(holders, *session, l)
	if msg != "" {
		fmt.Fprintf(e.stderr, "consullock release: %s; nothing was changed\n", msg)
		if len(holders) == 0 || *session != "" {
			return ExitRefused
		}
		return ExitUsage
	}
	if !*yes {
		fmt.Fprintf(e.stdout, "End %s, holder of lock %s? Its command is stopped by its runner; the next holder starts after the lock-delay. Type yes: ", target.Holder, c.lock)
		line, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if strings.TrimSpace(line) != "yes" {
			fmt.Fprintln(e.stderr, "consullock release: not confirmed; nothing was changed")
			return ExitRefused
		}
	}
	ended, err := store.New(client).EndHolderSessions(ctx, []store.HolderSession{target})
	if errors.Is(err, consul.ErrPermissionDenied) {
		fmt.Fprintf(e.stderr, "consullock release: the token may not end %s; nothing was changed. "+
			"consullock release needs session write on the holder's node: session_prefix %q { policy = \"write\" } "+
			"(and, for a run-once lock, key write on %s)\n", target.Holder, target.Node, record.RunLedgerKey(c.registry, c.lock))
		return ExitConsul
	}
	c.accessor = accessor(ctx, client)
	if err != nil {
		return c.consulError(e, err)
	}
	at := e.now()
	if len(ended) == 0 {
		fmt.Fprintf(e.stderr, "consullock release: session %s had already ended; nothing was changed\n", target.Session)
		return ExitRefused
	}
	delay := lockmodel.TakeOverDelay(ended[0].LockDelay)
	fmt.Fprintf(e.stdout, "ended %s, holder of lock %s (by %s: %s)\n", target.Holder, c.lock, actor(c.by, c.accessor), c.reason)
	fmt.Fprintf(e.stdout, "the key is under lock-delay %s: the next holder can acquire from %s\n", lockmodel.FormatDuration(delay), at.Add(delay).UTC().Format(time.RFC3339))
	rule := lockmodel.NewStopRule(profile, lockmodel.DefaultRunnerGrace)
	fmt.Fprintf(e.stdout, "the old holder's runner (consullock run, -grace %s) kills its command at the latest %s after its last renewal, before %s\n",
		lockmodel.FormatDuration(lockmodel.DefaultRunnerGrace), lockmodel.FormatDuration(rule.DeadBy()), at.Add(rule.DeadBy()).UTC().Format(time.RFC3339))
	if rule.DeadBy() >= delay {
		fmt.Fprintf(e.stdout, "warning: with profile %q the old holder's runner may still run its command after the next holder can start: it stops it up to %s after its last renewal, the lock-delay is %s; do not start the job by hand before %s\n",
			profile.Name, lockmodel.FormatDuration(rule.DeadBy()), lockmodel.FormatDuration(delay), at.Add(rule.DeadBy()).UTC().Format(time.RFC3339))
	}
	if l.RunOnce != nil {
		if code := c.recordRelease(ctx, e, client, target.Session, at); code != ExitOK {
			return code
		}
	}
	return ExitOK
}

// pickHolder chooses the holder to end: the one of session, or the only
// one; msg says why none is chosen.
func pickHolder(holders []store.HolderSession, session string, l lockmodel.Lock) (store.HolderSession, string) {
	if len(holders) == 0 {
		return store.HolderSession{}, fmt.Sprintf("lock %s is not held (key %s)", l.Name, l.Key)
	}
	if session != "" {
		for _, h := range holders {
			if h.Session == session {
				return h, ""
			}
		}
		return store.HolderSession{}, fmt.Sprintf("-session %s does not hold lock %s; it is held by %s", session, l.Name, store.DescribeHolders(holders))
	}
	if len(holders) > 1 {
		return store.HolderSession{}, fmt.Sprintf("lock %s has %d holders: %s; -session is required to pick one", l.Name, len(holders), store.DescribeHolders(holders))
	}
	return holders[0], ""
}

// recordRelease marks the session's running attempt released in the run
// ledger (runonce.RecordRelease: check-and-set, retried after another
// writer's change).
func (c *common) recordRelease(ctx context.Context, e env, client *consul.Client, session string, at time.Time) int {
	key := record.RunLedgerKey(c.registry, c.lock)
	written, run, attempt, err := runonce.RecordRelease(ctx, client, c.registry, c.lock,
		runonce.Released{Session: session, By: c.by, Accessor: c.accessor, Reason: c.reason, At: at})
	switch {
	case errors.Is(err, store.ErrLedgerChanged):
		return c.consulError(e, fmt.Errorf("the session was ended, but the run ledger %s kept changing; the release is not recorded", key))
	case err != nil:
		return c.consulError(e, fmt.Errorf("the session was ended, but the release is not recorded in the run ledger: %w", writeAdvice(err, key)))
	case !written:
		fmt.Fprintf(e.stdout, "the run ledger %s has no attempt running under session %s (the holder had not begun one, or the next holder recorded it); nothing recorded\n", key, session)
		return ExitOK
	}
	fmt.Fprintf(e.stdout, "recorded run %s attempt %d as released in %s\n", run, attempt, key)
	return ExitOK
}
