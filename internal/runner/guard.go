package runner

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The guard keeps a job from outliving its runner. Where the platform has
// one (guard_linux.go), the runner does not start the command itself: it
// starts its own binary again as the guard,
//
//	<runner binary> __consullock-run-guard [-group] -- <path> <argv...>
//
// and the guard starts the command, with the runner's stdin, stdout,
// stderr and the command's environment, as its own child. The guard is the
// subreaper of the command's tree, so every process the command starts,
// also one that calls setsid, stays its descendant. It kills that whole
// tree when the runner dies (the end of the runner's side of the control
// socket, which no other process holds, is the sign: the kernel closes it
// whatever ends the runner, SIGKILL included), and when the runner asks it
// to before it releases the lock. The runner is a subreaper too: when the
// guard is killed, the runner adopts the tree and kills it.
//
// The control socket is the guard's file descriptor guardFD. Each message
// is one line, a word and a number:
//
//	guard -> runner: started <pid> | failed <errno> | exited <wait status> | ended <processes killed>
//	runner -> guard: signal <number> | end
const (
	// GuardCommand is the first argument that makes the binary the guard
	// (internal/cli dispatches it before any other parsing). Not a command
	// for users.
	GuardCommand = "__consullock-run-guard"
	guardFD      = 3
)

// The messages' words.
const (
	msgStarted = "started" // the command runs: its pid
	msgFailed  = "failed"  // the command could not start: the errno
	msgExited  = "exited"  // the command exited and was reaped: its wait status
	msgEnded   = "ended"   // the tree is killed and reaped; the guard exits: how many were killed
	msgSignal  = "signal"  // send this signal to the command (its group if it has one)
	msgEnd     = "end"     // kill the tree, report ended, exit
)

// guardMsg is one message on the control socket.
type guardMsg struct {
	kind string
	n    int
}

func writeGuardMsg(w io.Writer, kind string, n int) error {
	_, err := fmt.Fprintf(w, "%s %d\n", kind, n)
	return err
}

// readGuardMsg reads the next message; io.EOF once the other side has
// closed its end (or died).
func readGuardMsg(r *bufio.Reader) (guardMsg, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if err == io.EOF && line != "" {
			err = io.ErrUnexpectedEOF
		}
		return guardMsg{}, err
	}
	kind, num, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	n, err := strconv.Atoi(num)
	if err != nil {
		return guardMsg{}, fmt.Errorf("guard protocol: bad message %q", line)
	}
	return guardMsg{kind: kind, n: n}, nil
}

// guardArgs are the guard's arguments after GuardCommand.
func guardArgs(ownGroup bool, path string, argv []string) []string {
	args := []string{GuardCommand}
	if ownGroup {
		args = append(args, "-group")
	}
	return append(append(args, "--", path), argv...)
}

// parseGuardArgs reads what guardArgs wrote.
func parseGuardArgs(args []string) (ownGroup bool, path string, argv []string, err error) {
	if len(args) > 0 && args[0] == "-group" {
		ownGroup, args = true, args[1:]
	}
	if len(args) < 3 || args[0] != "--" {
		return false, "", nil, fmt.Errorf("usage: %s [-group] -- <path> <argv...>", GuardCommand)
	}
	return ownGroup, args[1], args[2:], nil
}

// GuardMain is the guard's main (args: the words after GuardCommand). It
// is started by the runner only, with the control socket as file
// descriptor 3.
func GuardMain(args []string) int {
	ownGroup, path, argv, err := parseGuardArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consullock run guard:", err)
		return ExitUsage
	}
	return runGuard(ownGroup, path, argv)
}
