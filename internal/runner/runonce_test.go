package runner

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// declareRunOnce declares a run-once lock under a fresh prefix with the
// fast profile (lock-delay 1s) and returns it with a worker token: the
// runner's rules plus key write on the lock's ledger only.
func declareRunOnce(t testing.TB, ro ledger.RunOnce) (lockmodel.Lock, string) {
	t.Helper()
	return declareRunOnceWith(t, ro, fastProfile(t, time.Second))
}

// declareRunOnceWith is declareRunOnce with session profile p.
func declareRunOnceWith(t testing.TB, ro ledger.RunOnce, p *lockmodel.SessionProfile) (lockmodel.Lock, string) {
	t.Helper()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, RunOnce: &ro}, p)
	rules := fmt.Sprintf(`key_prefix %q { policy = "write" }
key_prefix "%s/" { policy = "read" }
key %q { policy = "write" }
session %q { policy = "write" }
`, prefix, lockmodel.DefaultRegistryPrefix, ledgerKey(l), agent.NodeName)
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l, tok.SecretID
}

func ledgerKey(l lockmodel.Lock) string {
	return record.RunLedgerKey(lockmodel.DefaultRegistryPrefix, l.Name)
}

// readLedger reads the lock's ledger consistently; ok is false when there
// is none.
func readLedger(t testing.TB, l lockmodel.Lock) (ledger.Ledger, *api.KVPair) {
	t.Helper()
	pair, _, err := agent.Client().KV().Get(ledgerKey(l), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil {
		return ledger.Ledger{}, nil
	}
	led, err := record.DecodeLedger(pair.Value)
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	return led, pair
}

// ledgerRun is run id of the ledger; it fails the test when it is absent.
func ledgerRun(t testing.TB, l lockmodel.Lock, id string) ledger.Run {
	t.Helper()
	led, _ := readLedger(t, l)
	i := led.Find(id)
	if i < 0 {
		t.Fatalf("run %q is not in the ledger: %+v", id, led)
	}
	return led.Runs[i]
}

func runIDCount() int {
	if os.Getenv("FAULTS_FULL") != "" {
		return 200
	}
	return 50
}

// Five runners triggered together on one run ID, for many run IDs: the
// command runs exactly once per run ID, as attempt 1, with the run ID in
// its environment; the ledger records that execution (its fencing token)
// as the run's one succeeded attempt; the four others exit 0 saying who
// ran it, and no command runs after a success was recorded.
func TestRunOnce_runnersTriggeredTogetherRunEachRunIDOnce(t *testing.T) {
	const n = 5
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	ids := runIDCount()
	for i := range ids {
		id := fmt.Sprintf("batch-%03d", i)
		var procs []*proc
		for j := range n {
			tag := fmt.Sprintf("%s.%d", id, j)
			procs = append(procs, startRun(t, "runner "+tag, token, []string{"-lock", l.Name, "-run-id", id},
				childArgs(record, tag, "-sleep", "30ms")...))
		}
		skipped := 0
		for _, p := range procs {
			if code := p.wait(60 * time.Second); code != 0 {
				t.Fatalf("%s exited %d, want 0:\n%s", p.name, code, p.out.String())
			}
			if strings.Contains(p.out.String(), "run already succeeded; the command was not started") {
				skipped++
			}
		}
		if skipped != n-1 {
			t.Fatalf("run %s: %d runners said the run already succeeded, want %d", id, skipped, n-1)
		}
		run := ledgerRun(t, l, id)
		var ran []*childRun
		for _, r := range readRuns(t, record) {
			if r.runID == id {
				ran = append(ran, r)
			}
		}
		if len(ran) != 1 || ran[0].attempt != "1" || !ran[0].ended {
			t.Fatalf("run %s: %d executions (%+v), want exactly one, attempt 1", id, len(ran), ran)
		}
		if run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 || run.Attempts[0].FencingToken != ran[0].token ||
			run.Attempts[0].Session != ran[0].session {
			t.Fatalf("run %s in the ledger: %+v; want one succeeded attempt with the execution's token %d", id, run, ran[0].token)
		}
	}
	runs := readRuns(t, record)
	if len(runs) != ids {
		t.Fatalf("%d executions for %d run IDs", len(runs), ids)
	}
	if maxConcurrent(runs) != 1 {
		t.Fatalf("up to %d commands ran at once", maxConcurrent(runs))
	}
	led, _ := readLedger(t, l)
	if len(led.Runs) != ledger.DefaultRunKeep {
		t.Fatalf("the ledger keeps %d runs, want keep's default %d", len(led.Runs), ledger.DefaultRunKeep)
	}
	t.Logf("MEASURED %d run IDs x %d runners triggered together: %d executions, %d runners skipped after a recorded success",
		ids, n, len(runs), ids*(n-1))
}

// Without -run-id, a run_once lock's run ID is the period slot of the
// start (RunSlot): three runners triggered together run the command once.
func TestRunOnce_runIDIsThePeriodSlotWithoutRunID(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: 24 * time.Hour, Offset: 12 * time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	before, _ := ledger.RunSlot(time.Now(), 24*time.Hour, 12*time.Hour)
	var procs []*proc
	for _, tag := range []string{"a", "b", "c"} {
		procs = append(procs, startRun(t, "runner "+tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-sleep", "50ms")...))
	}
	for _, p := range procs {
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}
	after, _ := ledger.RunSlot(time.Now(), 24*time.Hour, 12*time.Hour)
	runs := readRuns(t, record)
	if len(runs) != 1 || (runs[0].runID != before && runs[0].runID != after) {
		t.Fatalf("executions %+v; want one, with %s=%s", runs, EnvRunID, before)
	}
	if run := ledgerRun(t, l, runs[0].runID); run.Outcome != ledger.RunSucceeded {
		t.Fatalf("ledger run %+v", run)
	}
}

// A holder SIGKILLed mid-run (its command dies with it) leaves its attempt
// "running"; the next holder records it crashed and runs attempt 2.
func TestRunOnce_holderKilledMidRunIsRecordedCrashedAndRetried(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-sleep", "5m")...)
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, args, childArgs(record, "b", "-sleep", "50ms")...)
	waitOutput(t, b, "holder_session=") // waiting, without a session
	if run := ledgerRun(t, l, "r1"); run.Outcome != ledger.RunRunning || len(run.Attempts) != 1 {
		t.Fatalf("while a runs, the ledger says %+v; want attempt 1 running", run)
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait(10 * time.Second)
	// The servers invalidate a dead node's session; destroying it is the
	// same end without waiting for the TTL.
	if _, err := agent.Client().Session().Destroy(readRuns(t, record)[0].session, nil); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 2 || runs[1].tag != "b" || runs[1].attempt != "2" {
		t.Fatalf("executions %+v; want b as attempt 2", runs)
	}
	run := ledgerRun(t, l, "r1")
	if run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 2 ||
		run.Attempts[0].Outcome != ledger.RunCrashed || run.Attempts[0].Session != runs[0].session ||
		run.Attempts[1].Outcome != ledger.RunSucceeded || run.Attempts[1].Session != runs[1].session {
		t.Fatalf("ledger run %+v; want attempt 1 crashed (a), attempt 2 succeeded (b)", run)
	}
}

// A holder whose session is ended out of band stops its command, exits
// 123 and records the attempt "lost" afterwards (check-and-set, the
// session no longer holding the lock); the next runner runs attempt 2.
func TestRunOnce_lostAttemptIsRecordedLostAndRetried(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-sleep", "5m")...)
	waitStarted(t, record, "a")
	if _, err := agent.Client().Session().Destroy(readRuns(t, record)[0].session, nil); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(time.Minute); code != ExitLockLost {
		t.Fatalf("runner a exited %d, want %d", code, ExitLockLost)
	}
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) != 1 || run.Attempts[0].Outcome != ledger.RunLost || run.Outcome != ledger.RunLost {
		t.Fatalf("ledger run %+v; want attempt 1 lost", run)
	}
	b := startRun(t, "runner b", token, args, childArgs(record, "b", "-sleep", "50ms")...)
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	if run := ledgerRun(t, l, "r1"); run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 2 {
		t.Fatalf("ledger run %+v; want attempt 2 succeeded", run)
	}
}

// A run whose command fails max_attempts times is exhausted: the next
// runner does not start the command and exits 121, and one after it
// writes nothing more.
func TestRunOnce_maxAttemptsReachedExits121WithoutRunning(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, MaxAttempts: 2})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	for i, want := range []int{3, 3, ledger.ExitRunExhausted} {
		p := startRun(t, fmt.Sprintf("runner %d", i), token, args, childArgs(record, strconv.Itoa(i), "-exit", "3")...)
		if code := p.wait(time.Minute); code != want {
			t.Fatalf("runner %d exited %d, want %d:\n%s", i, code, want, p.out.String())
		}
	}
	if runs := readRuns(t, record); len(runs) != 2 {
		t.Fatalf("%d executions, want 2 (max_attempts)", len(runs))
	}
	run := ledgerRun(t, l, "r1")
	if run.Outcome != ledger.RunExhausted || len(run.Attempts) != 2 || run.Attempts[1].Outcome != ledger.RunFailed ||
		run.Attempts[1].ExitCode == nil || *run.Attempts[1].ExitCode != 3 {
		t.Fatalf("ledger run %+v; want exhausted after 2 failed attempts (exit 3)", run)
	}
	_, before := readLedger(t, l)
	p := startRun(t, "runner after", token, args, childArgs(record, "after")...)
	if code := p.wait(time.Minute); code != ledger.ExitRunExhausted {
		t.Fatalf("runner after exited %d, want %d", code, ledger.ExitRunExhausted)
	}
	if !strings.Contains(p.out.String(), "run used up its attempts") {
		t.Fatalf("runner after does not say why:\n%s", p.out.String())
	}
	if _, after := readLedger(t, l); after.ModifyIndex != before.ModifyIndex {
		t.Fatalf("an exhausted run was written again (index %d -> %d)", before.ModifyIndex, after.ModifyIndex)
	}
}

