//go:build linux || darwin

package runner

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are passed on to the child. SIGINT, SIGTERM, SIGHUP and
// SIGQUIT also end the wait for the lock before the child has started.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// abortsWaiting reports whether sig ends the wait for the lock.
func abortsWaiting(sig os.Signal) bool {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
)

// stdinIsTerminal reports whether the runner's stdin is a terminal.
func stdinIsTerminal() bool {
	_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), ioctlReadTermios)
	return err == nil
}

// sysProcAttr puts the child in its own process group when ownGroup, so
// that signals reach the processes it starts too; and, where the platform
// can, has the kernel kill the child if the runner dies (setDeathSignal), so
// that a crashed runner leaves no child working without the lock.
func sysProcAttr(ownGroup bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: ownGroup}
	setDeathSignal(attr)
	return attr
}

// signalChild sends sig to the child, or to its whole process group when it
// has its own.
func signalChild(p *os.Process, ownGroup bool, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	if ownGroup {
		err := syscall.Kill(-p.Pid, s)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return p.Signal(s)
}

// groupExists reports whether any process is left in process group pgid.
func groupExists(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// reapAdopted reaps every exited child of the runner without waiting. As a
// subreaper (Linux) the runner adopts the command's orphaned descendants;
// reaped, they no longer count as members of the process group.
func reapAdopted() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
