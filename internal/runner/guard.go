package runner

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The guard keeps a job from outliving its runner. Where the platform has
// one (guard_linux.go), the runner does not start the command itself: it
// starts its own binary again as the guard (`<runner binary>
// __consullock-run-guard`) when it begins to wait for the lock, so that
// the guard's start costs the hand-over nothing, and once it holds the lock
// it sends the guard the command (path, argv, environment); the guard
// starts it with the runner's stdin, stdout and stderr as its own child.
// The guard is the subreaper of the command's tree, so every process the
// command starts, also one that calls setsid, stays its descendant. It
// kills that whole tree when the runner dies (the end of the runner's side
// of the control socket, which no other process holds, is the sign: the
// kernel closes it whatever ends the runner, SIGKILL included; a caught
// parent-death signal comes sooner), and when the runner asks it to before
// it releases the lock. The runner is a subreaper too: when the guard is
// killed, the runner adopts the tree and kills it.
//
// The guard also keeps the stop rule when the runner cannot: a runner that
// does not run (SIGSTOP of the runner alone, a process starved of CPU)
// neither renews nor stops its command. With the start and after every
// renewal Consul answered, the runner sends the guard a kill-by time,
// lockmodel.StopRule.GuardKillAfter past that renewal; when it passes
// without a later one, the guard kills the tree itself and reports
// expired. Times are CLOCK_BOOTTIME milliseconds, which both processes
// read alike and which also runs while the machine is suspended.
//
// The control socket is the guard's file descriptor guardFD. Each message
// is one line, a word and a number; start is followed by that many bytes
// of JSON (guardStart):
//
//	runner -> guard: start <length> | ack 0 | killby <boottime ms> | signal <number> | end
//	guard -> runner: started <pid> | failed <errno> | delivered <signal> | exited <wait status> | finished <wait status> |
//	                 ended <processes killed> | expired <processes killed>
//
// The order of the guard's reports is the order of what happened to the
// command: a delivered before the command's exited (or finished) means a
// signal the runner asked for reached the running command; an expired
// after it means the command had exited by itself before the kill-by
// passed (decideOutcome reads them so).
const (
	// GuardCommand is the first argument that makes the binary the guard
	// (internal/cli dispatches it before any other parsing). Not a command
	// for users.
	GuardCommand = "__consullock-run-guard"
	guardFD      = 3
)

// Tree protection (-tree-protection; treeprotect_linux.go): what ends the
// command's process tree when more than the runner is killed.
const (
	// ProtectionGuard: the guard, in a process group of its own when the
	// command has one, so that a kill of the runner's group spares it.
	ProtectionGuard = "guard"
	// ProtectionPIDNamespace: also the guard as the init of a PID
	// namespace, so that the kernel ends the tree when the guard dies.
	ProtectionPIDNamespace = "pid-namespace"
)

// treeProtection is -tree-protection, set once before the first guard
// starts.
var treeProtection = ProtectionGuard

// The messages' words.
const (
	msgStart   = "start"   // start the command: the length of the guardStart that follows
	msgStarted = "started" // the command runs: its pid
	msgFailed  = "failed"  // the command could not start: the errno
	msgExited  = "exited"  // the command exited and was reaped: its wait status
	// msgFinished: the command exited and left no process: its wait status;
	// the guard exits (nothing is left to guard, and a hand-over need not
	// wait for the round trip of end).
	msgFinished = "finished"
	msgEnded    = "ended"  // the tree is killed and reaped; the guard exits: how many were killed
	msgSignal   = "signal" // send this signal to the command (its group if it has one)
	msgEnd      = "end"    // kill the tree, report ended, exit
	// msgDelivered: a signal the runner asked for is being sent to the
	// command, which has not exited (sent before the signal is).
	msgDelivered = "delivered"
	// msgAck: the runner has the command's PID (from a guard in a PID
	// namespace, which reaps nothing before it).
	msgAck = "ack"
	// msgKillBy: kill the tree at this CLOCK_BOOTTIME millisecond unless a
	// later kill-by comes first (the latest one counts).
	msgKillBy = "killby"
	// msgExpired: a kill-by passed; the guard killed the tree (how many
	// processes), then reports finished, or ended when the command had
	// exited already, and exits.
	msgExpired = "expired"
)

// guardStart is the command the guard starts.
type guardStart struct {
	Path     string   `json:"path"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	OwnGroup bool     `json:"own_group"` // in a process group of its own
	KillBy   int64    `json:"kill_by"`   // the first kill-by (msgKillBy); 0: none
}

// maxGuardStart bounds what the guard reads as a start (argv and
// environment are bounded by the kernel's ARG_MAX well below it).
const maxGuardStart = 64 << 20

// guardMsg is one message on the control socket.
type guardMsg struct {
	kind string
	n    int64 // a pid, errno, wait status or count; a kill-by's milliseconds
}

func writeGuardMsg(w io.Writer, kind string, n int64) error {
	_, err := fmt.Fprintf(w, "%s %d\n", kind, n)
	return err
}

// readGuardMsg reads the next message; io.EOF once the other side has
// closed its end (or died).
func readGuardMsg(r *bufio.Reader) (guardMsg, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && line != "" {
			err = io.ErrUnexpectedEOF
		}
		return guardMsg{}, err
	}
	kind, num, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return guardMsg{}, fmt.Errorf("guard protocol: bad message %q", line)
	}
	return guardMsg{kind: kind, n: n}, nil
}

func writeGuardStart(w io.Writer, s guardStart) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s %d\n%s", msgStart, len(b), b)
	return err
}

// readGuardStart reads the start message; io.EOF if the runner went away
// first.
func readGuardStart(r *bufio.Reader) (guardStart, error) {
	m, err := readGuardMsg(r)
	if err != nil {
		return guardStart{}, err
	}
	if m.kind != msgStart || m.n < 0 || m.n > maxGuardStart {
		return guardStart{}, fmt.Errorf("guard protocol: want %s, got %s %d", msgStart, m.kind, m.n)
	}
	b := make([]byte, m.n)
	if _, err := io.ReadFull(r, b); err != nil {
		return guardStart{}, err
	}
	var s guardStart
	if err := json.Unmarshal(b, &s); err != nil {
		return guardStart{}, fmt.Errorf("guard protocol: start: %w", err)
	}
	if s.Path == "" || len(s.Argv) == 0 {
		return guardStart{}, fmt.Errorf("guard protocol: start without a command")
	}
	return s, nil
}

// GuardMain is the guard's main (args: the words after GuardCommand, none).
// It is started by the runner only, with the control socket as file
// descriptor guardFD.
func GuardMain(args []string) int {
	if len(args) != 0 {
		fmt.Fprintf(os.Stderr, "consullock run guard: no arguments expected; %s is started by consullock run only\n", GuardCommand)
		return ExitUsage
	}
	return runGuard()
}