// Waiters leave as soon as the ledger shows the run succeeded, without
// acquiring: exit 0 naming the node that ran it, or -exit-code-if-done.
// The lock stays held by a runner of another run, and the success is
// written by hand, so the waiters can only have seen it in their watch of
// the ledger (TestRunOnce_runnersTriggeredTogether... covers the hand-over
// itself, where a waiter may also acquire the released lock first).
func TestRunOnce_waitersLeaveWhenTheRunSucceeds(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	recordFile := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder of another run", token, []string{"-lock", l.Name, "-run-id", "other"}, childArgs(recordFile, "holder", "-wait-stdin")...)
	waitStarted(t, recordFile, "holder")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	b := startRun(t, "runner b", token, append(args, "-exit-code-if-done", "122"), childArgs(recordFile, "b")...)
	c := startRun(t, "runner c", token, args, childArgs(recordFile, "c")...)
	waitOutput(t, b, "holder_session=")
	waitOutput(t, c, "holder_session=")

	led, pair := readLedger(t, l)
	finished := time.Now().UTC()
	led.Runs = append(led.Runs, ledger.Run{ID: "r1", Outcome: ledger.RunSucceeded, Attempts: []ledger.Attempt{{
		Number: 1, Node: "node-that-ran-it", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 7,
		Started: finished.Add(-time.Second), Finished: finished, ExitCode: new(int), Outcome: ledger.RunSucceeded}}})
	value, err := record.EncodeLedger(led)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := agent.Client().KV().CAS(&api.KVPair{Key: ledgerKey(l), Value: value, ModifyIndex: pair.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("write the success: ok=%v err=%v", ok, err)
	}
	for p, want := range map[*proc]int{b: ledger.ExitRunAlreadySucceededDistinct, c: 0} {
		if code := p.wait(time.Minute); code != want {
			t.Fatalf("%s exited %d, want %d:\n%s", p.name, code, want, p.out.String())
		}
		out := p.out.String()
		if !strings.Contains(out, "run already succeeded") || !strings.Contains(out, `seen="while waiting for the lock"`) ||
			!strings.Contains(out, "ran_on=node-that-ran-it") || !strings.Contains(out, "fencing_token=7") {
			t.Fatalf("%s does not say it saw the success while waiting, and who ran it:\n%s", p.name, out)
		}
	}
	if pair := waitKey(t, l.Key, time.Second, heldByOther("")); pair.Session != readRuns(t, recordFile)[0].session {
		t.Fatalf("the holder lost the lock: %+v", pair)
	}
	holder.closeStdin()
	if code := holder.wait(time.Minute); code != 0 {
		t.Fatalf("holder exited %d", code)
	}
	if runs := readRuns(t, recordFile); len(runs) != 1 {
		t.Fatalf("%d executions, want only the holder's", len(runs))
	}
}

// A ledger that does not decode, or that has a field no runner writes, is
// a clear error naming the ledger and the field: exit 125, nothing run,
// nothing written.
func TestRunOnce_corruptLedgerIsAnErrorAndNothingRuns(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	recordFile := filepath.Join(t.TempDir(), "record")
	good, err := record.EncodeLedger(ledger.Ledger{Lock: l.Name, Runs: []ledger.Run{{ID: "r0", Outcome: ledger.RunSucceeded,
		Attempts: []ledger.Attempt{{Number: 1, Node: "n", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 7, Started: time.Now(), Finished: time.Now(),
			ExitCode: new(int), Outcome: ledger.RunSucceeded}}}}})
	if err != nil {
		t.Fatal(err)
	}
	handWritten := bytes.Replace(good, []byte(`"outcome":"succeeded"`), []byte(`"outcome":"done"`), 1)
	kv := agent.Client().KV()
	for _, tc := range []struct {
		name, want string
		value      []byte
	}{
		{"not JSON", ledgerKey(l), []byte(`{"kind":"run_ledger",`)},
		{"hand-written outcome", "runs[0].outcome", handWritten},
	} {
		if _, err := kv.Put(&api.KVPair{Key: ledgerKey(l), Value: tc.value}, nil); err != nil {
			t.Fatal(err)
		}
		p := startRun(t, "runner "+tc.name, token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(recordFile, tc.name)...)
		if code := p.wait(time.Minute); code != ExitSetup {
			t.Fatalf("%s: exited %d, want %d:\n%s", tc.name, code, ExitSetup, p.out.String())
		}
		if out := p.out.String(); !strings.Contains(out, "cannot use the run ledger; the command was not started") || !strings.Contains(out, tc.want) {
			t.Fatalf("%s: the error does not name %q:\n%s", tc.name, tc.want, out)
		}
		if pair, _, _ := kv.Get(ledgerKey(l), &api.QueryOptions{RequireConsistent: true}); !bytes.Equal(pair.Value, tc.value) {
			t.Fatalf("%s: the ledger was rewritten: %s", tc.name, pair.Value)
		}
	}
	if runs := readRuns(t, recordFile); len(runs) != 0 {
		t.Fatalf("%d executions on a corrupt ledger, want 0", len(runs))
	}
}

// -run-id on a lock without run_once uses the defaults (max_attempts 3);
// on a semaphore it is a setup error naming the lock; a token that may not
// write the ledger is refused before the command starts (exit 125 naming
// the permission), and nothing runs.
func TestRunOnce_runIDOnAPlainLockASemaphoreAndWithoutLedgerPermission(t *testing.T) {
	t.Parallel()
	record := filepath.Join(t.TempDir(), "record")

	prefix := testenv.UniquePrefix(t.Name())
	plain := declare(t, lockmodel.Lock{Name: uniqueName(t, "plain"), Prefix: prefix + "/plain"}, fastProfile(t, time.Second))
	rules := fmt.Sprintf(`key_prefix %q { policy = "write" }
key_prefix "%s/" { policy = "read" }
key %q { policy = "write" }
session %q { policy = "write" }
`, prefix, lockmodel.DefaultRegistryPrefix, ledgerKey(plain), agent.NodeName)
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := startRun(t, "plain", tok.SecretID, []string{"-lock", plain.Name, "-run-id", "r1"}, childArgs(record, "plain")...)
	if code := p.wait(time.Minute); code != 0 {
		t.Fatalf("plain lock with -run-id exited %d:\n%s", code, p.out.String())
	}
	if !strings.Contains(p.out.String(), "max_attempts=3") || ledgerRun(t, plain, "r1").Outcome != ledger.RunSucceeded {
		t.Fatalf("plain lock with -run-id: no run recorded with the default max_attempts:\n%s", p.out.String())
	}

	sem := declare(t, lockmodel.Lock{Name: uniqueName(t, "sem"), Prefix: prefix + "/sem", Limit: 2}, fastProfile(t, time.Second))
	p = startRun(t, "semaphore", tok.SecretID, []string{"-lock", sem.Name, "-run-id", "r1"}, childArgs(record, "semaphore")...)
	if code := p.wait(time.Minute); code != ExitSetup || !strings.Contains(p.out.String(), "is a semaphore (limit 2); run once needs a mutex") {
		t.Fatalf("semaphore with -run-id exited %d:\n%s", code, p.out.String())
	}

	noLedger := declare(t, lockmodel.Lock{Name: uniqueName(t, "noledger"), Prefix: prefix + "/noledger"}, fastProfile(t, time.Second))
	p = startRun(t, "no ledger permission", runnerToken(t, prefix), []string{"-lock", noLedger.Name, "-run-id", "r1"}, childArgs(record, "noledger")...)
	if code := p.wait(time.Minute); code != ExitSetup || !strings.Contains(p.out.String(), "cannot use the run ledger; the command was not started") ||
		!strings.Contains(p.out.String(), "key:write") {
		t.Fatalf("without ledger permission exited %d:\n%s", code, p.out.String())
	}
	if runs := readRuns(t, record); len(runs) != 1 || runs[0].tag != "plain" {
		t.Fatalf("executions %+v, want only the plain lock's", runs)
	}
}

// outageProxy forwards to the agent and, while failing is set, answers the
// requests fails selects with Consul's "No cluster leader", as during a
// Raft election; everything else passes.
type outageProxy struct {
	addr    string
	fails   func(*http.Request) bool
	failing atomic.Bool
	failed  atomic.Int64

	mu     sync.Mutex
	writes []string // PUT and DELETE requests passed on, renewals left out
}

// failsTxn selects transactions (PUT /v1/txn).
func failsTxn(r *http.Request) bool { return r.Method == http.MethodPut && r.URL.Path == "/v1/txn" }

func newOutageProxy(t *testing.T, fails func(*http.Request) bool) *outageProxy {
	t.Helper()
	p := &outageProxy{fails: fails}
	p.addr = agentProxy(t, agent.Addr, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if p.failing.Load() && p.fails(r) {
			p.failed.Add(1)
			http.Error(w, "No cluster leader", http.StatusInternalServerError)
			return
		}
		if (r.Method == http.MethodPut || r.Method == http.MethodDelete) && !strings.HasPrefix(r.URL.Path, "/v1/session/renew/") {
			p.mu.Lock()
			p.writes = append(p.writes, r.Method+" "+r.URL.Path)
			p.mu.Unlock()
		}
		forward.ServeHTTP(w, r)
	})
	return p
}

