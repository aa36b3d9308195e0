//go:build !linux && !darwin

package runner

import (
	"os"
	"syscall"
)

// forwardedSignals are passed on to the child.
var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// abortsWaiting reports whether sig ends the wait for the lock.
func abortsWaiting(os.Signal) bool { return true }

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = os.Kill
)

func stdinIsTerminal() bool { return false }

func sysProcAttr(bool) *syscall.SysProcAttr { return nil }

// signalChild ends the child for SIGTERM and SIGKILL (the platform has no
// other way) and tries to deliver any other signal.
func signalChild(p *os.Process, _ bool, sig os.Signal) error {
	if sig == sigTerm || sig == sigKill {
		return p.Kill()
	}
	return p.Signal(sig)
}

func groupExists(int) bool { return false }

func reapAdopted() {}

func becomeSubreaper() {}
