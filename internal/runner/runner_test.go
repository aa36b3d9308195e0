package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Two (here three) runners on one lock: the children never overlap, each
// starts less than a second after the previous one ended (release before
// destroy: no lock-delay on a clean hand-over, although the profile has
// one of 5s), and CONSUL_LOCK_INDEX strictly increases.
func TestRun_runnersOnOneLockNeverOverlapAndHandOverAtOnce(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 5*time.Second))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")

	var procs []*proc
	for _, tag := range []string{"a", "b", "c"} {
		procs = append(procs, startRun(t, "runner "+tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-sleep", "700ms")...))
	}
	for _, p := range procs {
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}

	runs := readRuns(t, record)
	if len(runs) != 3 {
		t.Fatalf("%d children ran, want 3: %+v", len(runs), runs)
	}
	sessions := map[string]bool{}
	for i, r := range runs {
		if !r.ended || r.held != "true" || r.key != l.Key || r.session == "" || sessions[r.session] {
			t.Fatalf("child %s: ended=%v %s=%q %s=%q session=%q (each runner has its own session)",
				r.tag, r.ended, EnvLockHeld, r.held, EnvLockKey, r.key, r.session)
		}
		sessions[r.session] = true
		if i == 0 {
			continue
		}
		prev := runs[i-1]
		if r.start.Before(prev.end) {
			t.Fatalf("children overlap: %s started at %s, before %s ended at %s", r.tag, r.start, prev.tag, prev.end)
		}
		gap := r.start.Sub(prev.end)
		t.Logf("hand-over %s -> %s: %s", prev.tag, r.tag, gap)
		if gap >= time.Second {
			t.Fatalf("%s started %s after %s ended; a clean hand-over must take less than 1s", r.tag, gap, prev.tag)
		}
		if r.index <= prev.index {
			t.Fatalf("%s: %s=%d, not above %s's %d", r.tag, EnvLockIndex, r.index, prev.tag, prev.index)
		}
		if r.token <= prev.token {
			t.Fatalf("%s: %s=%d, not above %s's %d", r.tag, EnvFencingToken, r.token, prev.tag, prev.token)
		}
	}
	if maxConcurrent(runs) != 1 {
		t.Fatalf("up to %d children ran at once", maxConcurrent(runs))
	}
	// Released, not deleted: the key keeps the api.Lock flags.
	pair := waitKey(t, l.Key, 5*time.Second, notHeld)
	if pair == nil || pair.Flags != lockmodel.LockFlagValue {
		t.Fatalf("after the runs the key is %+v; want it kept with flags %s", pair, lockmodel.FormatFlags(lockmodel.LockFlagValue))
	}
}

// The holder's session has exactly the declared TTL, LockDelay (0s
// included), Behavior and node checks; the key carries the holder value and
// the child sees the session and the LockIndex. On exit the key is released
// and the session destroyed.
func TestRun_sessionIsExactlyTheDeclaredProfile(t *testing.T) {
	cases := []struct {
		name    string
		profile lockmodel.SessionProfile
	}{
		{"lock_delay 0s, defaults", lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 0}},
		{"delete, no node checks", lockmodel.SessionProfile{TTL: 12 * time.Second, LockDelay: 3 * time.Second,
			Behavior: lockmodel.BehaviorDelete, NodeChecks: []string{}, RenewEvery: 2 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := testenv.UniquePrefix(t.Name())
			p := tc.profile
			p.Name = uniqueName(t, "profile")
			want := p.Resolve()
			l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, &p)
			record := filepath.Join(t.TempDir(), "record")
			before := time.Now()
			run := startRun(t, "runner", runnerToken(t, prefix), []string{"-lock", l.Name}, childArgs(record, "a", "-wait-stdin")...)

			pair := waitKey(t, l.Key, 30*time.Second, heldByOther(""))
			entry, _, err := agent.Client().Session().Info(pair.Session, &api.QueryOptions{RequireConsistent: true})
			if err != nil || entry == nil {
				t.Fatalf("holder session %s: %v %v", pair.Session, entry, err)
			}
			if entry.TTL != lockmodel.FormatDuration(want.TTL) {
				t.Errorf("session TTL = %q, declared %q", entry.TTL, lockmodel.FormatDuration(want.TTL))
			}
			if entry.LockDelay != want.LockDelay {
				t.Errorf("session LockDelay = %s, declared %s", entry.LockDelay, want.LockDelay)
			}
			if entry.Behavior != string(want.Behavior) {
				t.Errorf("session Behavior = %q, declared %q", entry.Behavior, want.Behavior)
			}
			if entry.Node != agent.NodeName {
				t.Errorf("session Node = %q, want the agent's node %q", entry.Node, agent.NodeName)
			}
			if entry.Name != "consullock run "+l.Name {
				t.Errorf("session Name = %q", entry.Name)
			}
			if !sameStrings(entry.NodeChecks, want.NodeChecks) {
				t.Errorf("session NodeChecks = %q, declared %q", entry.NodeChecks, want.NodeChecks)
			}

			var holder lockmodel.HolderValue
			if err := json.Unmarshal(pair.Value, &holder); err != nil {
				t.Fatalf("holder value %q is not JSON: %v", pair.Value, err)
			}
			if holder.Node != agent.NodeName || holder.PID != run.cmd.Process.Pid || holder.Lock != l.Name ||
				holder.Started.Before(before.Add(-time.Second)) || holder.Started.After(time.Now()) {
				t.Errorf("holder value = %+v; want node %q, pid %d, lock %q, started after %s",
					holder, agent.NodeName, run.cmd.Process.Pid, l.Name, before)
			}
			if pair.Flags != lockmodel.LockFlagValue {
				t.Errorf("key flags = %s, want %s", lockmodel.FormatFlags(pair.Flags), lockmodel.FormatFlags(lockmodel.LockFlagValue))
			}

			run.closeStdin()
			if code := run.wait(30 * time.Second); code != 0 {
				t.Fatalf("runner exited %d, want 0", code)
			}
			runs := readRuns(t, record)
			if len(runs) != 1 || runs[0].session != pair.Session || runs[0].index != pair.LockIndex {
				t.Fatalf("child saw %+v; want session %s and index %d", runs, pair.Session, pair.LockIndex)
			}
			after, _, err := agent.Client().KV().Get(l.Key, &api.QueryOptions{RequireConsistent: true})
			if err != nil || after == nil || after.Session != "" {
				t.Fatalf("after exit the key is %+v (%v); want it kept and released", after, err)
			}
			if gone, _, err := agent.Client().Session().Info(pair.Session, &api.QueryOptions{RequireConsistent: true}); err != nil || gone != nil {
				t.Fatalf("after exit session %s still exists (%v)", pair.Session, err)
			}
		})
	}
}

