package runner

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A command past run_once.max_runtime is sent SIGTERM at the deadline and,
// ignoring it, SIGKILL after -grace; the attempt is recorded timed_out and
// counts toward max_attempts (the next runner finds the run exhausted).
func TestJobControl_pastMaxRuntimeIsStoppedAndRecordedTimedOut(t *testing.T) {
	t.Parallel()
	const maxRuntime, grace = time.Second, 500 * time.Millisecond
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, MaxAttempts: 1, MaxRuntime: maxRuntime})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1", "-grace", grace.String()}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-sleep", "5m", "-on-term", "ignore")...)
	if code := a.wait(time.Minute); code != ExitMaxRuntime {
		t.Fatalf("runner exited %d, want %d (max_runtime):\n%s", code, ExitMaxRuntime, a.out.String())
	}
	events := recordEvents(t, record)
	term := events["term a"]
	if events["start a"] == 0 || term == 0 || events["end a"] != 0 {
		t.Fatalf("child events %v: want start and term (SIGTERM), and no end (it ignored SIGTERM and was killed)", events)
	}
	run := ledgerRun(t, l, "r1")
	at := run.Attempts[0]
	// The ledger's start is recorded before the command starts.
	sent := time.Unix(0, term).Sub(at.Started)
	if sent < maxRuntime {
		t.Fatalf("SIGTERM %s after the recorded start, before max_runtime %s", sent, maxRuntime)
	}
	if len(run.Attempts) != 1 || at.Outcome != ledger.RunTimedOut || at.ExitCode == nil || *at.ExitCode != 128+9 {
		t.Fatalf("ledger run %+v; want attempt 1 timed_out, killed (exit 137)", run)
	}
	held := at.Finished.Sub(at.Started)
	if held < maxRuntime {
		t.Fatalf("recorded after %s, before max_runtime", held)
	}
	t.Logf("SIGTERM %s after the recorded start (max_runtime %s); outcome recorded %s after it (deadline + grace = %s)",
		sent.Round(time.Millisecond), maxRuntime, held.Round(time.Millisecond), maxRuntime+grace)
	hook := filepath.Join(t.TempDir(), "hook")
	b := startRun(t, "runner b", token, append(args, "-on-outcome", hookRecorder(hook)), childArgs(record, "b")...)
	if code := b.wait(time.Minute); code != ledger.ExitRunExhausted {
		t.Fatalf("runner b exited %d, want %d: a timed_out attempt counts toward max_attempts", code, ledger.ExitRunExhausted)
	}
	requireNotStartedHook(t, hook, HookExhausted, "r1")
}

// hookRecorder is an -on-outcome command that writes its CONSUL_LOCK_
// environment to path.
func hookRecorder(path string) string {
	return "env | grep ^CONSUL_LOCK_ > " + path
}

// requireNotStartedHook checks what hookRecorder wrote to path for a
// runner that did not start its command: outcome, the run ID (when
// given), an empty exit code, nothing recorded by it.
func requireNotStartedHook(t *testing.T, path, outcome, runID string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("-on-outcome did not run for %s: %v", outcome, err)
	}
	want := []string{EnvOutcome + "=" + outcome + "\n", EnvExitCode + "=\n", EnvOutcomeRecorded + "=false\n", EnvLockKey + "="}
	if runID != "" {
		want = append(want, EnvRunID+"="+runID+"\n")
	}
	for _, w := range want {
		if !strings.Contains(string(b), w) {
			t.Fatalf("-on-outcome environment lacks %q:\n%s", w, b)
		}
	}
}

// A lock without run_once: -max-runtime stops the command the same way
// (SIGTERM, here obeyed) and the runner exits 118.
func TestJobControl_maxRuntimeFlagStopsTheCommandOfAPlainLock(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	record := filepath.Join(t.TempDir(), "record")
	p := startRun(t, "runner", runnerToken(t, prefix), []string{"-key", prefix + "/job", "-ttl", "10s", "-lock-delay", "0s", "-max-runtime", "1s"},
		childArgs(record, "a", "-sleep", "5m")...)
	if code := p.wait(time.Minute); code != ExitMaxRuntime {
		t.Fatalf("runner exited %d, want %d:\n%s", code, ExitMaxRuntime, p.out.String())
	}
	if events := recordEvents(t, record); events["term a"] == 0 || events["end a"] == 0 {
		t.Fatalf("child events %v: want SIGTERM, then its own end", events)
	}
}

