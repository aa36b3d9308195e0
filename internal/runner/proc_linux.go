package runner

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const ioctlReadTermios = unix.TCGETS

// setDeathSignal has the kernel SIGKILL the child when the runner dies.
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// becomeSubreaper makes the runner the parent of the command's orphaned
// descendants (instead of init), so that it can reap them and tell when
// the command's process group is empty.
func becomeSubreaper() {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}
