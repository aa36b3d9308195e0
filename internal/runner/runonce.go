package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/runonce"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Run once: the runner's side of the run ledger (internal/ledger decides,
// internal/runonce keeps the protocol, internal/store writes). A holder
// with a run ID reads the ledger consistently, or takes its watch's copy
// when that is as new as the acquisition's view (watchedCopy), and decides
// (deciding state, runonce Run.Begin): the run already succeeded, it used
// up its attempts, or this holder runs the next attempt, recorded
// "running" (guarded by the session) before the command starts. The
// outcome is written in the transaction that releases the lock
// (runrecord.go, runonce Run.Finish); after a loss it is written
// afterwards, with a check-and-set, if the attempt is still ours. A
// waiter watches the ledger (runonce Run.Follow) and leaves as soon as the
// run is done.

// Environment the child of a run-once job receives.
const (
	EnvRunID   = "CONSUL_LOCK_RUN_ID"  // the run's ID
	EnvAttempt = "CONSUL_LOCK_ATTEMPT" // the attempt's number, from 1
	// EnvScheduledTime is the run's slot time in RFC 3339 (with a schedule,
	// in its zone's offset), when the run is a slot of the lock's
	// run_once (lockmodel RunOnce.Slot, ScheduledTime); unset otherwise.
	EnvScheduledTime = "CONSUL_LOCK_SCHEDULED_TIME"
)

// runOnce is the run this runner is part of.
type runOnce struct {
	id          string
	maxAttempts int
	keep        int
	ledgerKey   string
	scheduled   string // EnvScheduledTime, "" when the run is not a slot
	// trigger is how a run ID derived from the start was judged
	// (resolveRun), for doneBeforeSession: the wait of an early trigger,
	// and why a late one may not start its slot.
	trigger slotTrigger
	// Set once this holder has recorded its attempt (BeginRun): the
	// attempt's number and the ledger as written, at index.
	attempt int
	ledger  ledger.Ledger
	index   uint64
	// watched is the waiter's latest copy of the ledger (watchLedger),
	// for the holder's first decision (watchedCopy).
	watched ledgerCopy
	// policy is max_attempts and the retry wait (jobcontrol.go); output
	// and stdout the tails of the command's stderr and stdout, set before
	// the outcome is recorded.
	policy         ledger.AttemptPolicy
	output, stdout string
	// outlived is set once a holder was seen letting the key go with this
	// run not done (it ran another run, or failed): the runner then waits
	// for the lock with its session, as a plain racer, rather than end a
	// session at every hand-over it loses (waitWithoutSession).
	outlived bool
	// yieldable is set when the arrival's second look found the key free
	// with no contender (waitForContender), at the key's ModifyIndex
	// freeAt: the session created next yields to a contender created
	// just before it (yieldToEarlierContender).
	yieldable bool
	freeAt    uint64
}

// ledgerCopy is a ledger as a watch answered it: decoded, its ModifyIndex
// for a check-and-set (index, 0 when absent) and the answer's
// X-Consul-Index (asOf: the ledger's ModifyIndex, or Consul's KV index when
// it is absent). ok is false until an answer decoded.
type ledgerCopy struct {
	mu     sync.Mutex
	ledger ledger.Ledger
	index  uint64
	asOf   uint64
	ok     bool
}

// set keeps a watch's answer; one that did not decode (ok false) leaves
// no copy: the holder then reads the ledger and reports it.
func (c *ledgerCopy) set(l ledger.Ledger, index, asOf uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ledger, c.index, c.asOf, c.ok = l, index, asOf, ok
}