// After a failed attempt, the runner waiting for the lock starts attempt 2
// only retry_after after the outcome (by the ledger's own times), holding
// no session meanwhile.
func TestJobControl_attempt2StartsAfterRetryAfterAndNotBefore(t *testing.T) {
	t.Parallel()
	const retryAfter = 2 * time.Second
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, MaxAttempts: 3, RetryAfter: retryAfter, RetryBackoff: 1})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-sleep", "300ms", "-exit", "3")...)
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, args, childArgs(record, "b")...)
	if code := a.wait(time.Minute); code != 3 {
		t.Fatalf("runner a exited %d, want 3", code)
	}
	waitOutput(t, b, "waiting for the run's next attempt without holding the lock")
	if n := len(sessionsNamed(t, "consullock run "+l.Name)); n != 0 {
		t.Fatalf("%d sessions while runner b waits for not_before, want none", n)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0:\n%s", code, b.out.String())
	}
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) != 2 || run.Outcome != ledger.RunSucceeded || !run.NotBefore.IsZero() {
		t.Fatalf("ledger run %+v; want attempt 2 succeeded, no wait left", run)
	}
	gap := run.Attempts[1].Started.Sub(run.Attempts[0].Finished)
	if gap < retryAfter {
		t.Fatalf("attempt 2 started %s after attempt 1's outcome, before retry_after %s", gap, retryAfter)
	}
	t.Logf("attempt 2 started %s after attempt 1's outcome (retry_after %s)", gap.Round(time.Millisecond), retryAfter)
}

// The attempt keeps the last -keep-output bytes of stderr and of stdout
// (status -lock shows them); -on-outcome runs after the outcome is recorded, with the
// run's facts in its environment, and its own failure changes nothing.
func TestJobControl_keptOutputIsTheBoundedTailAndOnOutcomeRuns(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, MaxAttempts: 1})
	dir := t.TempDir()
	record, hookOut := filepath.Join(dir, "record"), filepath.Join(dir, "hook")
	args := []string{"-lock", l.Name, "-run-id", "r1", "-keep-output", "100",
		"-on-outcome", "env | grep ^CONSUL_LOCK_ > " + hookOut + "; exit 7"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-stderr", "10000", "-stdout", "5000", "-exit", "4")...)
	if code := a.wait(time.Minute); code != 4 {
		t.Fatalf("runner exited %d, want the command's 4 (a failing -on-outcome changes nothing):\n%s", code, a.out.String())
	}
	at := ledgerRun(t, l, "r1").Attempts[0]
	if want := strings.Repeat("x", 97) + "END"; at.Output != want {
		t.Fatalf("kept output %q (%d bytes), want the last 100 bytes of stderr", at.Output, len(at.Output))
	}
	if want := strings.Repeat("o", 97) + "OUT"; at.Stdout != want {
		t.Fatalf("kept stdout %q (%d bytes), want its last 100 bytes", at.Stdout, len(at.Stdout))
	}
	if !strings.Contains(a.out.String(), strings.Repeat("o", 5000)+"OUT") {
		t.Fatalf("the command's stdout did not reach the runner's stdout whole")
	}
	b, err := os.ReadFile(hookOut)
	if err != nil {
		t.Fatalf("-on-outcome did not run: %v", err)
	}
	env := string(b)
	for _, want := range []string{EnvRunID + "=r1\n", EnvAttempt + "=1\n", EnvOutcome + "=failed\n", EnvExitCode + "=4\n",
		EnvNode + "=" + at.Node + "\n", EnvFencingToken + "=" + strconv.FormatUint(at.FencingToken, 10) + "\n", EnvOutcomeRecorded + "=true\n"} {
		if !strings.Contains(env, want) {
			t.Fatalf("-on-outcome environment lacks %q:\n%s", want, env)
		}
	}
	if !strings.Contains(a.out.String(), "the -on-outcome command failed") {
		t.Fatalf("the hook's failure is not logged:\n%s", a.out.String())
	}
}