// A command that succeeded while Consul could not commit transactions (no
// leader for longer than one attempt of the release transaction): the
// runner keeps the lock and sends the outcome again until it is recorded,
// instead of releasing without it (the next holder would then find the
// attempt running, record it crashed and run the command a second time).
func TestRunOnce_outcomeIsRecordedAfterATransactionOutage(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	proxy := newOutageProxy(t, failsTxn)
	a := startRunAt(t, "runner a", proxy.addr, token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "a", "-wait-stdin")...)
	waitStarted(t, record, "a")
	proxy.failing.Store(true)
	a.closeStdin()
	waitOutput(t, a, "command exited")
	outage := 2*lockproto.CleanupTimeout + time.Second // longer than one try of the release transaction
	time.Sleep(outage)
	proxy.failing.Store(false)
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d:\n%s", code, a.out.String())
	}
	run := ledgerRun(t, l, "r1")
	if run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
		t.Fatalf("after a %s transaction outage (%d transactions refused) the ledger says %+v; want attempt 1 succeeded",
			outage, proxy.failed.Load(), run)
	}
	if !strings.Contains(a.out.String(), "cannot record the run's outcome yet; trying again while the session may hold the lock") {
		t.Fatalf("the runner does not say it tried again:\n%s", a.out.String())
	}
	b := startRun(t, "runner b", token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "b")...)
	if code := b.wait(time.Minute); code != 0 || len(readRuns(t, record)) != 1 {
		t.Fatalf("runner b exited %d, executions %d; want 0 and the one execution", code, len(readRuns(t, record)))
	}
}