// watchedCopy is the waiter's copy of the ledger when it is at least as
// new as the acquisition's view (h.Grant().Seen, the read of the lock key
// that showed it free before the lock op), saving the holder its
// consistent read. Why that is enough: every ledger write of a holder
// (BeginRun, FinishRunAndRelease) commits only while its session holds
// the lock key, and a holder's last one is the transaction that releases
// the key, at the same index; so every holder before this one wrote the
// ledger at or below Seen, and a copy answered at Seen or later has it
// all. What it can miss is written later without the key (a holder that
// lost the lock recording its outcome with a check-and-set, a hand edit):
// the copy's ModifyIndex is then stale, BeginRun's check-and-set fails
// (ErrLedgerChanged) and decide reads again, as it does for any lost
// check-and-set. A decision that writes nothing (the run succeeded, or is
// marked exhausted) comes from a state no later write undoes. A copy
// older than the view (its answer still on the way when the lock op
// won, or a ledger last written before the key was freed: a plain
// release) is not used: a stale check-and-set costs a refused
// transaction, a Raft write, where the read costs a read.
func (r *runner) watchedCopy(h libhold.Held) (ledger.Ledger, uint64, bool) {
	c := &r.once.watched
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || h.Grant().Seen == 0 || c.asOf < h.Grant().Seen {
		return ledger.Ledger{}, 0, false
	}
	return c.ledger, c.index, true
}

// resolveRun decides whether this is a run-once run and its run ID: the
// -run-id (lockmodel RunOnce.RunIDSlot: with a schedule, a timestamp is
// read as an instant and named by its slot, or refused), else the lock's
// run_once slot of the runner's start (RunOnce.Trigger, with its early
// trigger rule), judged against starting_deadline and the declaration
// (JudgeTrigger). A refused trigger is told after the ledger is read
// (doneBeforeSession): a slot another runner began is joined, not missed.
func (r *runner) resolveRun() error {
	ro := r.lock.RunOnce
	if r.cfg.runID == "" && ro == nil {
		return nil
	}
	if r.lock.IsSemaphore() {
		return fmt.Errorf("-run-id: lock %q is a semaphore (limit %d); run once needs a mutex", r.cfg.lockName, r.lock.Limit)
	}
	spec, from := ledger.RunOnce{}, "-run-id"
	if ro != nil {
		spec = *ro
	}
	spec = spec.WithDefaults()
	var (
		id, scheduled string
		trigger       slotTrigger
	)
	if r.cfg.runID == "" {
		var at time.Time
		var wait time.Duration
		var err error
		if id, at, wait, err = spec.Trigger(r.started); err != nil {
			return err
		}
		scheduled, from = id, "run_once.period slot of the start"
		switch {
		case wait > 0:
			from = "run_once.schedule slot just after the start (an early trigger)"
		case spec.Schedule != "":
			from = "run_once.schedule slot at or before the start"
		}
		trigger.spec, trigger.wait = spec, wait
		trigger.late, trigger.refusal = spec.JudgeTrigger(at, r.started.Add(wait))
	} else {
		var slot bool
		var err error
		if id, _, slot, err = spec.RunIDSlot(r.cfg.runID); err != nil {
			return usageErrorf("%s", err.Error())
		}
		if slot && ro != nil {
			scheduled = id // a slot given with -run-id: a backfill
		}
		if id != r.cfg.runID {
			from = "-run-id " + r.cfg.runID + ", the slot's instant"
		}
	}
	r.once = &runOnce{id: id, maxAttempts: spec.MaxAttempts, keep: spec.Keep, scheduled: scheduled, policy: spec.Policy(),
		ledgerKey: record.RunLedgerKey(r.cfg.registryPrefix, r.cfg.lockName), trigger: trigger}
	r.once.policy.Backfill = r.backfill
	r.log.Info("run once", "run_id", id, "from", from, "max_attempts", spec.MaxAttempts, "ledger", r.once.ledgerKey)
	return nil
}

// slotTrigger is how a run ID derived from the start was judged.
type slotTrigger struct {
	spec ledger.RunOnce
	// wait: an early trigger waits this long from the start for its
	// slot's time (lockmodel TriggerSkew) before it reads the ledger.
	wait time.Duration
	// refusal: why the trigger may not start its slot (late is how late
	// it is); told once the ledger shows the slot not begun
	// (refuseUnbegun), cleared once it joins a begun one.
	refusal ledger.SlotRefusal
	late    time.Duration
}

// awaitSlot waits, for an early trigger, until its slot's time by the
// runner's clock (measured on the monotonic clock from the start), so
// that no command starts before its CONSUL_LOCK_SCHEDULED_TIME. It reports
// false when ctx ended first (a signal: the caller's signal path reports
// it).
func (r *runner) awaitSlot(ctx context.Context) bool {
	t := &r.once.trigger
	if t.wait <= 0 {
		return true
	}
	until := r.started.Add(t.wait)
	r.log.Info("early trigger: waiting for the slot's time before acquiring", "run_id", r.once.id,
		"wait", lockmodel.FormatDuration(until.Sub(r.cfg.clock.Now()).Round(time.Millisecond)), "trigger_skew", lockmodel.FormatDuration(ledger.TriggerSkew))
	timer := time.NewTimer(max(until.Sub(r.cfg.clock.Now()), 0))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		t.wait = 0
		return true
	}
}