// keep runs of the largest output a lock allows, of bytes that each take
// six in JSON: the ledger stays within MaxLedgerBytes, every output within
// -keep-output.
func TestJobControl_ledgerStaysBoundedWithKeepRunsOfMaximalOutput(t *testing.T) {
	t.Parallel()
	const keep = 3
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, MaxAttempts: 1, Keep: keep})
	size := ledger.KeepOutputBudget(keep, 1)
	record := filepath.Join(t.TempDir(), "record")
	for i := range keep + 1 {
		id := "r" + strconv.Itoa(i)
		p := startRun(t, "runner "+id, token, []string{"-lock", l.Name, "-run-id", id, "-keep-output", strconv.Itoa(size)},
			childArgs(record, id, "-stderr", strconv.Itoa(2*size), "-stderr-byte", "\x01", "-exit", "1")...)
		if code := p.wait(time.Minute); code != 1 {
			t.Fatalf("runner %s exited %d, want 1:\n%s", id, code, p.out.String())
		}
	}
	led, pair := readLedger(t, l)
	if len(pair.Value) > ledger.MaxLedgerBytes || len(led.Runs) != keep {
		t.Fatalf("ledger %d bytes with %d runs; want at most %d bytes, %d runs", len(pair.Value), len(led.Runs), ledger.MaxLedgerBytes, keep)
	}
	for _, r := range led.Runs {
		if o := r.Attempts[0].Output; !strings.HasSuffix(o, "END") || len(o) < 100 {
			t.Fatalf("run %s kept %d bytes, want the tail up to END", r.ID, len(o))
		}
	}
	t.Logf("keep %d runs x -keep-output %d bytes of worst output: ledger %d of %d bytes", keep, size, len(pair.Value), ledger.MaxLedgerBytes)
}

// Bad input is a usage error naming the flag, and nothing is written: a
// -keep-output the lock's ledger cannot hold, a negative -max-runtime.
func TestJobControl_badInputNamesTheFlagAndWritesNothing(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, MaxAttempts: 100, Keep: 1000})
	record := filepath.Join(t.TempDir(), "record")
	for _, c := range []struct{ flag, value string }{{"-keep-output", "4096"}, {"-max-runtime", "-1s"}, {"-keep-output", "-1"}, {"-max-runtime", "10ms"}} {
		p := startRun(t, "runner "+c.flag, token, []string{"-lock", l.Name, "-run-id", "r1", c.flag, c.value}, childArgs(record, "x")...)
		if code := p.wait(time.Minute); code != ExitUsage || !strings.Contains(p.out.String(), c.flag) {
			t.Fatalf("%s %s: exit %d, want %d naming the flag:\n%s", c.flag, c.value, code, ExitUsage, p.out.String())
		}
	}
	if led, pair := readLedger(t, l); pair != nil {
		t.Fatalf("a ledger was written: %+v", led)
	}
	if _, err := os.Stat(record); err == nil {
		t.Fatal("the command ran")
	}
}

// recordEvents maps "<kind> <tag>" of the child's record to its time (ns).
func recordEvents(t *testing.T, path string) map[string]int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		at, _ := strconv.ParseInt(strings.TrimPrefix(f[2], "at="), 10, 64)
		out[f[0]+" "+strings.TrimPrefix(f[1], "tag=")] = at
	}
	return out
}

