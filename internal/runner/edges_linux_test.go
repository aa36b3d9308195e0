package runner

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// processesNaming lists the live heartbeat processes (not zombies) that
// write to the heartbeat file path: what a job left, found by the host's
// /proc whatever PID namespace it is in.
func processesNaming(path string) []int {
	s := "-heartbeat\x00" + path + "\x00"
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		if procState(pid) != 'Z' && procState(pid) != 0 {
			out = append(out, pid)
		}
	}
	return out
}

// guardOf is the PID of runner's guard (its child running GuardCommand).
func guardOf(t *testing.T, runner int) int {
	t.Helper()
	for _, pid := range directChildren(t, runner) {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if bytes.Contains(cmdline, []byte(GuardCommand)) {
			return pid
		}
	}
	t.Fatalf("runner %d has no guard among its children %v", runner, directChildren(t, runner))
	return 0
}

// Issue 44, holes 1 and 2 (and issue 31's kill -9 of the runner alone,
// the control): no kill of the runner leaves anything of the job's tree
// (the grandchild in the command's group, the setsid'd descendant)
// running beside the next holder.
//   - runner alone: SIGKILL of the runner, its guard ends the tree;
//   - group: the runner's process group is SIGKILLed, as `timeout -s KILL`,
//     supervisord's killasgroup and `kill -9 -- -PGID` do;
//   - runner and guard: both SIGKILLed together (`pkill -9 -f consullock`),
//     with -tree-protection pid-namespace, where the kernel ends the tree.
func TestRun_killsBeyondTheRunnerLeaveNoProcessOfItsJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		kill func(t *testing.T, a *proc)
	}{
		{"runner alone", nil, func(t *testing.T, a *proc) {
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}},
		{"group kill", nil, func(t *testing.T, a *proc) {
			if err := syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}},
		{"runner and guard together", []string{"-tree-protection", ProtectionPIDNamespace}, func(t *testing.T, a *proc) {
			guard := guardOf(t, a.cmd.Process.Pid)
			_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL)
			_ = syscall.Kill(guard, syscall.SIGKILL)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := testenv.UniquePrefix(t.Name())
			l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, time.Second))
			token := runnerToken(t, prefix)
			dir := t.TempDir()
			record := filepath.Join(dir, "record")
			job, beats := treeJob(dir, 5*time.Millisecond, childArgs(record, "a", "-sleep", "5m")...)
			full := append(append(append([]string{"run", "-lock", l.Name}, tc.args...), "--"), job...)
			a := startProcWith(t, "runner a", processEnv(agent.Addr, token), &syscall.SysProcAttr{Setpgid: true}, runnerBin, full...)
			t.Cleanup(func() {
				select {
				case <-a.done: // reaped: its group ID may be another's now
				default:
					_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
				}
			})
			waitStarted(t, record, "a")
			b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
			waitForTwoSessions(t, "consullock run "+l.Name)
			session := readRuns(t, record)[0].session

			tc.kill(t, a)
			a.wait(10 * time.Second)
			// The TTL would end a's session; destroying it lets b start a
			// lock-delay later.
			if _, err := agent.Client().Session().Destroy(session, nil); err != nil {
				t.Fatal(err)
			}
			if code := b.wait(time.Minute); code != 0 {
				t.Fatalf("runner b exited %d, want 0", code)
			}
			requireNoBeatAfter(t, beats, startOfB(t, record))
		})
	}
}