// refuseUnbegun tells a refused trigger (past starting_deadline, or a
// slot before the declaration) on the ledger l as read (err when the read
// failed): a slot the ledger shows begun (lockmodel SlotBegun: done, or an
// attempt running) is joined as an on-time trigger would join it; any
// other is not started, and the runner exits ExitRunPastDeadline having
// written nothing. A ledger that cannot be read cannot show the slot
// begun: the slot is not started by this trigger either.
func (r *runner) refuseUnbegun(l ledger.Ledger, err error) (int, bool) {
	t := &r.once.trigger
	if t.refusal == "" {
		return 0, false
	}
	log := r.log.With("run_id", r.once.id, "late", lockmodel.FormatDuration(t.late), "exit_code", ledger.ExitRunPastDeadline)
	switch t.refusal {
	case ledger.SlotPastDeadline:
		log = log.With("starting_deadline", lockmodel.FormatDuration(t.spec.StartingDeadline))
	case ledger.SlotBeforeSince:
		log = log.With("declared", t.spec.Since.Format(time.RFC3339))
	}
	switch {
	case err != nil:
		log.Warn(string(t.refusal)+"; the run ledger cannot be read to tell whether another runner began the slot: the slot is not run", "error", err.Error())
	case t.spec.SlotBegun(l, r.once.id):
		r.log.Info(string(t.refusal)+", but another runner began the slot in time: going on as an on-time trigger", "run_id", r.once.id,
			"late", lockmodel.FormatDuration(t.late))
		t.refusal = ""
		return 0, false
	default:
		log.Warn(string(t.refusal) + ": the slot is not run")
	}
	r.notStarted = HookMissed
	return ledger.ExitRunPastDeadline, true
}

// decision is what a holder decided about its run (runonce.Decision:
// the ledger as written, or as read when nothing was written), or why it
// could not decide.
type decision struct {
	runonce.Decision
	err error
}

// decide takes the ledger (the watch's copy when it is at least as new as
// the acquisition's view, else a consistent read), decides and writes the
// decision when it changes the ledger, guarded by h's session (runonce
// Run.Begin: a lost check-and-set is decided again on a fresh read, a
// transient failure tried again while the hold lasts; ctx ends when it is
// lost).
func (r *runner) decide(ctx context.Context, h libhold.Held) decision {
	var start *runonce.Copy
	if l, index, fresh := r.watchedCopy(h); fresh {
		r.log.Debug("deciding on the watched copy of the run ledger", "index", index, "seen", h.Grant().Seen)
		start = &runonce.Copy{Ledger: l, Index: index}
	}
	run := r.ledgerRun()
	d, err := run.Begin(ctx, runonce.Tenure{
		Fence:  h.IsOwner(),
		Holder: holder.Holder{Node: h.Session().Node, Session: h.Session().ID, FencingToken: h.Grant().FencingToken},
	}, start)
	return decision{Decision: d, err: err}
}

// ledgerRun is the run's ledger protocol (runonce.Run), from what
// resolveRun set (the waiters' goroutines use it too); finishRun adds the
// attempt.
func (r *runner) ledgerRun() runonce.Run {
	o := r.once
	return runonce.Run{Client: r.client, Key: o.ledgerKey, Lock: r.cfg.lockName, ID: o.id, Policy: o.policy, Keep: o.keep,
		Log: r.log, Now: r.cfg.clock.Now}
}

// readLedger reads the ledger consistently, for at most CleanupTimeout.
func (r *runner) readLedger(ctx context.Context) (ledger.Ledger, uint64, error) {
	rctx, cancel := context.WithTimeout(ctx, lockproto.CleanupTimeout)
	defer cancel()
	return store.New(r.client).ReadLedger(rctx, r.once.ledgerKey, r.cfg.lockName)
}

