package runner

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// workerToken is the token consullock_acl_policy renders for a run-once
// worker of l (RenderRules): key write on the lock key and on its ledger,
// session write on the node, and key read on the lock's record, its
// profile's and its pause record: reading the pause is all a pause adds.
func workerToken(t testing.TB, l lockmodel.Lock) string {
	t.Helper()
	rules := aclrules.RenderRules(aclrules.RulesInput{
		LockKeys:            []string{l.Key},
		RunLedgerKeys:       []string{ledgerKey(l)},
		SessionNodePrefixes: []string{agent.NodeName},
		ReadKeys: []string{
			lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, l.Name),
			lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, l.SessionDefaults),
			record.PauseKey(lockmodel.DefaultRegistryPrefix, l.Name),
		},
	})
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

// consullock runs `consullock <args>` with the management token (an
// operator) and returns its exit code and output.
func consullock(t testing.TB, name string, args ...string) (int, string) {
	t.Helper()
	return consullockAs(t, agent.ManagementToken, name, args...)
}

// consullockAs is consullock with token.
func consullockAs(t testing.TB, token, name string, args ...string) (int, string) {
	t.Helper()
	p := startProc(t, name, processEnv(agent.Addr, token), runnerBin, args...)
	p.closeStdin()
	code := p.wait(30 * time.Second)
	return code, p.out.String()
}

// A paused run-once lock with three runners triggered: none runs the
// command, each logs who paused it, when and why, and exits 0 (or its
// -exit-code-if-paused). The worker token, which reads the pause record,
// cannot write it (a real 403). After resume the next trigger runs the
// command once.
func TestPause_pausedLockRunsNothingAndResumedRunsOnce(t *testing.T) {
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: "pause/" + uniqueName(t, "p"), RunOnce: &ledger.RunOnce{Period: time.Hour}},
		fastProfile(t, time.Second))
	token := workerToken(t, l)
	recordFile := filepath.Join(t.TempDir(), "record")
	reason := "INC-1234: downstream billing outage"
	if code, out := consullock(t, "pause", "pause", "-lock", l.Name, "-reason", reason, "-by", "alice@ops"); code != 0 || !strings.Contains(out, "paused lock "+l.Name) {
		t.Fatalf("pause exited %d:\n%s", code, out)
	}

	// The worker token reads the pause record and may not write it.
	worker, err := api.NewClient(&api.Config{Address: agent.Addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	pauseKey := record.PauseKey(lockmodel.DefaultRegistryPrefix, l.Name)
	if pair, _, err := worker.KV().Get(pauseKey, nil); err != nil || pair == nil {
		t.Fatalf("worker reading %s: %v, %v", pauseKey, pair, err)
	}
	if _, err := worker.KV().Put(&api.KVPair{Key: pauseKey, Value: []byte("{}")}, nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("worker writing %s: %v, want a 403", pauseKey, err)
	}

	var procs []*proc
	hook := filepath.Join(t.TempDir(), "hook")
	for i := range 3 {
		args := []string{"-lock", l.Name, "-run-id", "r1"}
		if i == 2 {
			args = append(args, "-exit-code-if-paused", "120", "-on-outcome", hookRecorder(hook))
		}
		procs = append(procs, startRun(t, fmt.Sprintf("runner %d", i), token, args, childArgs(recordFile, fmt.Sprint(i))...))
	}
	for i, p := range procs {
		want := 0
		if i == 2 {
			want = 120
		}
		if code := p.wait(30 * time.Second); code != want {
			t.Fatalf("%s exited %d, want %d:\n%s", p.name, code, want, p.out.String())
		}
		out := p.out.String()
		for _, s := range []string{"the lock is paused; the command was not run", "paused_by=alice@ops", `reason="` + reason + `"`, "paused_at="} {
			if !strings.Contains(out, s) {
				t.Fatalf("%s does not say %q:\n%s", p.name, s, out)
			}
		}
	}
	if runs := readRuns(t, recordFile); len(runs) != 0 {
		t.Fatalf("the command ran %d times on a paused lock", len(runs))
	}
	requireNotStartedHook(t, hook, HookPaused, "r1")
	if ledger, _ := readLedger(t, l); len(ledger.Runs) != 0 {
		t.Fatalf("a paused lock's ledger has runs: %+v", ledger)
	}

	if code, out := consullock(t, "resume", "resume", "-lock", l.Name); code != 0 || !strings.Contains(out, "resumed lock "+l.Name) {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	procs = nil
	for i := range 3 {
		procs = append(procs, startRun(t, fmt.Sprintf("runner %d after resume", i), token, []string{"-lock", l.Name, "-run-id", "r1"},
			childArgs(recordFile, fmt.Sprint("resumed-", i))...))
	}
	for _, p := range procs {
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	if runs := readRuns(t, recordFile); len(runs) != 1 {
		t.Fatalf("after resume the command ran %d times, want once", len(runs))
	}
	if run := ledgerRun(t, l, "r1"); run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
		t.Fatalf("run r1: %+v", run)
	}
}

// A waiter leaves when the lock is paused; the holder's command, already
// running, is left to finish and succeeds.
func TestPause_waiterLeavesRunningCommandFinishes(t *testing.T) {
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: "pause/" + uniqueName(t, "p")}, fastProfile(t, time.Second))
	token := runnerToken(t, l.Prefix)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "A", "-wait-stdin")...)
	waitStarted(t, record, "A")
	b := startRun(t, "waiter", token, []string{"-lock", l.Name}, childArgs(record, "B")...)
	waitOutput(t, b, "waiting for the lock")
	if code, out := consullock(t, "pause", "pause", "-lock", l.Name, "-reason", "maintenance"); code != 0 {
		t.Fatalf("pause exited %d:\n%s", code, out)
	}
	if code := b.wait(30 * time.Second); code != 0 || !strings.Contains(b.out.String(), "stopped waiting") {
		t.Fatalf("waiter exited %d:\n%s", code, b.out.String())
	}
	a.closeStdin()
	if code := a.wait(30 * time.Second); code != 0 {
		t.Fatalf("holder exited %d:\n%s", code, a.out.String())
	}
	runs := readRuns(t, record)
	if len(runs) != 1 || runs[0].tag != "A" || !runs[0].ended {
		t.Fatalf("runs %+v, want A's only, finished", runs)
	}
}

