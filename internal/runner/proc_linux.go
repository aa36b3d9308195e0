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