// doneBeforeSession reads the run ledger (consistently) before any session
// exists: a runner that arrives after its run succeeded, or used up its
// attempts, leaves without a single Consul write. While another session
// holds the lock (a mutex whose waiters race), it waits without a session
// too (waitWhileHeld) and reads the ledger again when the key changes: a
// waiter that learns of the success this way writes nothing either. A key
// free on the first look is looked at again after a random wait
// (arrivalSpread): of runners triggered together, the first to wake takes
// it and the others wait without a session. A read that fails, or a run
// not done while the key is free, leaves the decision to the holder, as
// without it.
func (r *runner) doneBeforeSession(ctx context.Context) (int, bool) {
	if r.once == nil || !r.awaitSlot(ctx) {
		return 0, false
	}
	seen, spread := "before creating a session", false
	for ; ; seen = "while waiting for the lock" {
		l, ledgerIndex, err := r.readLedger(ctx)
		if err != nil {
			if ctx.Err() == nil {
				if code, refused := r.refuseUnbegun(l, err); refused {
					return code, true
				}
			}
			r.log.Debug("cannot read the run ledger before creating a session; the holder decides", "error", err.Error())
			return 0, false
		}
		if d, ok := r.runIsDone(l); ok {
			return r.reportDone(d.kind, d.run.Attempts, seen), true
		}
		if code, refused := r.refuseUnbegun(l, nil); refused {
			return code, true
		}
		if code, stop := r.checkOverlap(ctx); stop {
			return code, true
		}
		switch w, p := r.waitWhileHeld(ctx, ledgerIndex, spread && r.spreadsArrival()); w {
		case keyFree:
			if spread || !r.spreadsArrival() || !r.waitArrivalSpread(ctx) {
				return 0, false
			}
			spread = true
			continue // look again: the first to wake may hold the key now
		case keyTimedOut:
			r.log.Error("timed out waiting for the lock", "timeout", r.cfg.timeout)
			return ExitTimeout, true
		case keyPaused:
			return r.logPaused(p, "; stopped waiting"), true
		}
		// The key changed after it was seen held: if the ledger read next
		// does not show the run done, a holder let it go undone.
		r.once.outlived = true
	}
}

// arrivalSpread bounds the random wait of a run-once runner that finds
// the key free on its first look (waitArrivalSpread). Runners triggered
// together each read the ledger and the key free within the winner's few
// milliseconds (its session create and lock op), and each would create a
// session, see the key held, and destroy it: 2 or 3 Raft writes per node
// that does not run the command. Spread over this, the first to wake
// takes the lock and the others, looking again, find it held and wait
// without a session (waitWhileHeld): they write nothing. Only a write can
// tell nodes that arrive in the same instant apart, and a claim would
// cost every node one; so the wait is random, and a node that wakes
// inside the winner's window still races as before (2 writes). The
// start pays it once: on average half of it for one node, less for the
// first of many.
const arrivalSpread = 50 * time.Millisecond

// spreadsArrival: this runner waits arrivalSpread at random before its
// first session: a run-once mutex whose waiters race (the ones that wait
// without a session), not yet outlived, not in a backfill (one node works
// through its slots).
func (r *runner) spreadsArrival() bool {
	return r.once != nil && !r.once.outlived && !r.backfill && !r.lock.IsSemaphore() && !r.lock.Queued()
}

// waitArrivalSpread waits a random time up to arrivalSpread: false when
// ctx ended first.
func (r *runner) waitArrivalSpread(ctx context.Context) bool {
	d := rand.N(arrivalSpread)
	r.log.Debug("the key is free; waiting at random before creating a session", "wait", d.String())
	return consul.Sleep(ctx, d) == nil
}

