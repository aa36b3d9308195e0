package runner

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The walk finds every descendant, grandchildren and a setsid'd process
// included, from the kernel's children files and from /proc/*/stat alike.
func TestWalkTree_findsEveryDescendantWithOrWithoutChildrenFiles(t *testing.T) {
	// sh starts a sleep, and a setsid'd sh that starts another; it prints
	// their pids and waits.
	cmd := exec.Command("sh", "-c", `sleep 30 & echo $!; setsid sh -c 'sleep 30 & echo $!; wait' & echo $!; wait`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		walkTree(cmd.Process.Pid, func(p treeProc) { _ = syscall.Kill(p.pid, syscall.SIGKILL) })
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	buf := make([]byte, 256)
	var want []int
	for text := ""; len(want) < 3; {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("read the pids: %v (have %q)", err, text)
		}
		text += string(buf[:n])
		want = want[:0]
		for _, f := range strings.Fields(text) {
			pid, _ := strconv.Atoi(f)
			want = append(want, pid)
		}
	}
	slices.Sort(want)
	for name, kids := range map[string]func(int) []int{
		"children files": childrenOf,
		"/proc/*/stat":   func(pid int) []int { return parentTable().childrenOf(pid) },
	} {
		var got []int
		walkTreeWith(cmd.Process.Pid, kids, func(p treeProc) { got = append(got, p.pid) })
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: descendants %v, want %v", name, got, want)
		}
	}
}
