package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// guarded: on Linux the command runs under the guard (guard.go).
const guarded = true

// guard is the runner's side of the guard process.
type guard struct {
	cmd *exec.Cmd // the guard process
	// ns: the guard is the init of a PID namespace (treeprotect_linux.go).
	ns    bool
	conn  *os.File // the runner's end of the control socket
	mu    sync.Mutex
	ended chan int      // the guard's "ended": how many it killed
	gone  chan struct{} // closed once the guard has exited and been reaped (after a start)
	// used: a start was sent; discard then leaves the guard to the child.
	used    bool
	discard func()
}

// errGuardLost: the guard went away before it answered the start.
var errGuardLost = errors.New("the guard exited before it started the command")

// prepareGuard starts a guard that waits for its command (see guard.go),
// or returns nil and why if it cannot: startChild then starts one itself,
// and reports why if that fails too.
func prepareGuard() (*guard, error) {
	return newGuard(outputs{}.orRunners())
}

// newGuard starts a guard whose command gets out as its stdout and stderr.
func newGuard(out outputs) (*guard, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("guard: control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "guard control"), os.NewFile(uintptr(fds[1]), "guard control")
	cmd := exec.Command("/proc/self/exe", GuardCommand)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out.stdout, out.stderr
	cmd.ExtraFiles = []*os.File{theirs} // guardFD
	ns := treeProtection == ProtectionPIDNamespace
	cmd.SysProcAttr = guardProcAttr(!stdinIsTerminal(), ns)
	err = cmd.Start()
	_ = theirs.Close() // the guard's alone now: its end closes when it dies
	if err != nil {
		_ = ours.Close()
		return nil, fmt.Errorf("guard: %w", err)
	}
	g := &guard{cmd: cmd, ns: ns, conn: ours, ended: make(chan int, 1), gone: make(chan struct{})}
	// Unused, the guard has nothing to end: killed, it costs a runner that
	// leaves (a run-once waiter) nothing, not even the rest of its start.
	g.discard = sync.OnceFunc(func() {
		if !g.used {
			_ = g.conn.Close()
			_ = g.cmd.Process.Kill()
			go func() { _ = g.cmd.Wait() }() // reaped if the runner lives on
		}
	})
	return g, nil
}

// discardUnused ends a guard that never got its command (the runner
// exits without having run it). Nil-safe and idempotent.
func (g *guard) discardUnused() {
	if g != nil {
		g.discard()
	}
}

// startGuarded has the guard standby (or, if it is nil or died while
// waiting, a new one) start path with argv and env, in a process group of
// its own when ownGroup, and returns once the command runs. The child's
// done is closed when the guard reports the command's exit, or when the
// guard itself has died (the runner then kills what is left of the tree,
// and the child's state is the guard's: killed by SIGKILL, exit 137).
// A command whose stdout and stderr are not the runner's (-keep-output's
// pipes) gets a new guard: the standby's are the runner's. The guard kills the
// tree at killBy unless the runner sends a later kill-by first (killBy).
func startGuarded(standby *guard, path string, argv, env []string, out outputs, ownGroup bool, killBy time.Time,
	log *slog.Logger) (*child, error) {
	spec := guardStart{Path: path, Argv: argv, Env: env, OwnGroup: ownGroup, KillBy: bootMillisAt(killBy)}
	if !out.runners() {
		standby.discardUnused()
		standby = nil
	}
	if standby != nil {
		c, err := standby.start(spec, log)
		if !errors.Is(err, errGuardLost) {
			return c, err
		}
		log.Warn("the command's guard exited while the runner waited for the lock; starting another", "guard_pid", standby.cmd.Process.Pid)
	}
	g, err := newGuard(out)
	if err != nil {
		return nil, err
	}
	return g.start(spec, log)
}

// start sends the guard its command and waits for its answer.
func (g *guard) start(spec guardStart, log *slog.Logger) (*child, error) {
	g.used = true
	fail := func(err error) (*child, error) {
		_ = g.conn.Close()
		_ = g.cmd.Process.Kill()
		_ = g.cmd.Wait()
		return nil, err
	}
	r := bufio.NewReader(g.conn)
	if err := writeGuardStart(g.conn, spec); err != nil {
		return fail(errGuardLost)
	}
	first, err := readGuardMsg(r)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fail(errGuardLost)
	case err != nil:
		return fail(fmt.Errorf("guard: %w", err))
	case first.kind == msgFailed:
		return fail(&fs.PathError{Op: "fork/exec", Path: spec.Path, Err: syscall.Errno(first.n)})
	case first.kind != msgStarted:
		return fail(fmt.Errorf("guard protocol: want %s, got %s", msgStarted, first.kind))
	}
	pid := int(first.n)
	if g.ns {
		// The guard reports the command's PID in its namespace and does
		// not reap it until acknowledged, so that it is found here even if
		// it has exited already.
		if pid = hostPID(g.cmd.Process.Pid, pid); pid == 0 {
			return fail(fmt.Errorf("guard: the command's process (PID %d in the guard's namespace) is not among the guard's children", first.n))
		}
		if err := g.send(msgAck, 0); err != nil {
			return fail(errGuardLost)
		}
	}
	c := &child{cmd: g.cmd, commandPID: pid, ownGroup: spec.OwnGroup, guard: g, done: make(chan struct{})}
	go g.follow(c, r, log)
	return c, nil
}