// waitWithoutSession: a run-once runner lost the race for the free key
// (locked, lockproto.ErrLocked; the hold ended its session). It follows
// the key without a session until the holder lets it go, then reads the
// ledger: errRunDone when the run is done, nil to race again with a new
// session. The session would have cost two Raft writes more when it won
// the next race only to find the run done (the lock op and its release),
// and kept a renewal going while it waited. The supervisor's ledger and
// pause watches go on meanwhile. Only the first loss is waited so: once
// a holder let the key go with the run not done (runOnce.outlived), the
// runner races as a waiter with a session.
func (r *runner) waitWithoutSession(ctx context.Context, locked error, contenders bool) error {
	r.log.Info("another session took the lock first; waiting without a session", "reason", locked.Error())
	if r.overlapActive() { // the winner may run another run: look, as before the session
		if code, stop := r.doneBeforeSession(ctx); stop {
			return errRunStopped{code}
		}
		return ctx.Err()
	}
	r.followHeldKey(ctx, contenders)
	if err := ctx.Err(); err != nil {
		return err
	}
	l, _, err := r.readLedger(ctx)
	if err != nil {
		r.log.Debug("cannot read the run ledger after the key changed; racing again", "error", err.Error())
		return nil
	}
	if d, ok := r.runIsDone(l); ok {
		return errRunDone{d}
	}
	r.once.outlived = true
	return nil
}

// errRunDone ends an acquisition that found the run done without holding
// the lock (waitWithoutSession).
type errRunDone struct{ d runDone }

func (e errRunDone) Error() string { return "the run is done" }

// keyWait is how a wait without a session ended.
type keyWait int

const (
	keyFree     keyWait = iota // free when first read, or the wait ended (ctx): go on with a session
	keyChanged                 // the key changed after it was seen held, or the ledger shows the run done: read it again
	keyTimedOut                // -timeout passed
	keyPaused                  // the lock was paused
)

// waitWhileHeld waits without a session while another session holds the
// lock: it follows the lock key, the ledger (watchedCopy is kept from it)
// and the pause record with blocking queries, until the key changes, the
// ledger shows the run done or a pause appears. Only a run-once mutex
// whose waiters race waits so (a queued waiter needs its session for its
// place in line). The time it waits counts against -timeout. With
// contenders, a key free on the first read is waited on too while another
// runner's session is about to take it (followHeldKey).
func (r *runner) waitWhileHeld(ctx context.Context, ledgerIndex uint64, contenders bool) (keyWait, record.Pause) {
	if r.lock.IsSemaphore() || r.lock.Queued() {
		return keyFree, record.Pause{}
	}
	if r.waitStart.IsZero() {
		r.waitStart = time.Now()
	}
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if r.cfg.timeout > 0 {
		wctx, cancel = context.WithDeadline(ctx, r.waitStart.Add(r.cfg.timeout))
	}
	defer cancel()
	fctx, stop := context.WithCancel(wctx)
	ended := make(chan keyWait, 3)
	paused := make(chan record.Pause, 1)
	var wg sync.WaitGroup
	for _, follow := range []func(){
		func() { ended <- r.followHeldKey(fctx, contenders) },
		func() { r.followLedgerUntilDone(fctx, ledgerIndex); ended <- keyChanged },
		func() { r.watchPause(fctx, paused); ended <- keyPaused },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); follow() }()
	}
	var w keyWait
	select {
	case w = <-ended:
	case <-fctx.Done():
	}
	stop()
	wg.Wait()
	select {
	case p := <-paused:
		return keyPaused, p
	default:
	}
	switch {
	case ctx.Err() != nil:
		return keyFree, record.Pause{}
	case wctx.Err() != nil:
		return keyTimedOut, record.Pause{}
	}
	return w, record.Pause{}
}

// followHeldKey follows the lock key: keyFree when it is free at the first
// answer, keyChanged when it changes after it was seen held. With
// contenders, a key free at the first answer is followed on while another
// runner's session is about to take it (waitForContender).
func (r *runner) followHeldKey(ctx context.Context, contenders bool) keyWait {
	held, from := false, uint64(0)
	if contenders {
		var w keyWait
		if w, held, from = r.waitForContender(ctx); !held {
			return w
		}
	}
	consul.FollowKey(ctx, r.client, r.lock.Key, "the lock key", from, r.log, func(pair *api.KVPair, _ uint64) bool {
		if held || pair == nil || pair.Session == "" {
			return false
		}
		held = true
		r.logHeld(pair)
		return true
	})
	if held {
		return keyChanged
	}
	return keyFree
}

func (r *runner) logHeld(pair *api.KVPair) {
	r.log.Info("waiting for the lock without a session while it is held (run once: its holder may finish the run)",
		"holder_session", pair.Session, "timeout", r.cfg.timeout)
}

