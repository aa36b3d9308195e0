package runner

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Tree protection: what ends the command's process tree when the runner
// dies. The guard (guard.go) kills the tree when the runner dies alone,
// whatever kills it. Two more things are needed for kills that take more
// than the runner:
//
//   - A group kill (`timeout -s KILL`, supervisord's killasgroup,
//     `kill -9 -- -PGID`) signals the runner's process group. The guard
//     leaves that group (a group of its own) whenever the command gets one
//     (stdin is not a terminal), so the kill reaches the runner only and
//     the guard ends the tree. With stdin a terminal the command must stay
//     in the terminal's foreground group, the runner's, to read it; so
//     does the guard, and a group kill then takes runner, guard and
//     command together (the namespace below still ends the rest).
//   - Runner and guard killed together (`pkill -9 -f consullock`): no
//     process is left to act, so only the kernel can end the tree. With
//     `-tree-protection pid-namespace` (it needs CAP_SYS_ADMIN: root, or a
//     unit or container that grants it) the guard is the init of a PID
//     namespace of its own, with a mount namespace whose /proc shows that
//     PID namespace; when the guard dies, by any signal, the kernel kills
//     every process in the namespace. The job then sees small PIDs (it is
//     PID 2, the guard PID 1), `ps` and /proc show its own tree only, PIDs
//     of processes outside (a daemon's pidfile) do not exist for it, and
//     a PID it reports is not the host's; mounts it makes stay in its
//     mount namespace. Its stdin, stdout, stderr, environment, signals to
//     its own processes and exit codes are unchanged. Because a job can
//     notice that, it is asked for, not the default (`guard`).

// exitNoNamespace is the guard's exit code when it was started as the
// init of a PID namespace but could not mount its /proc.
const exitNoNamespace = 96

// guardProcAttr is the guard's process attributes: a process group of its
// own when the command gets one (ownGroup), and a PID and mount namespace
// when withNS.
func guardProcAttr(ownGroup, withNS bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: ownGroup}
	if withNS {
		attr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
	}
	return attr
}

// enterNamespace is the guard's first step when it is the init of a new
// PID namespace: its mounts stop propagating to the host (and the job's
// with them), and /proc is mounted anew so that it shows the namespace's
// processes (the guard's tree walk and the job's `ps` read it). An error
// leaves the guard unusable: it must exit.
func enterNamespace() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// hostPID is the PID, as the runner sees it, of the guard's child whose
// PID in the guard's namespace is nsPID (the last field of its NSpid); 0
// if it is not found.
func hostPID(guardPID, nsPID int) int {
	for _, pid := range childrenOf(guardPID) {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
				ids := strings.Fields(rest)
				if len(ids) > 0 && ids[len(ids)-1] == strconv.Itoa(nsPID) {
					_ = f.Close()
					return pid
				}
				break
			}
		}
		_ = f.Close()
	}
	return 0
}