// A run-once waiter that could not renew its session while it waited (as
// during an election) must count the lock lost the moment it acquires it;
// when the run has succeeded meanwhile, that is its answer: exit 0, "run
// already succeeded", not 123. Its renewals and its watch of the ledger
// fail through a proxy, so it acquires before it can see the success.
// The waiter queues (waiters = "queue"), so it waits with a session.
func TestRunOnce_waiterLostAtAcquisitionAfterTheSuccessExits0(t *testing.T) {
	t.Parallel()
	// A queued waiter: it waits with its session (one that races waits
	// without one, and learns of the success before any acquisition).
	l, token := declareWithWaiters(t, lockmodel.WaitersQueue, &ledger.RunOnce{Period: time.Hour}, fastProfile(t, time.Second), false)
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-wait-stdin")...)
	waitStarted(t, record, "a")
	proxy := newOutageProxy(t, func(r *http.Request) bool {
		return strings.HasPrefix(r.URL.Path, "/v1/session/renew/") ||
			r.URL.Path == "/v1/kv/"+ledgerKey(l) && r.URL.Query().Has("index")
	})
	proxy.failing.Store(true)
	b := startRunAt(t, "runner b", proxy.addr, token, args, childArgs(record, "b")...)
	waitOutput(t, b, "holder_session=")
	// Past the stop rule's no-contact budget (5.3s for ttl 10s), well within
	// the TTL the server counts (about 2 x 10s).
	time.Sleep(7 * time.Second)
	a.closeStdin()
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d", code)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0 (the run succeeded):\n%s", code, b.out.String())
	}
	if out := b.out.String(); !strings.Contains(out, "run already succeeded") || !strings.Contains(out, `seen="after acquiring the lock"`) {
		t.Fatalf("runner b does not say the run already succeeded:\n%s", out)
	}
	if runs := readRuns(t, record); len(runs) != 1 {
		t.Fatalf("%d executions, want 1", len(runs))
	}
}

