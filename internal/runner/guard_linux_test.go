package runner

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// treeJobScript is a job whose process tree reaches beyond the command:
// the command is this `sh -c`; its shell starts a grandchild of the runner
// in the command's process group and a `setsid` descendant outside it (a
// session and group of its own), each writing heartbeats to its file;
// once both beat, it runs the recorded child with the remaining arguments
// and waits for it.
const treeJobScript = `"$0" -heartbeat "$1" -every "$3" &
setsid "$0" -heartbeat "$2" -every "$3" &
while [ ! -s "$1" ] || [ ! -s "$2" ]; do sleep 0.01; done
shift 3
"$0" "$@"`

// treeJob returns the argv of the tree job with its heartbeat files in dir
// (beats every every), running the child with childArgs, and the
// heartbeat files.
func treeJob(dir string, every time.Duration, childArgs ...string) (argv, beats []string) {
	beats = []string{filepath.Join(dir, "grandchild.beats"), filepath.Join(dir, "setsid.beats")}
	argv = append([]string{"sh", "-c", treeJobScript, childBin, beats[0], beats[1], every.String()}, childArgs...)
	return argv, beats
}

// startJob starts `consullock run <args> -- <argv>` against the agent.
func startJob(t testing.TB, name, token string, args []string, argv ...string) *proc {
	t.Helper()
	full := append(append(append([]string{"run"}, args...), "--"), argv...)
	return startProc(t, name, processEnv(agent.Addr, token), runnerBin, full...)
}

// beat is one heartbeat: who, and when.
type beat struct {
	pid int
	at  time.Time
}

func readBeats(t testing.TB, path string) []beat {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []beat
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		pid, ns, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue // a line being written
		}
		p, err1 := strconv.Atoi(pid)
		n, err2 := strconv.ParseInt(ns, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, beat{pid: p, at: time.Unix(0, n)})
	}
	return out
}

// requireNoBeatAfter fails unless every heartbeat file has beaten (else
// the test proved nothing), none beat at or after next (the next
// holder's start), and none of their processes still runs. Its processes
// are found by their command lines (each names its heartbeat file), so
// that PIDs of a namespace do not matter; those found running are killed
// when the test ends.
func requireNoBeatAfter(t *testing.T, beats []string, next time.Time) {
	t.Helper()
	for _, path := range beats {
		bs := readBeats(t, path)
		if len(bs) == 0 {
			t.Fatalf("%s has no heartbeat: the job did not start its processes; the test proved nothing", filepath.Base(path))
		}
		pids := processesNaming(path)
		for _, pid := range pids {
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		}
		last := bs[len(bs)-1]
		if !last.at.Before(next) {
			t.Fatalf("%s: the first job beat at %s, %s after the next holder started (%s): two jobs ran at once",
				filepath.Base(path), last.at.Format(time.RFC3339Nano), last.at.Sub(next), next.Format(time.RFC3339Nano))
		}
		if len(pids) > 0 {
			t.Fatalf("%s: processes %v of the first job still run after the next holder's command ended", filepath.Base(path), pids)
		}
	}
}

// freeze stops p (SIGSTOP) until the test ends and waits until it is
// stopped.
func freeze(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	waitStopped(t, p.cmd.Process.Pid) // else the runner may act on what the test does next
}

// startOfB is the recorded start of the child tagged b, the next holder's.
func startOfB(t *testing.T, record string) time.Time {
	t.Helper()
	const tag = "b"
	for _, r := range readRuns(t, record) {
		if r.tag == tag && !r.start.IsZero() {
			return r.start
		}
	}
	t.Fatalf("child %s did not start: %+v", tag, readRuns(t, record))
	return time.Time{}
}

// directChildren lists the children of pid (/proc/<pid>/task/*/children).
func directChildren(t testing.TB, pid int) []int {
	t.Helper()
	files, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(field); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// Issue 31, item 2: what the command leaves outside its process group (a
// setsid'd process) is ended before the lock is released, as what it leaves
// in its group is.
func TestRun_endsWhatTheCommandLeftOutsideItsGroupBeforeReleasing(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, time.Second))
	token := runnerToken(t, prefix)
	dir := t.TempDir()
	record := filepath.Join(dir, "record")
	job, beats := treeJob(dir, 5*time.Millisecond, childArgs(record, "a")...)
	a := startJob(t, "runner a", token, []string{"-lock", l.Name, "-grace", "1s"}, job...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b")...)
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d, want the command's 0", code)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	requireNoBeatAfter(t, beats, startOfB(t, record))
}

