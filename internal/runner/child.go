package runner

import (
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// Environment the child receives in addition to the runner's own.
const (
	EnvLockHeld = "CONSUL_LOCK_HELD" // "true", as `consul lock` sets it
	// EnvFencingToken is the Raft index of the acquisition: it only grows
	// across holders, also when the key is deleted and created again or
	// reset by a plain write. Give it to what the child writes to.
	EnvFencingToken = "CONSUL_LOCK_FENCING_TOKEN"
	// EnvLockIndex is Consul's LockIndex of the acquired key. It restarts
	// at 1 when the key is re-created and at 0 after a plain write: not a
	// fencing token.
	EnvLockIndex   = "CONSUL_LOCK_INDEX"
	EnvLockSession = "CONSUL_LOCK_SESSION" // the holder session's ID
	EnvLockKey     = "CONSUL_LOCK_KEY"     // the lock key
)

// childEnv is base without any CONSUL_LOCK_* variable of ours, plus ours
// and extra (the run-once variables).
func childEnv(base []string, key, sessionID string, g lockproto.Grant, extra ...string) []string {
	out := make([]string, 0, len(base)+5+len(extra))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case EnvLockHeld, EnvFencingToken, EnvLockIndex, EnvLockSession, EnvLockKey, EnvRunID, EnvAttempt, EnvScheduledTime:
			continue
		}
		out = append(out, kv)
	}
	out = append(out,
		EnvLockHeld+"=true",
		EnvFencingToken+"="+strconv.FormatUint(g.FencingToken, 10),
		EnvLockIndex+"="+strconv.FormatUint(g.LockIndex, 10),
		EnvLockSession+"="+sessionID,
		EnvLockKey+"="+key,
	)
	return append(out, extra...)
}

// child is the command run under the lock.
type child struct {
	// cmd is the command; under a guard (guard.go) the guard process.
	cmd *exec.Cmd
	// commandPID is the command's pid (its process group's, with ownGroup).
	commandPID int
	// ownGroup is set when the child leads its own process group (stdin
	// is not a terminal); signals then go to the whole group.
	ownGroup bool
	// guard runs the command where the platform has one; nil otherwise.
	guard *guard
	// done is closed when the child has exited and been reaped; state is
	// then set.
	done  chan struct{}
	state exitState
	// reports is what the guard reported of the command up to its exit
	// (outcome.go); complete once done is closed.
	reports commandReports
	// sent counts the signals sent through the guard (their sequence
	// numbers); the supervisor's goroutine only.
	sent int64
}

// startChild starts argv with the runner's stdin, stdout and stderr, and a
// goroutine that reaps it. The goroutine ends when the child exits; the
// runner always waits for done before it exits itself. Where the platform
// has a guard the guard starts the command (startGuarded): standby, the
// one prepareGuard started while the runner waited, or a new one; it kills
// the tree at killBy unless extend moves that later. out is the
// command's stdout and stderr; nil for the runner's.
func startChild(standby *guard, argv, env []string, out outputs, killBy time.Time, log *slog.Logger) (*child, error) {
	out = out.orRunners()
	cmd := exec.Command(argv[0], argv[1:]...)
	ownGroup := !stdinIsTerminal()
	if guarded {
		if cmd.Err != nil {
			return nil, cmd.Err
		}
		return startGuarded(standby, cmd.Path, argv, env, out, ownGroup, killBy, log)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out.stdout, out.stderr
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr(ownGroup)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, commandPID: cmd.Process.Pid, ownGroup: ownGroup, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the exit status is in ProcessState
		c.state = cmd.ProcessState
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.commandPID }

// extend moves the guard's kill-by to t (the runner confirmed a renewal).
// Without a guard the runner alone keeps the stop rule.
func (c *child) extend(t time.Time) {
	if c.guard != nil {
		c.guard.killBy(t)
	}
}

// signal sends sig to the child (and its group when it has one).
func (c *child) signal(sig os.Signal) error {
	if c.guard != nil {
		return c.guard.signal(c, sig)
	}
	return signalChild(c.cmd.Process, c.ownGroup, sig)
}

// groupLeft reports whether processes remain in the child's process group
// after the child itself has exited (false without an own group). Call it
// only after done is closed: without a guard it reaps orphans the runner
// adopted as a subreaper, which must not race with the reaping of the
// child. (Under a guard the guard reaps them.)
func (c *child) groupLeft() bool {
	if !c.ownGroup {
		return false
	}
	if c.guard == nil {
		reapAdopted()
	}
	return groupExists(c.commandPID)
}

// endTree ends, before the lock is released, every process the command
// left that the process group does not hold (it called setsid): the guard
// kills its whole tree and exits. Without a guard it does nothing.
func (c *child) endTree(log *slog.Logger) {
	if c.guard != nil {
		c.guard.endTree(log)
	}
}

// outputs are a command's stdout and stderr: the runner's, or the pipes
// of -keep-output.
type outputs struct{ stdout, stderr *os.File }

// orRunners is o with the runner's own stdout and stderr where o has none.
func (o outputs) orRunners() outputs {
	if o.stdout == nil {
		o.stdout = os.Stdout
	}
	if o.stderr == nil {
		o.stderr = os.Stderr
	}
	return o
}

// runners reports whether o are the runner's own stdout and stderr.
func (o outputs) runners() bool { return o.stdout == os.Stdout && o.stderr == os.Stderr }