// The cost of run once: a runner that runs the command makes at most 2
// Consul writes more than a plain run of the same lock (the attempt's
// start; the outcome rides on the release transaction), and a runner that
// starts after the run succeeded makes no write at all: no session, no
// acquisition (issue 37). Renewals are left out.
func TestRunOnce_costsAtMostTwoWritesBeyondAPlainRun(t *testing.T) {
	t.Parallel()
	once, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	prefix := testenv.UniquePrefix(t.Name())
	plainLock := declare(t, lockmodel.Lock{Name: uniqueName(t, "plain"), Prefix: prefix}, fastProfile(t, time.Second))
	plainToken := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	run := func(name string, l lockmodel.Lock, token string, args ...string) []string {
		t.Helper()
		proxy := newOutageProxy(t, func(*http.Request) bool { return false })
		p := startRunAt(t, name, proxy.addr, token, append([]string{"-lock", l.Name}, args...), childArgs(record, name)...)
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", name, code, p.out.String())
		}
		proxy.mu.Lock()
		defer proxy.mu.Unlock()
		return slices.Clone(proxy.writes)
	}
	plain := run("plain", plainLock, plainToken)
	executing := run("once", once, token, "-run-id", "r1")
	done := run("done", once, token, "-run-id", "r1")
	t.Logf("MEASURED Consul writes (renewals left out): plain run %d %q; run once, executing %d %q; run once, already done %d %q",
		len(plain), plain, len(executing), executing, len(done), done)
	if len(executing) > len(plain)+2 {
		t.Fatalf("run once made %d writes, a plain run %d: more than 2 extra", len(executing), len(plain))
	}
	if len(done) != 0 {
		t.Fatalf("a runner started after the run succeeded made %d writes %q, want none", len(done), done)
	}
}