// Destroying the holder's session out of band is lock loss: the child gets
// SIGTERM, the runner exits 123 saying the lock was lost, and the waiting
// runner takes over at once (lock_delay 0s) with a higher fencing token.
func TestRun_sessionDestroyedOutOfBandStopsChildAndExitsLockLost(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")

	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(record, "a", "-sleep", "2m")...)
	held := waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
	waitForTwoSessions(t, "consullock run "+l.Name)

	destroyed := time.Now()
	if _, err := agent.Client().Session().Destroy(held.Session, nil); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(30 * time.Second); code != ExitLockLost {
		t.Fatalf("runner a exited %d, want %d (lock lost)", code, ExitLockLost)
	}
	if out := a.out.String(); !strings.Contains(out, "lock lost") {
		t.Fatalf("runner a does not say the lock was lost:\n%s", out)
	}
	if code := b.wait(30 * time.Second); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 2 || runs[0].tag != "a" || runs[1].tag != "b" {
		t.Fatalf("runs = %+v", runs)
	}
	if !runs[0].termed || !runs[0].ended {
		t.Fatalf("child a was not stopped with SIGTERM: %+v", runs[0])
	}
	t.Logf("child a stopped %s after the destroy; child b started %s after it",
		runs[0].end.Sub(destroyed), runs[1].start.Sub(destroyed))
	if runs[1].index <= runs[0].index {
		t.Fatalf("LockIndex did not grow: a %d, b %d", runs[0].index, runs[1].index)
	}
	if runs[1].token <= runs[0].token {
		t.Fatalf("fencing token did not grow: a %d, b %d", runs[0].token, runs[1].token)
	}
}