// contenderWait bounds how long a run-once runner that finds the key free
// after its arrival wait waits for another runner's session to take it
// (waitForContender). The winner's window, from its session's create to
// its lock op, is a few round trips, longer on a starved machine; a
// contender that crashed in it is waited out after this, well inside
// worst_case_gap (Consul's shortest TTL is 10s). The price of a
// same-named session that never takes this key (another registry's lock
// of the same name): a start this much later.
const contenderWait = 2 * time.Second

// waitForContender is the arrival's second look (arrivalSpread) when the
// key is free: runners woken within the winner's window still find it
// free, and each would create a session (2 or 3 Raft writes) only to lose.
// The winner's session create is a Raft write too, visible before its lock
// op: a session of this runner's name created after the key last changed
// is another runner about to take it, and this one follows the key without
// a session instead, for at most contenderWait. It returns held (and the
// index the key was read held at) when the contender took it, keyChanged
// when the key changed otherwise, keyFree when there is no contender or
// it did not take the key in time (go on with a session, as without the
// look). The session list is a read, filtered by the token's session
// rules; a contender it cannot show costs writes, never safety.
func (r *runner) waitForContender(ctx context.Context) (w keyWait, held bool, index uint64) {
	wctx, cancel := context.WithTimeout(ctx, contenderWait)
	defer cancel()
	w, pending := keyFree, false
	r.once.yieldable = false
	consul.FollowKey(wctx, r.client, r.lock.Key, "the lock key", 0, r.log, func(pair *api.KVPair, asOf uint64) bool {
		switch {
		case pair != nil && pair.Session != "":
			held, index = true, asOf
			r.logHeld(pair)
			return false
		case pending:
			w = keyChanged
			return false
		}
		freeAt := uint64(0)
		if pair != nil {
			freeAt = pair.ModifyIndex
		}
		id, ok := r.contender(wctx, freeAt, "")
		if ok {
			pending = true
			r.log.Info("the key is free and another runner's session is about to take it; waiting without a session",
				"contender_session", id, "for_at_most", contenderWait.String())
		} else {
			r.once.yieldable, r.once.freeAt = true, freeAt
		}
		return ok
	})
	return w, held, index
}

