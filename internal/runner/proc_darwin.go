package runner

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const ioctlReadTermios = unix.TIOCGETA

// setDeathSignal does nothing: macOS has no parent-death signal.
func setDeathSignal(*syscall.SysProcAttr) {}

// becomeSubreaper does nothing: macOS has no subreaper; launchd reaps
// orphans.
func becomeSubreaper() {}