// A child that ignores SIGTERM is killed after -grace.
func TestRun_lockLostKillsChildThatIgnoresSIGTERMAfterGrace(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner", runnerToken(t, prefix), []string{"-lock", l.Name, "-grace", "1s"},
		childArgs(record, "a", "-sleep", "2m", "-on-term", "ignore")...)
	held := waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "a")
	destroyed := time.Now()
	if _, err := agent.Client().Session().Destroy(held.Session, nil); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(30 * time.Second); code != ExitLockLost {
		t.Fatalf("runner exited %d, want %d", code, ExitLockLost)
	}
	runs := readRuns(t, record)
	if len(runs) != 1 || !runs[0].termed || runs[0].ended {
		t.Fatalf("want a child that got SIGTERM and never ended on its own; got %+v", runs)
	}
	if took := a.exited.Sub(destroyed); took < time.Second {
		t.Fatalf("runner exited %s after the loss, before the 1s grace passed", took)
	}
	if err := syscall.Kill(runs[0].pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("child pid %d still exists after the runner exited (kill -0: %v)", runs[0].pid, err)
	}
}

// SIGKILL of the holder's runner: its child dies with it, and the waiting
// runner acquires within 2 x TTL + LockDelay + 2s.
func TestRun_holderRunnerKilledFailoverWithinWorstCase(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	profile := fastProfile(t, time.Second)
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, profile)
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")

	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(record, "a", "-sleep", "5m")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
	waitForTwoSessions(t, "consullock run "+l.Name)

	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait(10 * time.Second)
	if code := b.wait(2 * time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 2 || runs[0].tag != "a" || runs[1].tag != "b" {
		t.Fatalf("runs = %+v", runs)
	}
	if err := syscall.Kill(runs[0].pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("child of the killed runner (pid %d) is still running (kill -0: %v)", runs[0].pid, err)
	}
	failover := runs[1].start.Sub(killed)
	bound := 2*profile.TTL + profile.LockDelay + 2*time.Second
	t.Logf("MEASURED failover after SIGKILL of the holder's runner: %s (ttl %s, lock_delay %s, bound 2 x ttl + lock_delay + 2s = %s)",
		failover.Round(time.Millisecond), profile.TTL, profile.LockDelay, bound)
	if failover > bound {
		t.Fatalf("failover took %s, more than %s", failover, bound)
	}
	if runs[1].index <= runs[0].index {
		t.Fatalf("LockIndex did not grow: a %d, b %d", runs[0].index, runs[1].index)
	}
	if runs[1].token <= runs[0].token {
		t.Fatalf("fencing token did not grow: a %d, b %d", runs[0].token, runs[1].token)
	}
}

// `consul lock` and `consullock run` on the same mutex exclude each other,
// whichever holds first.
func TestRun_excludesConsulLockOnTheSameMutex(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, time.Second))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")

	c1 := startConsulLock(t, "consul lock 1", 1, prefix, childArgs(record, "consul-1", "-sleep", "1500ms")...)
	first := waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	r := startRun(t, "runner", token, []string{"-lock", l.Name}, childArgs(record, "run", "-sleep", "1500ms")...)
	second := waitKey(t, l.Key, 30*time.Second, heldByOther(first.Session))
	c2 := startConsulLock(t, "consul lock 2", 1, prefix, childArgs(record, "consul-2", "-sleep", "300ms")...)
	_ = second
	for _, p := range []*proc{c1, r, c2} {
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}
	runs := readRuns(t, record)
	var order []string
	for _, run := range runs {
		order = append(order, run.tag)
	}
	if strings.Join(order, ",") != "consul-1,run,consul-2" {
		t.Fatalf("order of holders = %v, want consul-1,run,consul-2", order)
	}
	if m := maxConcurrent(runs); m != 1 {
		t.Fatalf("up to %d holders at once on a mutex: %+v", m, runs)
	}
}