// The -on-outcome command gets no Consul token unless -on-outcome-token
// asks for it: not CONSUL_HTTP_TOKEN, not CONSUL_HTTP_TOKEN_FILE, and the
// secret (or the token file's path) in no other variable either.
func TestJobControl_onOutcomeGetsNoConsulTokenUnlessAsked(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	token := runnerToken(t, prefix)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	viaFile := []string{}
	for _, kv := range processEnv(agent.Addr, token) {
		if !strings.HasPrefix(kv, "CONSUL_HTTP_TOKEN=") {
			viaFile = append(viaFile, kv)
		}
	}
	viaFile = append(viaFile, "CONSUL_HTTP_TOKEN_FILE="+tokenFile)
	cases := []struct {
		name      string
		env       []string
		flags     []string
		wantToken bool
	}{
		{"CONSUL_HTTP_TOKEN, not passed on", processEnv(agent.Addr, token), nil, false},
		{"CONSUL_HTTP_TOKEN_FILE, not passed on", viaFile, nil, false},
		{"-on-outcome-token passes it on", processEnv(agent.Addr, token), []string{"-on-outcome-token"}, true},
	}
	for i, c := range cases {
		hookOut := filepath.Join(dir, "hook"+strconv.Itoa(i))
		args := append([]string{"run", "-key", prefix + "/job", "-ttl", "10s", "-lock-delay", "0s",
			"-on-outcome", "env > " + hookOut}, c.flags...)
		args = append(args, "--", childBin)
		p := startProc(t, c.name, c.env, runnerBin, append(args, childArgs(filepath.Join(dir, "record"), strconv.Itoa(i))...)...)
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s: runner exited %d, want 0:\n%s", c.name, code, p.out.String())
		}
		b, err := os.ReadFile(hookOut)
		if err != nil {
			t.Fatalf("%s: -on-outcome did not run: %v\n%s", c.name, err, p.out.String())
		}
		env := "\n" + string(b)
		if !strings.Contains(env, "\n"+EnvOutcome+"=succeeded\n") {
			t.Fatalf("%s: the hook's environment lacks %s:\n%s", c.name, EnvOutcome, env)
		}
		set := strings.Contains(env, "\nCONSUL_HTTP_TOKEN="+token+"\n")
		t.Logf("%s: CONSUL_HTTP_TOKEN set in the hook: %v", c.name, set)
		if c.wantToken {
			if !set {
				t.Fatalf("%s: the hook has no CONSUL_HTTP_TOKEN, want the runner's", c.name)
			}
			continue
		}
		for _, leak := range []string{"\nCONSUL_HTTP_TOKEN=", "\nCONSUL_HTTP_TOKEN_FILE=", token, tokenFile} {
			if strings.Contains(env, leak) {
				t.Fatalf("%s: the hook's environment holds %q, want no Consul token:\n%s", c.name, strings.TrimSpace(leak), env)
			}
		}
	}
}

// After `consullock release` ends a holder's attempt, the next attempt
// waits run_once.retry_after from the release, as after a failed attempt:
// the next runner waits without holding the lock.
func TestJobControl_attemptAfterAReleaseWaitsRetryAfter(t *testing.T) {
	t.Parallel()
	const retryAfter = 3 * time.Second
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour, MaxAttempts: 3, RetryAfter: retryAfter, RetryBackoff: 1})
	record := filepath.Join(t.TempDir(), "record")
	args := []string{"-lock", l.Name, "-run-id", "r1", "-grace", "1s"}
	a := startRun(t, "runner a", token, args, childArgs(record, "a", "-sleep", "5m")...)
	waitStarted(t, record, "a")
	// The command is stuck (frozen), as one a release is for: its runner
	// records the loss only once -grace has passed, after the release has
	// recorded the attempt released (a command that exits at once on
	// SIGTERM races the release to the ledger, and its lost wins).
	if err := syscall.Kill(lastRun(t, record, "a").pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	code, out := consullock(t, "release", "release", "-lock", l.Name, "-reason", "stuck", "-by", "bob@ops", "-yes")
	if code != 0 || !strings.Contains(out, "recorded run r1 attempt 1 as released") {
		t.Fatalf("release exited %d, want 0 and the attempt recorded released:\n%s", code, out)
	}
	if code := a.wait(time.Minute); code != ExitLockLost {
		t.Fatalf("runner a exited %d, want %d:\n%s", code, ExitLockLost, a.out.String())
	}
	b := startRun(t, "runner b", token, args, childArgs(record, "b")...)
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0:\n%s", code, b.out.String())
	}
	if !strings.Contains(b.out.String(), "waiting for the run's next attempt without holding the lock") {
		t.Fatalf("runner b did not wait for the run's next attempt after the release:\n%s", b.out.String())
	}
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) != 2 || run.Attempts[0].Outcome != ledger.RunReleased || run.Outcome != ledger.RunSucceeded {
		t.Fatalf("ledger run %+v; want attempt 1 released, attempt 2 succeeded", run)
	}
	gap := run.Attempts[1].Started.Sub(run.Attempts[0].Finished)
	if gap < retryAfter {
		t.Fatalf("attempt 2 started %s after the release, before retry_after %s", gap, retryAfter)
	}
	t.Logf("attempt 2 started %s after the release (retry_after %s)", gap.Round(time.Millisecond), retryAfter)
}