// follow reads the guard's reports until its end closes, then reaps it.
// If the command's exit was never reported the guard died first: its tree
// is now the runner's (a subreaper), which kills it.
func (g *guard) follow(c *child, r *bufio.Reader, log *slog.Logger) {
	defer close(g.gone)
	reported, finished := false, false // the exit reported; the tree ended (finished or ended)
	for {
		m, err := readGuardMsg(r)
		if err != nil {
			break
		}
		if !reported {
			c.reports.see(m.kind, m.n) // before done is closed
		}
		switch m.kind {
		case msgExited, msgFinished:
			if !reported {
				reported = true
				c.state = reportedExit{syscall.WaitStatus(m.n)}
				if m.kind == msgFinished {
					finished = true
					g.ended <- 0 // before done: endTree need not ask
				}
				close(c.done)
			}
		case msgEnded:
			finished = true
			g.ended <- int(m.n)
		case msgExpired:
			if reported {
				if m.n > 0 {
					log.Warn("the runner confirmed no renewal until its stop rule's deadline (the runner was stopped or starved "+
						"of CPU); the command had exited by itself, its guard killed what it left", "processes_killed", m.n)
				}
				continue
			}
			log.Error("the runner confirmed no renewal until its stop rule's deadline (the runner was stopped or starved "+
				"of CPU): its guard killed the command's process tree", "pid", c.commandPID, "processes_killed", m.n)
		}
	}
	_ = g.cmd.Wait()
	_ = g.conn.Close()
	if finished {
		return
	}
	if reported {
		// The guard died after the command's exit, before it ended what
		// the command left: those processes are the runner's now (a
		// subreaper), and must not outlive the release.
		if n := killTree(); n > 0 {
			log.Warn("the command's guard was killed after the command exited; killed what the command left",
				"guard_pid", g.cmd.Process.Pid, "processes_killed", n)
		}
		return
	}
	log.Error("the command's guard was killed; killing the command's process tree",
		"guard_pid", g.cmd.Process.Pid, "guard", g.cmd.ProcessState.String(), "pid", c.commandPID)
	n := killTree()
	log.Info("the command's process tree is killed", "processes_killed", n)
	c.state = g.cmd.ProcessState
	close(c.done)
}

func (g *guard) send(kind string, n int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return writeGuardMsg(g.conn, kind, n)
}

// killBy has the guard kill the tree at t unless a later kill-by comes
// first. A guard that is gone has nothing left to kill.
func (g *guard) killBy(t time.Time) {
	select {
	case <-g.gone:
	default:
		_ = g.send(msgKillBy, bootMillisAt(t))
	}
}

// bootMillis is CLOCK_BOOTTIME in milliseconds: the clock the runner and
// its guard share (a time.Time's monotonic reading is its process's own).
func bootMillis() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("CLOCK_BOOTTIME: " + err.Error()) // Linux has had it since 2.6.39
	}
	return ts.Nano() / int64(time.Millisecond)
}

// bootMillisAt is t on CLOCK_BOOTTIME, in milliseconds.
func bootMillisAt(t time.Time) int64 {
	return bootMillis() + time.Until(t).Milliseconds()
}