// startRunAtClock is startRun with the runner's wall clock moved by offset
// (lockmodel.EnvClockOffset), to start it at a chosen time of a schedule.
func startRunAtClock(t testing.TB, name, token string, offset time.Duration, args []string, childArgs ...string) *proc {
	t.Helper()
	full := append(append([]string{"run"}, args...), "--", childBin)
	env := append(processEnv(agent.Addr, token), lockmodel.EnvClockOffset+"="+offset.String())
	return startProc(t, name, env, runnerBin, append(full, childArgs...)...)
}

// A schedule names the run by its latest slot at or before the start:
// three runners started together 30s after a slot (their clocks moved
// there) run it once, with the slot's ID and time in the environment; three
// more 5 minutes into the same slot run nothing; a runner 11 minutes after
// the previous slot, past starting_deadline, exits 119 without running it
// or writing the ledger, and status -lock lists it missed; that slot,
// backfilled with -run-id by three runners, runs once, and then nowhere
// else, and is no longer listed.
func TestRunOnce_scheduleSlotRunsOnceAndStartingDeadlineSkipsLateRunners(t *testing.T) {
	t.Parallel()
	ro := ledger.RunOnce{Schedule: "0 * * * *", TimeZone: "Europe/Berlin", StartingDeadline: 10 * time.Minute}
	sched, err := ro.ParsedSchedule()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	slot, _ := sched.Prev(now)
	prevSlot, _ := sched.Prev(slot.Add(-time.Second))
	ro.Since = prevSlot.Add(-time.Minute) // declared just before the previous slot
	l, token := declareRunOnce(t, ro)
	record := filepath.Join(t.TempDir(), "record")
	status := func() string {
		t.Helper()
		p := startProc(t, "status", processEnv(agent.Addr, agent.ManagementToken), runnerBin, "status", "-lock", l.Name)
		p.wait(60 * time.Second)
		return p.out.String()
	}
	id, prevID := sched.SlotID(slot), sched.SlotID(prevSlot)
	batch := func(what string, offset time.Duration, want int, args ...string) {
		t.Helper()
		var procs []*proc
		for _, tag := range []string{"a", "b", "c"} {
			procs = append(procs, startRunAtClock(t, what+" "+tag, token, offset, append([]string{"-lock", l.Name}, args...),
				childArgs(record, what+"."+tag, "-sleep", "50ms")...))
		}
		for _, p := range procs {
			if code := p.wait(60 * time.Second); code != want {
				t.Fatalf("%s exited %d, want %d:\n%s", p.name, code, want, p.out.String())
			}
		}
	}
	batch("on-time", slot.Add(30*time.Second).Sub(now), 0)
	batch("same-slot", slot.Add(5*time.Minute).Sub(now), 0)
	runs := readRuns(t, record)
	if len(runs) != 1 || runs[0].runID != id || runs[0].scheduled != id || !strings.HasPrefix(runs[0].tag, "on-time.") {
		t.Fatalf("executions %+v; want one, of the on-time batch, with %s=%s=%s", runs, EnvRunID, EnvScheduledTime, id)
	}
	if run := ledgerRun(t, l, id); run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
		t.Fatalf("ledger run %+v", run)
	}

	late := startRunAtClock(t, "late", token, prevSlot.Add(11*time.Minute).Sub(now), []string{"-lock", l.Name}, childArgs(record, "late")...)
	if code := late.wait(60 * time.Second); code != ledger.ExitRunPastDeadline {
		t.Fatalf("late runner exited %d, want %d:\n%s", code, ledger.ExitRunPastDeadline, late.out.String())
	}
	if out := late.out.String(); !strings.Contains(out, "started past run_once.starting_deadline") || !strings.Contains(out, prevID) {
		t.Fatalf("late runner's log does not say why or which slot:\n%s", out)
	}
	if led, _ := readLedger(t, l); led.Find(prevID) >= 0 || len(readRuns(t, record)) != 1 {
		t.Fatalf("the late runner ran or recorded slot %s: %+v", prevID, led)
	}

	if out := status(); !strings.Contains(out, "Missed slots") || !strings.Contains(out, "  "+prevID+"\n") {
		t.Fatalf("status -lock does not list the missed slot %s:\n%s", prevID, out)
	}

	// Backfill: the missed slot's ID, from any time (no deadline applies).
	batch("backfill", 0, 0, "-run-id", prevID)
	batch("backfill-again", 0, 0, "-run-id", prevID)
	var backfilled []*childRun
	for _, r := range readRuns(t, record) {
		if r.runID == prevID {
			backfilled = append(backfilled, r)
		}
	}
	if len(backfilled) != 1 || backfilled[0].scheduled != prevID || !strings.HasPrefix(backfilled[0].tag, "backfill.") {
		t.Fatalf("backfilled executions %+v; want one, of the first backfill batch, with %s=%s", backfilled, EnvScheduledTime, prevID)
	}
	if out := status(); strings.Contains(out, prevID+"\n") && strings.Contains(out, "Missed slots") {
		t.Fatalf("status -lock still lists the backfilled slot %s:\n%s", prevID, out)
	}
}
