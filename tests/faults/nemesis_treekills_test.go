package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// What the kills of a job's runner (FaultGroupKill, FaultTreeKill) share:
// the kill of a holder's tree, the watch of its command's process group,
// and the summary line.

// treeGoneBound is how long after a group kill or a kill of runner and
// guard the killed command's process group may still have a live
// process: the guard ends the tree as soon as its runner's pipe closes,
// the kernel at once when the namespace's init dies.
const treeGoneBound = 5 * time.Second

// treeKill is one group-kill or runner-and-guard-kill that struck: the
// holder's command (host PID, the leader of its process group), whether
// it ran at the kill, and how long its group still had a live process
// after (-1: still after treeGoneBound).
type treeKill struct {
	kind   FaultKind
	worker string
	pid    int
	alive  bool
	gone   time.Duration
}

// killTree SIGKILLs with kill what a holder of sh's lock runs (its
// runner's process group, or its runner and guard together), as users'
// kills do, and then watches the command's process group: it must be
// empty within treeGoneBound (a job never outlives its runner). kill
// returns false when it killed nothing.
func (n *nemesis) killTree(sh shot, kill func(h lockTarget, holder Write, p *os.Process) bool) bool {
	s := sh.s
	h := n.lockTarget(s)
	holder, p := n.holder(h)
	if p == nil {
		return false
	}
	alive := running(holder.PID)
	leaderStart := startTime(holder.PID)
	if !kill(h, holder, p) {
		return false
	}
	n.mu.Lock()
	k := len(n.treeKills)
	n.treeKills = append(n.treeKills, treeKill{kind: s.Kind, worker: holder.Worker, pid: holder.PID, alive: alive, gone: -1})
	n.mu.Unlock()
	sh.wg.Add(1)
	go func() {
		defer sh.wg.Done()
		began := time.Now()
		for time.Since(began) < treeGoneBound {
			if reused(holder.PID, leaderStart) || (!running(holder.PID) && !groupAlive(holder.PID)) {
				n.mu.Lock()
				n.treeKills[k].gone = time.Since(began)
				n.mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		h.store.Mark(holder.Worker, fmt.Sprintf("nemesis: %s: process group %d of the command still has a live process %s after the kill", s.Kind, holder.PID, treeGoneBound))
	}()
	return true
}

// startTime is pid's start time (clock ticks after boot, field 22 of
// /proc/<pid>/stat); "" once it is gone.
func startTime(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return ""
	}
	if f := strings.Fields(string(data[i+1:])); len(f) > 19 {
		return f[19]
	}
	return ""
}

// reused reports whether pid now names another process than the one
// that started at start: the kernel reuses a PID (also as a process group
// ID) only once no process has it as its ID or group, so the command's
// group is then gone. PIDs wrap within minutes under the nemesis's churn
// (pid_max is often 32768).
func reused(pid int, start string) bool {
	now := startTime(pid)
	return start != "" && now != "" && now != start
}

// groupAlive reports whether a process of group pgid is alive (not a
// zombie).
func groupAlive(pgid int) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		// After the name: state, ppid, pgrp.
		f := strings.Fields(string(data[i+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// treeKillSummary is the kills' line: per kind, the kills, those that
// struck a running command, and the longest time its process group took
// to empty.
func treeKillSummary(kills []treeKill) string {
	var parts []string
	for _, kind := range []FaultKind{FaultGroupKill, FaultTreeKill} {
		count, alive, survived, longest := 0, 0, 0, time.Duration(0)
		for _, k := range kills {
			if k.kind != kind {
				continue
			}
			count++
			if k.alive {
				alive++
			}
			if k.gone < 0 {
				survived++
			}
			longest = max(longest, k.gone)
		}
		parts = append(parts, fmt.Sprintf("%s %d (command running at the kill %d; process group empty after at most %s; still live after %s: %d)",
			kind, count, alive, longest.Round(time.Millisecond), treeGoneBound, survived))
	}
	return "kills of the job's runner: " + strings.Join(parts, "; ") + "\n"
}