// Bad input writes nothing: a reason over the limit, a blank one, an
// unknown lock; release refuses without -yes when stdin is not a
// terminal.
func TestJobControl_badInputWritesNothing(t *testing.T) {
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: "pause/" + uniqueName(t, "p")}, fastProfile(t, time.Second))
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"pause", "-lock", l.Name, "-reason", strings.Repeat("x", record.MaxPauseReasonLength+1)}, 2, "-reason: "},
		{[]string{"pause", "-lock", l.Name}, 2, "-reason: "},
		{[]string{"pause", "-lock", "no-such-lock", "-reason", "x"}, 2, `-lock "no-such-lock"`},
		{[]string{"resume", "-lock", "bad/name"}, 2, "-lock: "},
		{[]string{"release", "-lock", l.Name, "-reason", "stuck"}, 1, "without -yes: standard input is not a terminal"},
		{[]string{"release", "-lock", l.Name, "-reason", "stuck", "-yes"}, 1, "is not held"},
	} {
		code, out := consullock(t, tc.args[0], tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) || !strings.Contains(out, "nothing") {
			t.Errorf("consullock %s: exit %d, want %d saying %q and that nothing was written:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
		}
	}
	if pair, _, _ := agent.Client().KV().Get(record.PauseKey(lockmodel.DefaultRegistryPrefix, l.Name), nil); pair != nil {
		t.Fatalf("a pause record was written: %s", pair.Value)
	}
}

