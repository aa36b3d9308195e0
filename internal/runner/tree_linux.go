package runner

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// treeProc is a descendant found in /proc.
type treeProc struct {
	pid    int
	zombie bool // exited, not reaped yet
}

// childrenFiles reports whether the kernel lists children in
// /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN, in every
// distribution kernel); without them walkTree scans every /proc/<pid>/stat.
var childrenFiles = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/task/" + strconv.Itoa(syscall.Gettid()) + "/children")
	return err == nil
})

// walkTree calls visit for every descendant of root, a parent before its
// children, and reads a process's children before it visits it (so that
// a visit that kills it does not hide them: they are being reparented).
// A process that forks while the walk runs may be missed; killTree walks
// again until it finds none.
func walkTree(root int, visit func(treeProc)) {
	if childrenFiles() {
		walkTreeWith(root, childrenOf, visit)
	} else {
		walkTreeWith(root, parentTable().childrenOf, visit)
	}
}

// walkTreeWith is walkTree with kids listing a process's children.
func walkTreeWith(root int, kids func(int) []int, visit func(treeProc)) {
	for queue := kids(root); len(queue) > 0; queue = queue[1:] {
		pid := queue[0]
		next := kids(pid)
		visit(treeProc{pid: pid, zombie: procState(pid) == 'Z'})
		queue = append(queue, next...)
	}
}

// childrenOf lists pid's children: each of its threads lists those it
// started.
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, _ := os.ReadDir(dir)
	var out []int
	for _, task := range tasks {
		data, _ := os.ReadFile(dir + task.Name() + "/children")
		for _, field := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(field); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// parents maps each process to its children, from /proc/*/stat.
type parents map[int][]int

func parentTable() parents {
	t := parents{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if fields := statFields(pid); len(fields) > 1 {
			if ppid, err := strconv.Atoi(fields[1]); err == nil {
				t[ppid] = append(t[ppid], pid)
			}
		}
	}
	return t
}

func (t parents) childrenOf(pid int) []int { return t[pid] }

// statFields are the fields of /proc/<pid>/stat after the command name:
// state, ppid, ... (nil if the process is gone).
func statFields(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(data, ')') // the name may hold spaces and ')'
	if i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}

// procState is the state letter of pid (R, S, D, Z, ...), 0 if it is gone.
func procState(pid int) byte {
	if f := statFields(pid); len(f) > 0 && f[0] != "" {
		return f[0][0]
	}
	return 0
}

// killTree SIGKILLs every descendant of the calling process and reaps them,
// again until none is left, and returns how many live processes it
// killed. The caller must be a subreaper, so that the orphans of the killed
// become its own children (the walk finds them, wait4 reaps them: none
// escapes, also not one that called setsid), and no other part of it may
// wait for its children meanwhile.
func killTree() int {
	self := os.Getpid()
	killed := map[int]bool{}
	for {
		// No child left (all reaped): then no descendant either, as every
		// orphan is reparented to the caller. The common case, no walk.
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); errors.Is(err, syscall.ECHILD) {
			return len(killed)
		}
		found := 0
		walkTree(self, func(p treeProc) {
			found++
			if !p.zombie {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
				killed[p.pid] = true
			}
		})
		if found == 0 {
			return len(killed)
		}
		// Block until one of them is gone, then reap whatever else is.
		_, _ = syscall.Wait4(-1, &ws, 0, nil)
		reapAdopted()
	}
}