// `consul lock -n 2` and `consullock run` on the same semaphore share its
// two slots: both kinds hold at once, and no third holder gets in.
func TestRun_sharesSemaphoreSlotsWithConsulLock(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	p := fastProfile(t, 0)
	p.Behavior = lockmodel.BehaviorDelete
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: 2}, p)
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")

	// The first two children run until the gate opens, once both have
	// started: they hold at once however slowly a busy machine starts them.
	gate := filepath.Join(t.TempDir(), "gate")
	c1 := startConsulLock(t, "consul lock 1", 2, prefix, childArgs(record, "consul-1", "-until", gate)...)
	r1 := startRun(t, "runner 1", token, []string{"-lock", l.Name}, childArgs(record, "run-1", "-until", gate)...)
	waitSemaphoreHolders(t, prefix, 2, 30*time.Second)
	waitStarted(t, record, "consul-1")
	waitStarted(t, record, "run-1")
	r2 := startRun(t, "runner 2", token, []string{"-lock", l.Name}, childArgs(record, "run-2", "-sleep", "500ms")...)
	c2 := startConsulLock(t, "consul lock 2", 2, prefix, childArgs(record, "consul-2", "-sleep", "500ms")...)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{c1, r1, r2, c2} {
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}
	runs := readRuns(t, record)
	if len(runs) != 4 {
		t.Fatalf("%d children ran, want 4: %+v", len(runs), runs)
	}
	if m := maxConcurrent(runs); m != 2 {
		t.Fatalf("at most %d holders at once, want exactly the limit 2: %+v", m, runs)
	}
	if first, second := runs[0].tag, runs[1].tag; !(strings.HasPrefix(first, "consul") != strings.HasPrefix(second, "consul")) ||
		runs[1].start.After(runs[0].end) {
		t.Fatalf("the first two holders were not one consul lock and one runner at once: %+v %+v", runs[0], runs[1])
	}
	for _, run := range runs {
		if strings.HasPrefix(run.tag, "run") && (run.index == 0 || run.token == 0 || run.key != l.Key) {
			t.Fatalf("runner child %s got index %d token %d key %q", run.tag, run.index, run.token, run.key)
		}
	}
}

// A semaphore declared with limit 2 never has more than two runner
// children at once, and each admission has a fresh fencing token.
func TestRun_semaphoreAdmitsAtMostLimitRunners(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	p := fastProfile(t, 0)
	p.Behavior = lockmodel.BehaviorDelete
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: 2}, p)
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	var procs []*proc
	for _, tag := range []string{"a", "b", "c", "d"} {
		procs = append(procs, startRun(t, "runner "+tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-sleep", "800ms")...))
	}
	for _, p := range procs {
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}
	runs := readRuns(t, record)
	if len(runs) != 4 || maxConcurrent(runs) != 2 {
		t.Fatalf("%d runs, up to %d at once; want 4 runs, 2 at once: %+v", len(runs), maxConcurrent(runs), runs)
	}
	tokens := map[uint64]bool{}
	for _, r := range runs {
		if r.token == 0 || tokens[r.token] {
			t.Fatalf("fencing tokens are not distinct: %+v", runs)
		}
		tokens[r.token] = true
	}
	// Every runner left the holder table and removed its contender key.
	pairs, _, err := agent.Client().KV().List(prefix+"/", &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range pairs {
		if pair.Key != l.Key {
			t.Fatalf("contender key %s left behind", pair.Key)
		}
		st, err := lockmodel.DecodeSemaphoreState(pair.Value)
		if err != nil || len(st.Holders) != 0 || st.Limit != 2 {
			t.Fatalf("holder table after all runners left: %s (%v)", pair.Value, err)
		}
	}
}

// -timeout gives up with exit code 124; the child never runs and the
// session is destroyed.
func TestRun_timeoutExits124WithoutRunningTheChild(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))

	started := time.Now()
	late := startRun(t, "late", token, []string{"-lock", l.Name, "-name", "late " + l.Name, "-timeout", "1s"},
		childArgs(record, "late")...)
	if code := late.wait(30 * time.Second); code != ExitTimeout {
		t.Fatalf("runner exited %d, want %d (timeout)", code, ExitTimeout)
	}
	if took := late.exited.Sub(started); took < time.Second {
		t.Fatalf("gave up after %s, before the 1s timeout", took)
	}
	if !strings.Contains(late.out.String(), "timed out waiting for the lock") {
		t.Fatalf("no timeout message:\n%s", late.out.String())
	}
	if left := sessionsNamed(t, "late "+l.Name); len(left) != 0 {
		t.Fatalf("the timed-out runner left its session behind: %+v", left[0])
	}
	holder.closeStdin()
	if code := holder.wait(30 * time.Second); code != 0 {
		t.Fatalf("holder exited %d", code)
	}
	for _, r := range readRuns(t, record) {
		if r.tag == "late" {
			t.Fatal("the child of the timed-out runner ran")
		}
	}
}