// A holder whose command is frozen (SIGSTOP: stuck, while its runner
// keeps renewing) is broken with release: its session ends, its runner
// sees the lock lost and kills the command (SIGKILL after -grace), the
// next holder starts only after the lock-delay, after the frozen command
// was killed, and the ledger records the attempt released, who and why.
func TestRelease_frozenHolderNextStartsAfterLockDelay(t *testing.T) {
	const lockDelay = 5 * time.Second
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: "pause/" + uniqueName(t, "p"), RunOnce: &ledger.RunOnce{Period: time.Hour}},
		fastProfile(t, lockDelay))
	token := workerToken(t, l)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "A", token, []string{"-lock", l.Name, "-run-id", "r1", "-grace", "1s"}, childArgs(record, "A", "-sleep", "5m")...)
	waitStarted(t, record, "A")
	b := startRun(t, "B", token, []string{"-lock", l.Name, "-run-id", "r1", "-grace", "1s"}, childArgs(record, "B")...)
	waitOutput(t, b, "waiting for the lock")
	child := lastRun(t, record, "A")
	if err := syscall.Kill(child.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	code, out := consullock(t, "release", "release", "-lock", l.Name, "-reason", "stuck on NFS", "-by", "bob@ops", "-yes")
	if code != 0 {
		t.Fatalf("release exited %d:\n%s", code, out)
	}
	for _, s := range []string{"the next holder can acquire from", "lock-delay 5s", "recorded run r1 attempt 1 as released"} {
		if !strings.Contains(out, s) {
			t.Fatalf("release does not say %q:\n%s", s, out)
		}
	}
	if code := a.wait(30 * time.Second); code != ExitLockLost {
		t.Fatalf("A exited %d, want %d:\n%s", code, ExitLockLost, a.out.String())
	}
	aDone := a.exited
	if code := b.wait(60 * time.Second); code != 0 {
		t.Fatalf("B exited %d:\n%s", code, b.out.String())
	}
	runB := lastRun(t, record, "B")
	if runB.start.Sub(released) < lockDelay {
		t.Fatalf("B started %s after the release, within the lock-delay %s", runB.start.Sub(released), lockDelay)
	}
	if !aDone.Before(runB.start) {
		t.Fatalf("A's runner (which kills the frozen command) exited %s after B started", aDone.Sub(runB.start))
	}
	if err := syscall.Kill(child.pid, 0); err == nil {
		t.Fatalf("the frozen command %d is still alive", child.pid)
	}
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) != 2 || run.Attempts[0].Outcome != ledger.RunReleased || run.Attempts[0].ReleasedBy != "bob@ops" ||
		run.Attempts[0].Reason != "stuck on NFS" || run.Outcome != ledger.RunSucceeded {
		t.Fatalf("run r1: %+v", run)
	}
	t.Logf("release -> A's runner exited (frozen command killed) %s; -> B's command started %s (lock-delay %s)",
		aDone.Sub(released).Round(time.Millisecond), runB.start.Sub(released).Round(time.Millisecond), lockDelay)
}

// release with a token that may read the lock and its holder's session
// but not end it: a real 403, answered with the rule it needs; the holder keeps
// the lock.
func TestRelease_namesTheRuleOnA403(t *testing.T) {
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: "pause/" + uniqueName(t, "p")}, fastProfile(t, time.Second))
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "A", runnerToken(t, l.Prefix), []string{"-lock", l.Name}, childArgs(record, "A", "-wait-stdin")...)
	waitStarted(t, record, "A")
	tok, err := agent.MintToken(uniqueName(t, "policy"), fmt.Sprintf(`key_prefix "%s/" { policy = "read" }
key_prefix %q { policy = "read" }
session_prefix "" { policy = "read" }
`, lockmodel.DefaultRegistryPrefix, l.Prefix), 0)
	if err != nil {
		t.Fatal(err)
	}
	code, out := consullockAs(t, tok.SecretID, "release", "release", "-lock", l.Name, "-reason", "stuck", "-yes")
	if want := fmt.Sprintf(`session_prefix %q { policy = "write" }`, agent.NodeName); code != 3 || !strings.Contains(out, want) || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("release exited %d, want 3 naming %s:\n%s", code, want, out)
	}
	if pair, _, err := agent.Client().KV().Get(l.Key, nil); err != nil || pair == nil || pair.Session == "" {
		t.Fatalf("the holder lost the lock: %+v %v", pair, err)
	}
	a.closeStdin()
	if code := a.wait(30 * time.Second); code != 0 {
		t.Fatalf("A exited %d", code)
	}
}

// A waiter that takes a declared lock over starts its command with no
// request after its lock transaction: that the lock is not paused is
// checked in the transaction itself (a check-not-exists op on the pause
// record, lockproto.Settings.BlockingKey), not by reading the record after it.
func TestPause_aHandOverReadsNoPauseRecordAfterTheLockOp(t *testing.T) {
	t.Parallel()
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: uniqueName(t, "prefix")}, fastProfile(t, time.Second))
	token := workerToken(t, l)
	recordFile := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(recordFile, "a", "-wait-stdin")...)
	waitStarted(t, recordFile, "a")
	proxy := newCountingProxy(t, nil, 0)
	b := startRunAt(t, "runner b", proxy.addr, token, []string{"-lock", l.Name}, childArgs(recordFile, "b")...)
	proxy.waitBlocking(t, l.Key)
	a.closeStdin()
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d", code)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d", code)
	}
	requests := proxy.seen()
	lockOp := slices.IndexFunc(requests, func(r string) bool { return strings.HasPrefix(r, "PUT /v1/txn") })
	if lockOp < 0 {
		t.Fatalf("runner b sent no lock transaction: %q", requests)
	}
	pauseKey := record.PauseKey(lockmodel.DefaultRegistryPrefix, l.Name)
	for _, r := range requests[lockOp:] {
		if strings.HasPrefix(r, "GET /v1/kv/"+pauseKey+"?") && !strings.Contains(r, "index=") {
			t.Fatalf("runner b read the pause record after its lock transaction (%q); requests: %q", r, requests)
		}
	}
}