// signal has the guard send sig to the command (its group when it has
// one). Once the guard is gone the runner signals the group itself.
func (g *guard) signal(c *child, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("guard: cannot forward %v", sig)
	}
	select {
	case <-g.gone:
	default:
		if state := procState(g.cmd.Process.Pid); state == 'T' || state == 't' {
			// A stopped guard would deliver nothing until continued.
			_ = g.cmd.Process.Signal(syscall.SIGCONT)
		}
		if err := g.send(msgSignal, int64(s)); err == nil {
			c.sent++
			return nil
		}
	}
	if c.ownGroup {
		if err := syscall.Kill(-c.commandPID, s); !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return os.ErrProcessDone
}

// endTree has the guard kill every process the command left (also those
// outside its process group) and waits, at most killWait, until it
// confirms; the guard then exits (follow reaps it), which the lock's
// release need not wait for.
func (g *guard) endTree(log *slog.Logger) {
	start := time.Now()
	select {
	case <-g.ended: // finished: the command left nothing
		return
	case <-g.gone:
		return
	default:
	}
	// A send that fails finds the guard dead before follow has read its
	// end: follow kills what the command left, then closes gone; the
	// release waits for that as for the guard's answer.
	ended := g.ended
	if err := g.send(msgEnd, 0); err != nil {
		ended = nil
	}
	select {
	case n := <-ended:
		if n > 0 {
			log.Warn("killed what was left of the command's process tree before releasing the lock",
				"processes", n, "took", time.Since(start).Round(time.Microsecond))
		}
	case <-g.gone:
	case <-time.After(killWait):
		log.Warn("the command's guard did not confirm that the processes the command left are gone; releasing the lock anyway",
			"guard_pid", g.cmd.Process.Pid, "waited", killWait)
	}
}

// reportedExit is the command's wait status as the guard reported it; it
// reads as an *os.ProcessState does.
type reportedExit struct{ ws syscall.WaitStatus }

func (e reportedExit) ExitCode() int { return e.ws.ExitStatus() }
func (e reportedExit) Sys() any      { return e.ws }

func (e reportedExit) String() string {
	var s string
	switch {
	case e.ws.Exited():
		s = "exit status " + strconv.Itoa(e.ws.ExitStatus())
	case e.ws.Signaled():
		s = "signal: " + e.ws.Signal().String()
	default:
		s = "wait status " + strconv.Itoa(int(e.ws))
	}
	if e.ws.CoreDump() {
		s += " (core dumped)"
	}
	return s
}

// runGuard is the guard: it waits for its command, starts it, reports
// it, forwards the runner's signals, reaps every process of the tree, and
// kills the tree when the runner asks or dies.
func runGuard() int {
	// Caught, not ignored (the command gets the default handlers at exec),
	// from the start: a terminal's signals reach the guard too (it is in
	// the runner's process group), and the runner forwards them.
	caught := make(chan os.Signal, 8)
	signal.Notify(caught, forwardedSignals...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	// The guard adopts the orphans of the command's tree. The runner's
	// death is signalled twice: by the end of the control socket (below),
	// and, sooner, by a parent-death signal, which must be one the guard
	// catches (a SIGKILL would leave the tree to init) and only makes it
	// look at its parent: the kernel sends it also when the runner's thread
	// that started the guard ends, while the runner lives on.
	runnerPID := os.Getppid()
	inNamespace := os.Getpid() == 1 // the init of a PID namespace (treeprotect_linux.go)
	if inNamespace {
		if err := enterNamespace(); err != nil {
			fmt.Fprintf(os.Stderr, "consullock run guard: -tree-protection %s: %v\n", ProtectionPIDNamespace, err)
			return exitNoNamespace
		}
	}
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
	syscall.CloseOnExec(guardFD) // the command must not hold it
	ctl := os.NewFile(guardFD, "guard control")
	report := func(kind string, n int64) { _ = writeGuardMsg(ctl, kind, n) }

	r := bufio.NewReader(ctl)
	spec, err := readGuardStart(r)
	if err != nil {
		return 0 // the runner went away before it held the lock
	}
	g := &guardProc{report: report, ownGroup: spec.OwnGroup}
	g.extend(spec.KillBy)
	g.cmd = &exec.Cmd{Path: spec.Path, Args: spec.Argv, Env: spec.Env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: sysProcAttr(spec.OwnGroup)}
	if err := g.cmd.Start(); err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.ENOEXEC
		}
		report(msgFailed, int64(errno))
		return ExitCannotExecute
	}
	report(msgStarted, int64(g.cmd.Process.Pid))
	if inNamespace { // nothing is reaped until the runner has the command's PID
		if m, err := readGuardMsg(r); err != nil || m.kind != msgAck {
			killTree()
			return 0
		}
	}
	ctlMsgs := readGuardMsgs(r)
	for {
		select {
		case <-caught:
			if os.Getppid() != runnerPID { // the parent-death signal
				killTree()
				return 0
			}
		case <-chld:
			if g.reap() {
				return 0
			}
		case m, ok := <-ctlMsgs:
			if !ok {
				killTree()
				return 0
			}
			if g.control(m) {
				return 0
			}
		case <-g.expiryC():
			if g.expire() {
				return 0
			}
		}
	}
}

