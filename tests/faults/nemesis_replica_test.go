package faults

import (
	"errors"
	"syscall"
	"testing"
)

// The undo of a controller kill injected late can come after the next
// kill of the same replica found it down; both undos start the replica.
// The nemesis run of seed 20261202 was left with two controller-2
// processes that way, one never killed again.
func TestReplica_aSecondStartLeavesOneProcess(t *testing.T) {
	r := &replica{name: "controller-9", dir: t.TempDir(), command: []string{"sleep", "600"}}
	t.Cleanup(r.stop)
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	first := r.cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(first, syscall.SIGKILL) })
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	if got := r.kill(); got != "controller-9#1" {
		t.Errorf("kill() = %q; want the one process, controller-9#1", got)
	}
	if err := syscall.Kill(first, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the first process (pid %d) still runs after the replica was killed: a second start left two processes", first)
	}
	if got := r.kill(); got != "" {
		t.Errorf("a kill of a replica that is down killed %q; want none", got)
	}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	if got := len(r.logs); got != 2 {
		t.Errorf("%d process logs after a start, a kill and a start; want 2 (one per process)", got)
	}
}