// Issue 31, item 2: kill -9 of the guard (the runner's own child, which
// runs the command) ends the job's whole tree too; the runner says so and
// exits 128+9, and the next holder starts after that.
func TestRun_killedGuardLeavesNoProcessOfItsJob(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, time.Second))
	token := runnerToken(t, prefix)
	dir := t.TempDir()
	record := filepath.Join(dir, "record")
	job, beats := treeJob(dir, 5*time.Millisecond, childArgs(record, "a", "-sleep", "5m")...)
	a := startJob(t, "runner a", token, []string{"-lock", l.Name}, job...)
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
	waitForTwoSessions(t, "consullock run "+l.Name)

	kids := directChildren(t, a.cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("runner a has children %v, want one", kids)
	}
	if err := syscall.Kill(kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(time.Minute); code != exitSignalBase+int(syscall.SIGKILL) {
		t.Fatalf("runner a exited %d, want %d", code, exitSignalBase+int(syscall.SIGKILL))
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	requireNoBeatAfter(t, beats, startOfB(t, record))
	if !strings.Contains(a.out.String(), "the command's guard was killed") {
		t.Fatalf("runner a did not say that the guard was killed:\n%s", a.out.String())
	}
}

// The guard starts while the runner waits for the lock; one killed in the
// meantime is replaced when the lock is acquired, and the command runs as
// usual.
func TestRun_guardKilledWhileWaitingIsReplaced(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(record, "a", "-wait-stdin")...)
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-exit", "7")...)
	waitForTwoSessions(t, "consullock run "+l.Name)
	kids := directChildren(t, b.cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("waiting runner b has children %v, want its guard", kids)
	}
	if err := syscall.Kill(kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.closeStdin()
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("runner a exited %d, want 0", code)
	}
	if code := b.wait(time.Minute); code != 7 {
		t.Fatalf("runner b exited %d, want its command's 7", code)
	}
	startOfB(t, record)
	waitOutput(t, b, "the command's guard exited while the runner waited for the lock; starting another")
}

// A runner frozen alone (SIGSTOP of the runner, not of its command; as a
// process starved of CPU) cannot stop its command by the stop rule: its
// guard does, GuardKillAfter past the last renewal the runner confirmed.
// The next holder, lock-delay after the session ended, finds no process
// of the old job; thawed, the runner reports the loss.
func TestRun_frozenRunnersGuardStopsItsCommandByTheStopRule(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	profile := &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: 5 * time.Second,
		RenewEvery: 500 * time.Millisecond}
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, profile)
	token := runnerToken(t, prefix)
	dir := t.TempDir()
	record := filepath.Join(dir, "record")
	job, beats := treeJob(dir, 5*time.Millisecond, childArgs(record, "a", "-sleep", "5m")...)
	a := startJob(t, "runner a", token, []string{"-lock", l.Name, "-grace", "500ms"}, job...)
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "100ms")...)
	waitForTwoSessions(t, "consullock run "+l.Name)
	session := readRuns(t, record)[0].session

	freeze(t, a)
	// The servers end a failed node's session at once (serfHealth); here
	// the node is well, so destroy the session as they would.
	if _, err := agent.Client().Session().Destroy(session, nil); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	requireNoBeatAfter(t, beats, startOfB(t, record))
	select {
	case <-a.done:
		t.Fatal("runner a exited while it was stopped")
	default:
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(time.Minute); code != ExitLockLost {
		t.Fatalf("runner a exited %d, want %d (lock lost)", code, ExitLockLost)
	}
	if !strings.Contains(a.out.String(), "its guard killed the command's process tree") {
		t.Fatalf("runner a did not say that its guard killed the command:\n%s", a.out.String())
	}
}