// The child's exit code is the runner's, unless -child-exit-code=false.
// This also covers -key (a key without a declaration).
func TestRun_childExitCodeIsPassedThrough(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	key := []string{"-key", prefix + "/leader", "-ttl", "10s", "-lock-delay", "0s"}

	if code := startRun(t, "exit 7", token, key, childArgs(record, "a", "-exit", "7")...).wait(30 * time.Second); code != 7 {
		t.Fatalf("exit code %d, want the child's 7", code)
	}
	quiet := append([]string{"-child-exit-code=false"}, key...)
	if code := startRun(t, "exit 7 ignored", token, quiet, childArgs(record, "b", "-exit", "7")...).wait(30 * time.Second); code != 0 {
		t.Fatalf("with -child-exit-code=false: exit code %d, want 0", code)
	}
	pair, _, err := agent.Client().KV().Get(prefix+"/leader", &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != "" || pair.Flags != lockmodel.LockFlagValue {
		t.Fatalf("the -key lock is %+v (%v); want it released with api.Lock's flags", pair, err)
	}
}

// Usage errors exit 2 before contacting Consul; setup errors exit 125 with
// a message; a missing command exits 127 after releasing the lock.
func TestRun_errorsHaveDistinctExitCodes(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	token := runnerToken(t, prefix)
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))

	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no lock named", []string{"--", "true"}, ExitUsage, "-lock NAME"},
		{"profile flag with -lock", []string{"-lock", l.Name, "-ttl", "20s", "--", "true"}, ExitUsage, "-ttl only apply with -key"},
		{"bad ttl", []string{"-key", prefix + "/k", "-ttl", "5s", "--", "true"}, ExitUsage, "-ttl"},
		{"no command", []string{"-lock", l.Name}, ExitUsage, "no command"},
		{"undeclared lock", []string{"-lock", "no-such-lock-" + l.Name, "--", "true"}, ExitSetup, "is not declared"},
		{"key of another kind", []string{"-key", l.Key, "-limit", "2", "--", "true"}, ExitSetup, "flags"},
		{"command not found", []string{"-lock", l.Name, "--", "/nonexistent/command"}, ExitNotFound, "cannot start the command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, "runner", processEnv(agent.Addr, token), runnerBin, append([]string{"run"}, tc.args...)...)
			if code := p.wait(30 * time.Second); code != tc.code {
				t.Fatalf("exit code %d, want %d; output:\n%s", code, tc.code, p.out.String())
			}
			if !strings.Contains(p.out.String(), tc.says) {
				t.Fatalf("output does not say %q:\n%s", tc.says, p.out.String())
			}
			if strings.Contains(p.out.String(), token) {
				t.Fatal("output contains the token")
			}
		})
	}
	pair, _, err := agent.Client().KV().Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != "" {
		t.Fatalf("after the failed start the key is %+v (%v); want it released", pair, err)
	}
	if left := sessionsNamed(t, "consullock run "+l.Name); len(left) != 0 {
		t.Fatalf("sessions left behind: %+v", left)
	}
}