// guardProc is the guard's command and what it has reported of it.
type guardProc struct {
	cmd      *exec.Cmd
	ownGroup bool
	report   func(kind string, n int64)
	exited   bool  // the command has exited (msgExited sent)
	signals  int64 // the runner's signals received: their sequence numbers
	// killBy is the latest kill-by (CLOCK_BOOTTIME ms; 0: none); expiry
	// fires at it.
	killBy int64
	expiry *time.Timer
}

// extend moves the kill-by to ms, if that is later.
func (g *guardProc) extend(ms int64) {
	if ms <= g.killBy {
		return
	}
	g.killBy = ms
	d := time.Duration(ms-bootMillis()) * time.Millisecond
	if g.expiry == nil {
		g.expiry = time.NewTimer(max(d, 0))
	} else {
		g.expiry.Reset(max(d, 0))
	}
}

func (g *guardProc) expiryC() <-chan time.Time {
	if g.expiry == nil {
		return nil
	}
	return g.expiry.C
}

// expire: the kill-by passed with no later one from the runner. The
// guard kills the tree, as the runner would have, and reports expired,
// then the command's end; true when the guard is done.
func (g *guardProc) expire() bool {
	if left := g.killBy - bootMillis(); left > 0 { // a timer fired early
		g.expiry.Reset(time.Duration(left) * time.Millisecond)
		return false
	}
	if g.reap() {
		return true // the command had exited and left nothing
	}
	g.report(msgExpired, int64(killTree()))
	if g.exited {
		g.report(msgEnded, 0)
	} else {
		g.exited = true
		g.report(msgFinished, int64(syscall.WaitStatus(syscall.SIGKILL))) // killed by SIGKILL, as killTree did
	}
	return true
}

// readGuardMsgs delivers the runner's messages until the control socket
// ends (the runner is gone), then closes the channel.
func readGuardMsgs(r *bufio.Reader) <-chan guardMsg {
	msgs := make(chan guardMsg)
	go func() {
		defer close(msgs)
		for {
			m, err := readGuardMsg(r)
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	return msgs
}

// reap reaps every exited process of the tree and reports the command's
// exit; true when the tree is gone and the guard is done.
func (g *guardProc) reap() bool {
	var status syscall.WaitStatus
	reaped := false
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			break
		}
		if pid == g.cmd.Process.Pid {
			status, reaped = ws, true
		}
	}
	if !reaped || g.exited {
		return false
	}
	// Reported after the reaping above, so that the runner finds no zombie
	// of the tree in the command's group. No child left means no
	// descendant (orphans come to the guard).
	g.exited = true
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); errors.Is(err, syscall.ECHILD) {
		g.report(msgFinished, int64(status))
		return true
	}
	g.report(msgExited, int64(status))
	return false
}

// control acts on one message of the runner; true when the guard is done.
func (g *guardProc) control(m guardMsg) bool {
	switch m.kind {
	case msgSignal:
		g.signals++
		if !g.exited {
			g.report(msgDelivered, g.signals)
		}
		if !g.exited || g.ownGroup {
			_ = signalChild(g.cmd.Process, g.ownGroup, syscall.Signal(m.n))
		}
	case msgEnd:
		g.report(msgEnded, int64(killTree()))
		return true
	case msgKillBy:
		g.extend(m.n)
	}
	return false
}