// Issue 44, hole 3: a run-once command that exits 0 while its runner is
// stopped (SIGSTOP; a starved runner is the same) ran once and succeeded,
// whatever the runner learns on waking: the guard's kill-by expiry (when
// the command left a process in its group), or the loss judge's verdict
// that no renewal was confirmed in time. The session stays valid all
// along, so the release that records the outcome commits; recording lost
// there had the next runner run the command again. Ten runs, half of them
// with a leftover.
func TestRunOnce_successWhileTheRunnerIsStoppedIsRecordedOnce(t *testing.T) {
	t.Parallel()
	const script = `echo run >> "$1"
while [ ! -e "$2" ]; do sleep 0.01; done
if [ "$3" = leftover ]; then sleep 600 & fi
echo exited > "$4"
exit 0`
	newProfile := func(t *testing.T) *lockmodel.SessionProfile {
		return &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: time.Second,
			RenewEvery: 500 * time.Millisecond}
	}
	profile := newProfile(t)
	grace := 500 * time.Millisecond
	stop := lockmodel.NewStopRule(profile.Resolve(), grace)
	// Stopped past the guard's kill-by, and well inside the session's life
	// (the servers end it about 2 x ttl after the last renewal).
	stopped := stop.GuardKillAfter() + time.Second
	if stopped >= profile.TTL {
		t.Fatalf("the stop rule's kill-by %s is not below the ttl %s: the test cannot keep the session valid", stop.GuardKillAfter(), profile.TTL)
	}
	for i := range 10 {
		leftover := []string{"none", "leftover"}[i%2]
		t.Run(fmt.Sprintf("%d-%s", i, leftover), func(t *testing.T) {
			t.Parallel()
			l, token := declareRunOnceWith(t, ledger.RunOnce{Period: 24 * time.Hour}, newProfile(t))
			dir := t.TempDir()
			runs, goFile, exited := filepath.Join(dir, "runs"), filepath.Join(dir, "go"), filepath.Join(dir, "exited")
			args := []string{"-lock", l.Name, "-run-id", "r1", "-grace", grace.String()}
			a := startJob(t, "runner a", token, args, "sh", "-c", script, "job", runs, goFile, leftover, exited)
			waitFile(t, runs)
			freeze(t, a)
			if err := os.WriteFile(goFile, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			waitFile(t, exited)
			time.Sleep(stopped) // the runner stays stopped past its stop rule's deadline
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if code := a.wait(time.Minute); code != 0 {
				t.Fatalf("runner a exited %d, want the command's own 0", code)
			}
			run := ledgerRun(t, l, "r1")
			if len(run.Attempts) != 1 || run.Attempts[0].Outcome != ledger.RunSucceeded {
				t.Fatalf("ledger: %+v, want one attempt, succeeded", run.Attempts)
			}
			b := startJob(t, "runner b", token, []string{"-lock", l.Name, "-run-id", "r1", "-exit-code-if-done", "122"},
				"sh", "-c", script, "job", runs, goFile, "none", exited)
			if code := b.wait(time.Minute); code != 122 {
				t.Fatalf("runner b exited %d, want 122 (the run succeeded already)", code)
			}
			if data, _ := os.ReadFile(runs); strings.Count(string(data), "run") != 1 {
				t.Fatalf("the command ran %d times, want once", strings.Count(string(data), "run"))
			}
		})
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear within a minute", path)
}

// Issue 44: a guard killed after its command exited, before it ended what
// the command left outside its process group, leaves those processes to
// the runner, which kills them before it releases the lock. The runner is
// stopped while the command exits, so that the guard reports the exit and
// is killed before the runner asks it to end the tree.
func TestRun_guardKilledAfterTheCommandExitedLeavesNothing(t *testing.T) {
	t.Parallel()
	const script = `echo run >> "$1"
while [ ! -e "$2" ]; do sleep 0.01; done
setsid "$0" -heartbeat "$3" -every 10ms &
while [ ! -s "$3" ]; do sleep 0.01; done
exit 0`
	prefix := testenv.UniquePrefix(t.Name())
	// Renewals far apart: the guard's kill-by is well after the test's
	// steps, so that the guard ends nothing by its stop rule.
	profile := &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: time.Minute, LockDelay: time.Second, RenewEvery: 20 * time.Second}
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, profile)
	token := runnerToken(t, prefix)
	dir := t.TempDir()
	runs, goFile, beats := filepath.Join(dir, "runs"), filepath.Join(dir, "go"), filepath.Join(dir, "setsid.beats")
	a := startJob(t, "runner a", token, []string{"-lock", l.Name}, "sh", "-c", script, childBin, runs, goFile, beats)
	t.Cleanup(func() {
		for _, pid := range processesNaming(beats) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	waitFile(t, runs)
	guard := guardOf(t, a.cmd.Process.Pid)
	freeze(t, a)
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The command has exited and the guard has reaped it (and so reported
	// its exit) once the guard's only child is the setsid'd process.
	var leftover []int
	for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		leftover = processesNaming(beats)
		kids := directChildren(t, guard)
		if len(leftover) == 1 && len(kids) == 1 && kids[0] == leftover[0] {
			break
		}
		if time.Now().After(end) {
			parents := []string{}
			for _, pid := range leftover {
				parents = append(parents, fmt.Sprint(statFields(pid)))
			}
			ps, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,stat,args", "--forest").Output()
			t.Fatalf("the command did not exit leaving one process (guard %d's children %v, leftovers %v: %v)\n%s", guard, kids, leftover, parents, ps)
		}
	}
	if err := syscall.Kill(guard, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	code := a.wait(time.Minute)
	if pids := processesNaming(beats); len(pids) > 0 {
		t.Fatalf("processes %v the command left still run after its runner released the lock and exited", pids)
	}
	// The guard reports the exit right after it reaps the command; killed
	// in between (rarely, more often on a loaded machine), its death is an
	// unreported exit: the runner kills the tree too, and the command's
	// state is the guard's (SIGKILL, 137).
	out := a.out.String()
	switch {
	case strings.Contains(out, "the command's guard was killed after the command exited"):
		if code != 0 {
			t.Fatalf("runner a exited %d, want the command's own 0 (its exit was reported):\n%s", code, out)
		}
	case strings.Contains(out, "the command's guard was killed; killing the command's process tree"):
		if code != 128+int(syscall.SIGKILL) {
			t.Fatalf("runner a exited %d, want 137 (the guard died before reporting the exit):\n%s", code, out)
		}
		t.Logf("the guard was killed between reaping the command and reporting its exit (exit 137)")
	default:
		t.Fatalf("runner a did not say it killed what the command left after its guard was killed (exit %d):\n%s", code, out)
	}
}

// Issue 44: a guard stopped alone (SIGSTOP of the guard, not of the
// runner) would deliver none of the stop signals the runner sends through
// it; the runner continues it first, so that the job's tree is stopped
// before the next holder starts.
func TestRun_stoppedGuardStillStopsTheJobOnALoss(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	profile := &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: 3 * time.Second,
		RenewEvery: 500 * time.Millisecond}
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, profile)
	token := runnerToken(t, prefix)
	dir := t.TempDir()
	record := filepath.Join(dir, "record")
	job, beats := treeJob(dir, 5*time.Millisecond, childArgs(record, "a", "-sleep", "5m")...)
	a := startJob(t, "runner a", token, []string{"-lock", l.Name, "-grace", "500ms"}, job...)
	waitStarted(t, record, "a")
	guard := guardOf(t, a.cmd.Process.Pid)
	// Continued through a pidfd: once the guard is gone its PID may be
	// another test's process (a stopped runner that must stay stopped).
	pidfd, err := unix.PidfdOpen(guard, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.PidfdSendSignal(pidfd, syscall.SIGCONT, nil, 0)
		_ = unix.Close(pidfd)
	})
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
	waitForTwoSessions(t, "consullock run "+l.Name)
	session := readRuns(t, record)[0].session

	if err := syscall.Kill(guard, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, guard)
	if _, err := agent.Client().Session().Destroy(session, nil); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	requireNoBeatAfter(t, beats, startOfB(t, record))
	if code := a.wait(time.Minute); code != ExitLockLost {
		t.Fatalf("runner a exited %d, want %d (lock lost)", code, ExitLockLost)
	}
}