// contender finds a session of this runner's name created after the lock
// key last changed (at index freeAt): another runner between its session's
// create and its lock op. With own, this runner's session, only one
// created before it counts, and none when own is not listed.
func (r *runner) contender(ctx context.Context, freeAt uint64, own string) (string, bool) {
	sessions, _, err := r.client.Session().List((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		r.log.Debug("cannot list sessions; going on with a session", "error", err.Error())
		return "", false
	}
	var before uint64
	if own != "" {
		i := slices.IndexFunc(sessions, func(s *api.SessionEntry) bool { return s.ID == own })
		if i < 0 {
			return "", false
		}
		before = sessions[i].CreateIndex
	}
	for _, s := range sessions {
		if s.Name == r.sessionName() && s.ID != own && s.CreateIndex > freeAt && (own == "" || s.CreateIndex < before) {
			return s.ID, true
		}
	}
	return "", false
}

// yieldToEarlierContender is the arrival's tie-break: two runners whose
// second looks both found the key free and no contender each created a
// session. The one created later (Raft orders the creates; its list comes
// after its own create, so it always sees the earlier one) destroys its
// session before any lock op and waits without one for the earlier, which
// goes on: 2 Raft writes for it rather than 3 (create, refused lock op,
// destroy). Only the first session after such a look yields; the wait is
// waitWithoutSession's, which waits for the contender at most
// contenderWait.
func (r *runner) yieldToEarlierContender(ctx context.Context, s *lockproto.Session) (bool, error) {
	if r.once == nil || !r.once.yieldable || r.once.outlived {
		return false, nil
	}
	r.once.yieldable = false
	id, ok := r.contender(ctx, r.once.freeAt, s.ID)
	if !ok {
		return false, nil
	}
	if err := lockproto.DestroySession(ctx, r.client, s.ID); err != nil {
		r.log.Debug("cannot destroy the session to yield to an earlier contender; racing with it", "error", err.Error())
		return false, nil
	}
	r.log.Info("another runner's session was created first; this runner destroyed its own before any lock op",
		"contender_session", id, "session", s.ID)
	return true, r.waitWithoutSession(ctx, fmt.Errorf("%w: session %s of another runner was created first", lockproto.ErrLocked, id), true)
}

// followLedgerUntilDone follows the run ledger (runonce Run.Follow) from
// its consistent read at index from (its ModifyIndex; 0 when absent),
// keeping the watched copy, until it shows this run done (or ctx ends).
func (r *runner) followLedgerUntilDone(ctx context.Context, from uint64) {
	r.ledgerRun().Follow(ctx, from, func(l ledger.Ledger, modify, asOf uint64, err error) bool {
		r.once.watched.set(l, modify, asOf, err == nil)
		if err != nil {
			return true
		}
		_, done := r.runIsDone(l)
		return !done && !(r.overlapActive() && r.otherRunRunning(l))
	})
}

// runDone is what a waiter saw in the ledger: its run is done.
type runDone struct {
	kind ledger.BeginKind // BeginAlreadySucceeded or BeginExhausted
	run  ledger.Run
}

// watchLedger follows the ledger with blocking queries while the runner
// waits for the lock, and sends on out once the run succeeded or used up
// its attempts. A ledger that does not decode is left to the holder to
// report (the waiter then decides after acquiring, and refuses to run).
func (r *runner) watchLedger(ctx context.Context, out chan<- runDone) {
	r.ledgerRun().Follow(ctx, 0, func(l ledger.Ledger, modify, asOf uint64, err error) bool {
		r.once.watched.set(l, modify, asOf, err == nil)
		if err != nil {
			r.log.Debug("the run ledger does not decode; the holder reports it", "error", err.Error())
		} else if done, ok := r.runIsDone(l); ok {
			out <- done
			return false
		} else if wait, ok := r.runWaits(l); ok {
			out <- wait
			return false
		}
		return true
	})
}

// runIsDone reports whether ledger l shows this run succeeded, or
// exhausted with no attempt left under the declared max_attempts.
// A run pruned from the ledger is done when its pruned outcome says so.
func (r *runner) runIsDone(l ledger.Ledger) (runDone, bool) {
	if d, ok := r.superseded(l); ok {
		return d, true
	}
	if kind, run, ok := r.ledgerRun().Done(l); ok {
		return runDone{kind: kind, run: run}, true
	}
	return runDone{}, false
}

// reportDone logs why the command is not started and returns the exit
// code: -exit-code-if-done when the run succeeded, 121 when it used up its
// attempts.
func (r *runner) reportDone(kind ledger.BeginKind, attempts []ledger.Attempt, seen string) int {
	if kind == ledger.BeginSuperseded {
		return r.reportSuperseded(attempts, seen)
	}
	if kind == ledger.BeginAlreadySucceeded {
		var a ledger.Attempt
		for _, at := range attempts {
			if at.Outcome == ledger.RunSucceeded {
				a = at
			}
		}
		r.log.Info("run already succeeded; the command was not started", "run_id", r.once.id, "seen", seen,
			"ran_on", a.Node, "attempt", a.Number, "fencing_token", a.FencingToken, "session", a.Session,
			"started", a.Started.Format(time.RFC3339Nano), "finished", a.Finished.Format(time.RFC3339Nano),
			"exit_code", r.cfg.exitIfDone)
		return r.cfg.exitIfDone
	}
	var last ledger.Attempt
	if len(attempts) > 0 {
		last = attempts[len(attempts)-1]
	}
	r.log.Error("run used up its attempts; the command was not started (raise run_once.max_attempts for more)",
		"run_id", r.once.id, "seen", seen, "attempts", len(attempts), "max_attempts", r.once.maxAttempts,
		"last_outcome", string(last.Outcome), "last_node", last.Node, "exit_code", ledger.ExitRunExhausted)
	r.notStarted = HookExhausted
	return ledger.ExitRunExhausted
}

// runEnv is the environment of a run-once attempt's command.
func (r *runner) runEnv() []string {
	if r.once == nil {
		return nil
	}
	env := []string{EnvRunID + "=" + r.once.id, EnvAttempt + "=" + strconv.Itoa(r.once.attempt)}
	if r.once.scheduled != "" {
		env = append(env, EnvScheduledTime+"="+r.once.scheduled)
	}
	return env
}
