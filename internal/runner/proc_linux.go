package runner

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const ioctlReadTermios = unix.TCGETS

// setDeathSignal has the kernel SIGKILL the child when its parent dies
// (the guard, which starts the command on Linux).
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// becomeSubreaper makes the runner the parent of orphaned descendants
// (instead of init). The command's guard is the subreaper of the command's
// tree (guard.go); the runner adopts the tree only if the guard is killed,
// and then kills it.
func becomeSubreaper() {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}