// Signals: SIGTERM to a runner that holds the lock is passed to the
// command (whose exit code is then the runner's); SIGINT to a runner that
// waits ends the wait with 130 and removes its session.
func TestRun_forwardsSignalsAndStopsWaitingOnInterrupt(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-sleep", "2m")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waitStarted(t, record, "holder")
	waiter := startRun(t, "waiter", token, []string{"-lock", l.Name, "-name", "waiter " + l.Name}, childArgs(record, "waiter")...)
	waitForSessionsMatching(t, func(s string) bool { return s == "waiter "+l.Name }, 1)

	if err := waiter.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := waiter.wait(30 * time.Second); code != 130 {
		t.Fatalf("interrupted waiter exited %d, want 130", code)
	}
	if left := sessionsNamed(t, "waiter "+l.Name); len(left) != 0 {
		t.Fatalf("the interrupted waiter left its session: %+v", left[0])
	}

	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(30 * time.Second); code != 143 {
		t.Fatalf("holder exited %d, want the command's 143", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 1 || !runs[0].termed {
		t.Fatalf("the command did not get the SIGTERM: %+v", runs)
	}
	if pair := waitKey(t, l.Key, 5*time.Second, notHeld); pair == nil {
		t.Fatal("the key was deleted; want it released")
	}
}

// A waiter whose session ends while it waits (an operator destroyed it, or
// it expired during a partition) waits on with a new session and still gets
// the lock.
func TestRun_waiterWhoseSessionEndsWaitsOnWithANewOne(t *testing.T) {
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	waiter := startRun(t, "waiter", token, []string{"-lock", l.Name, "-name", "waiter " + l.Name}, childArgs(record, "waiter")...)
	waitOutput(t, waiter, " holder_session=")
	first := sessionsNamed(t, "waiter "+l.Name)[0].ID
	if _, err := agent.Client().Session().Destroy(first, nil); err != nil {
		t.Fatal(err)
	}
	// The waiter notices at its next renewal and creates a new session.
	waitForSessionsMatching(t, func(s string) bool { return s == "waiter "+l.Name }, 1)
	holder.closeStdin()
	if code := holder.wait(30 * time.Second); code != 0 {
		t.Fatalf("holder exited %d", code)
	}
	if code := waiter.wait(30 * time.Second); code != 0 {
		t.Fatalf("waiter exited %d, want 0", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 2 || runs[1].tag != "waiter" || runs[1].session == first || runs[1].session == "" {
		t.Fatalf("runs = %+v; want the waiter to hold with a new session, not %s", runs, first)
	}
	if !strings.Contains(waiter.out.String(), "creating a new one") {
		t.Fatalf("the waiter does not say it replaced its session:\n%s", waiter.out.String())
	}
}

// waitForTwoSessions waits with blocking queries on the node's session list
// until two sessions with the name exist: the holder's and the waiter's.
func waitForTwoSessions(t testing.TB, name string) {
	t.Helper()
	waitForSessionsMatching(t, func(s string) bool { return s == name }, 2)
}

// waitForSessionsMatching waits until n sessions on the agent's node have a
// name that match accepts.
func waitForSessionsMatching(t testing.TB, match func(name string) bool, n int) {
	t.Helper()
	waitForSessionsAt(t, agent.Client(), agent.NodeName, match, n)
}

// waitForSessionsAt is waitForSessionsMatching through the Consul client c
// with the sessions on node, or on every node when node is "".
func waitForSessionsAt(t testing.TB, c *api.Client, node string, match func(name string) bool, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list := func(q *api.QueryOptions) ([]*api.SessionEntry, *api.QueryMeta, error) {
		if node == "" {
			return c.Session().List(q)
		}
		return c.Session().Node(node, q)
	}
	var index uint64
	for {
		all, meta, err := list((&api.QueryOptions{WaitIndex: index, WaitTime: 2 * time.Second}).WithContext(ctx))
		if ctx.Err() != nil {
			t.Fatalf("%d matching sessions did not appear", n)
		}
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for _, s := range all {
			if match(s.Name) {
				count++
			}
		}
		if count >= n {
			return
		}
		index = consul.NextIndex(index, meta.LastIndex)
	}
}
