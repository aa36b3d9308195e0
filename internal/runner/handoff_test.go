package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// Runners of a lock declared with waiters = "handoff"
// (lockmodel.WaitersHandOff, lockproto/queue.go handOff): waiters queue as
// with "queue", and a releasing runner hands the lock to the first in line
// in its release transaction, so that waiter wakes holding the lock.

// The log events of a hand-over: the releasing holder's, and the waiter's
// that wakes holding the lock.
const (
	logHandedOff = "lock handed to the first waiter in line"
	logHandedIn  = "the previous holder handed the lock to this runner"
)

// declareHandOff declares a mutex whose waiters hand off (a run-once job
// with ro) with profile p, and mints the worker token as
// consullock_acl_policy renders it (queue_prefixes included).
func declareHandOff(t testing.TB, ro *ledger.RunOnce, p *lockmodel.SessionProfile) (lockmodel.Lock, string) {
	t.Helper()
	return declareWithWaiters(t, lockmodel.WaitersHandOff, ro, p, false)
}

var handedOffTo = regexp.MustCompile(`msg="` + logHandedOff + `"[^\n]* next_session=([0-9a-f-]+)`)

// handOffs are the sessions runner p handed the lock to, in order.
func handOffs(p *proc) []string {
	var out []string
	for _, m := range handedOffTo.FindAllStringSubmatch(p.out.String(), -1) {
		out = append(out, m[1])
	}
	return out
}

// watchSessionEnd follows session id with blocking queries and returns a
// function that waits (up to timeout) for the time the test saw it gone.
func watchSessionEnd(t testing.TB, id string) func(timeout time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ended := make(chan time.Time, 1)
	go func() {
		var index uint64
		for ctx.Err() == nil {
			info, meta, err := agent.Client().Session().Info(id, (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx))
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if info == nil {
				ended <- time.Now()
				return
			}
			index = consul.NextIndex(index, meta.LastIndex)
		}
	}()
	return func(timeout time.Duration) time.Time {
		t.Helper()
		select {
		case at := <-ended:
			return at
		case <-time.After(timeout):
			t.Fatalf("session %s did not end within %s", id, timeout)
			return time.Time{}
		}
	}
}

// Four runners queued behind a holder on a handoff lock run in arrival
// order, one at a time, with strictly increasing fencing tokens; every
// releasing runner with a waiter behind it hands the lock to that waiter
// (which logs it was handed the lock, and never locks itself), and the
// queue is left empty.
func TestHandOff_runnersRunInArrivalOrderEachHandedTheLock(t *testing.T) {
	t.Parallel()
	l, token := declareHandOff(t, nil, fastProfile(t, time.Second))
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	ps := []*proc{holder}
	for i := range 4 {
		tag := fmt.Sprintf("w%d", i+1)
		p := startRun(t, tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-sleep", "200ms")...)
		waitQueued(t, p)
		ps = append(ps, p)
	}
	holder.closeStdin()
	for _, p := range ps {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	runs := readRuns(t, record)
	var order []string
	for _, r := range runs {
		order = append(order, r.tag)
	}
	if got := strings.Join(order, ","); got != "holder,w1,w2,w3,w4" {
		t.Fatalf("commands ran in the order %s; want holder,w1,w2,w3,w4", got)
	}
	if n := maxConcurrent(runs); n != 1 {
		t.Fatalf("%d commands ran at once", n)
	}
	for i := 1; i < len(runs); i++ {
		if runs[i].token <= runs[i-1].token {
			t.Fatalf("fencing token of %s is %d after %d of %s; want it strictly greater", runs[i].tag, runs[i].token, runs[i-1].token, runs[i-1].tag)
		}
	}
	for i, p := range ps {
		want := []string(nil)
		if i+1 < len(ps) {
			want = []string{sessionOf(t, ps[i+1])}
		}
		if got := handOffs(p); !slices.Equal(got, want) {
			t.Fatalf("%s handed the lock to sessions %v; want %v (the next in line):\n%s", p.name, got, want, p.out.String())
		}
		if handed := strings.Contains(p.out.String(), logHandedIn); handed != (i > 0) {
			t.Fatalf("%s logged %q: %v; want %v:\n%s", p.name, logHandedIn, handed, i > 0, p.out.String())
		}
		if runs[i].session != sessionOf(t, p) {
			t.Fatalf("%s's command ran with session %s; want its runner's %s", p.name, runs[i].session, sessionOf(t, p))
		}
	}
	if left := queueEntries(t, l); len(left) != 0 {
		t.Fatalf("queue entries left: %+v", left)
	}
}

// A runner first in line that is SIGKILLed (or SIGSTOPped) before the
// holder releases is handed the lock: the lock then stays with its session
// until Consul ends it, and is free only after that session's lock-delay.
// The runner behind it starts after that, never while another command
// runs, within 2 x ttl + lock_delay of the signal (the documented price)
// plus a margin for the waiter's retry and the command's start. The
// stopped one, once thawed, finds its session gone: it either queues again
// and runs after, or, if it takes the hand-off it slept through, its loss
// judge refuses it (no renewal for too long) and it exits 123 without
// starting the command.
func TestHandOff_firstInLineKilledOrStopped(t *testing.T) {
	// margin covers the waiter's lock-delay retry, the child's start and a
	// loaded machine; the bound itself is the profile's WorstCaseGap.
	const margin = 5 * time.Second
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILLed", syscall.SIGSTOP: "SIGSTOPped"}[sig]
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			profile := fastProfile(t, 3*time.Second)
			l, token := declareHandOff(t, nil, profile)
			record := filepath.Join(t.TempDir(), "record")
			holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
			waitStarted(t, record, "holder")
			first := startRun(t, "first", token, []string{"-lock", l.Name}, childArgs(record, "first", "-sleep", "100ms")...)
			waitOutput(t, first, "first in the waiter queue")
			firstSession := sessionOf(t, first)
			sessionEnd := watchSessionEnd(t, firstSession)
			next := startRun(t, "next", token, []string{"-lock", l.Name}, childArgs(record, "next", "-sleep", "100ms")...)
			waitOutput(t, next, "waiting in the queue")
			signalled := time.Now()
			if err := first.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			holder.closeStdin()
			if code := holder.wait(time.Minute); code != 0 {
				t.Fatalf("holder exited %d", code)
			}
			if got := handOffs(holder); !slices.Equal(got, []string{firstSession}) {
				t.Fatalf("the holder handed the lock to %v; want the %s first in line %s:\n%s", got, name, firstSession, holder.out.String())
			}
			waitStarted(t, record, "next")
			ended := sessionEnd(time.Minute)
			if code := next.wait(time.Minute); code != 0 {
				t.Fatalf("next exited %d:\n%s", code, next.out.String())
			}
			if strings.Contains(next.out.String(), logHandedIn) {
				t.Fatalf("next was handed the lock by the %s runner:\n%s", name, next.out.String())
			}
			nextRun := lastRun(t, record, "next")
			if !nextRun.start.After(ended) {
				t.Fatalf("next started %s before the first in line's session was seen ended", ended.Sub(nextRun.start))
			}
			stall, bound := nextRun.start.Sub(signalled), profile.Resolve().WorstCaseGap()+margin
			t.Logf("MEASURED %s first in line handed the lock (ttl %s, lock_delay %s, worst_case_gap %s): next started %.1fs after the signal, %.1fs after the holder exited, %.1fs after the session was seen ended",
				name, profile.TTL, profile.LockDelay, profile.Resolve().WorstCaseGap(), stall.Seconds(), nextRun.start.Sub(holder.exited).Seconds(), nextRun.start.Sub(ended).Seconds())
			if stall > bound {
				t.Fatalf("next started %s after the signal; want at most 2 x ttl + lock_delay + %s = %s", stall, margin, bound)
			}
			if sig == syscall.SIGSTOP {
				if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				switch code := first.wait(time.Minute); code {
				case 0:
				case ExitLockLost:
					if lastRun(t, record, "first") != nil {
						t.Fatalf("first exited %d but its command ran:\n%s", code, first.out.String())
					}
				default:
					t.Fatalf("first exited %d after the thaw; want 0 or %d:\n%s", code, ExitLockLost, first.out.String())
				}
			}
			if n := maxConcurrent(readRuns(t, record)); n != 1 {
				t.Fatalf("%d commands ran at once", n)
			}
			if left := queueEntries(t, l); len(left) != 0 {
				t.Fatalf("queue entries left: %+v", left)
			}
		})
	}
}

// `consul lock` racers (which do not queue and are never handed the lock)
// and handoff runners on the same prefix: never two commands at once,
// everyone runs, and the runners' fencing tokens increase in start order.
func TestHandOff_consulLockRacersAndHandedRunnersNeverOverlap(t *testing.T) {
	t.Parallel()
	l, token := declareHandOff(t, nil, fastProfile(t, time.Second))
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	runners := []*proc{holder}
	var ps []*proc
	for i := range 3 {
		tag := fmt.Sprintf("q%d", i+1)
		p := startRun(t, tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-sleep", "300ms")...)
		waitQueued(t, p)
		ps, runners = append(ps, p), append(runners, p)
		tag = fmt.Sprintf("c%d", i+1)
		ps = append(ps, startConsulLock(t, tag, 1, l.Prefix, childArgs(record, tag, "-sleep", "300ms")...))
	}
	waitForSessionsMatching(t, isConsulLockSession(l.Prefix), 3)
	holder.closeStdin()
	for _, p := range append([]*proc{holder}, ps...) {
		if code := p.wait(2 * time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	runs := readRuns(t, record)
	if len(runs) != 7 {
		t.Fatalf("%d commands ran, want 7", len(runs))
	}
	if n := maxConcurrent(runs); n != 1 {
		t.Fatalf("%d commands ran at once", n)
	}
	var last *childRun
	for _, r := range runs {
		if !strings.HasPrefix(r.tag, "c") { // consul lock gives its command no token
			if last != nil && r.token <= last.token {
				t.Fatalf("fencing token of %s is %d after %d of %s; want it strictly greater", r.tag, r.token, last.token, last.tag)
			}
			last = r
		}
	}
	// The holder released with the three runners queued: its release hands
	// the lock to the first of them, whatever the racers do.
	if got := handOffs(holder); !slices.Equal(got, []string{sessionOf(t, runners[1])}) {
		t.Fatalf("the holder handed the lock to %v; want q1's session %s:\n%s", got, sessionOf(t, runners[1]), holder.out.String())
	}
	var handed int
	for _, p := range runners {
		handed += len(handOffs(p))
	}
	t.Logf("MEASURED %d of 6 hand-overs between commands were runner hand-offs", handed)
	if left := queueEntries(t, l); len(left) != 0 {
		t.Fatalf("queue entries left: %+v", left)
	}
}

// A runner first in line that leaves the queue (-timeout) deletes its
// entry, exits 124 and is never handed the lock; the holder hands it to
// the waiter that was behind, which starts at once: no lock-delay (15s,
// long enough to show) is waited out, as it would be had the lock gone to
// the session of a runner that left.
func TestHandOff_waiterThatLeftIsNotHandedTheLock(t *testing.T) {
	t.Parallel()
	profile := fastProfile(t, 15*time.Second)
	l, token := declareHandOff(t, nil, profile)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	late := startRun(t, "late", token, []string{"-lock", l.Name, "-timeout", "2s"}, childArgs(record, "late", "-sleep", "10ms")...)
	waitOutput(t, late, "first in the waiter queue")
	lateSession := sessionOf(t, late)
	next := startRun(t, "next", token, []string{"-lock", l.Name}, childArgs(record, "next", "-sleep", "10ms")...)
	waitOutput(t, next, "waiting in the queue")
	if code := late.wait(time.Minute); code != ExitTimeout {
		t.Fatalf("late exited %d, want %d:\n%s", code, ExitTimeout, late.out.String())
	}
	for _, e := range queueEntries(t, l) {
		if strings.HasSuffix(e.Key, "/"+lateSession) {
			t.Fatalf("the timed-out runner's entry is left: %+v", e)
		}
	}
	holder.closeStdin()
	for _, p := range []*proc{holder, next} {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	if got := handOffs(holder); !slices.Equal(got, []string{sessionOf(t, next)}) {
		t.Fatalf("the holder handed the lock to %v; want only next's session %s (late's was %s):\n%s", got, sessionOf(t, next), lateSession, holder.out.String())
	}
	if !strings.Contains(next.out.String(), logHandedIn) {
		t.Fatalf("next does not log it was handed the lock:\n%s", next.out.String())
	}
	if strings.Contains(late.out.String(), logHandedIn) || lastRun(t, record, "late") != nil {
		t.Fatalf("the runner that left was handed the lock or ran:\n%s", late.out.String())
	}
	holderRun, nextRun := lastRun(t, record, "holder"), lastRun(t, record, "next")
	gap, bound := nextRun.start.Sub(holderRun.end), profile.LockDelay/3
	t.Logf("MEASURED hand-over past a waiter that left: next started %s after the holder's command ended (lock_delay %s)",
		gap.Round(time.Millisecond), profile.LockDelay)
	if gap >= bound {
		t.Fatalf("next started %s after the holder's command ended; want well under the lock_delay %s (below %s): a lock-delay was waited out",
			gap, profile.LockDelay, bound)
	}
	if left := queueEntries(t, l); len(left) != 0 {
		t.Fatalf("queue entries left: %+v", left)
	}
}

// A run-once job on a handoff lock: the release that records the run's
// success does not hand off, so no waiter is handed the lock after the
// success; the waiters of the same run leave (their entries with them)
// and only the first command ran.
func TestHandOff_runOnceSuccessIsNotHandedOff(t *testing.T) {
	t.Parallel()
	l, token := declareHandOff(t, &ledger.RunOnce{Period: time.Hour}, fastProfile(t, time.Second))
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	ps := []*proc{holder}
	for i := range 2 {
		tag := fmt.Sprintf("w%d", i+1)
		p := startRun(t, tag, token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, tag)...)
		waitQueued(t, p)
		ps = append(ps, p)
	}
	holder.closeStdin()
	for _, p := range ps {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	for _, p := range ps {
		out := p.out.String()
		if strings.Contains(out, logHandedOff) || strings.Contains(out, logHandedIn) {
			t.Fatalf("%s handed or was handed the lock of a run-once job:\n%s", p.name, out)
		}
	}
	for _, p := range ps[1:] {
		if !strings.Contains(p.out.String(), "run already succeeded") {
			t.Fatalf("%s did not see the run succeed:\n%s", p.name, p.out.String())
		}
	}
	var tags []string
	for _, r := range readRuns(t, record) {
		tags = append(tags, r.tag)
	}
	if got := strings.Join(tags, ","); got != "holder" {
		t.Fatalf("commands ran: %s; want holder alone", got)
	}
	if run := ledgerRun(t, l, "r1"); run.Outcome != ledger.RunSucceeded {
		t.Fatalf("run r1: outcome %q; want %q", run.Outcome, ledger.RunSucceeded)
	}
	if left := queueEntries(t, l); len(left) != 0 {
		t.Fatalf("queue entries left: %+v", left)
	}
}

// Issue 31, item 5d: the hand-off dates the next holder's value (its
// started, from which max_hold counts) with the releasing runner's clock
// (lockmodel.Clock, moved by EnvClockOffset in fault injection), as the
// runner dates its own acquisitions, not with time.Now().
func TestHandOff_startedUsesTheRunnersClock(t *testing.T) {
	t.Parallel()
	l, token := declareHandOff(t, nil, fastProfile(t, time.Second))
	record := filepath.Join(t.TempDir(), "record")
	const offset = 2 * time.Hour
	args := append([]string{"run", "-lock", l.Name, "--", childBin}, childArgs(record, "a", "-wait-stdin")...)
	a := startProc(t, "runner a", append(processEnv(agent.Addr, token), lockmodel.EnvClockOffset+"="+offset.String()), runnerBin, args...)
	waitStarted(t, record, "a")
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-wait-stdin")...)
	waitOutput(t, b, "first in the waiter queue")
	a.closeStdin()
	waitStarted(t, record, "b")
	before := time.Now()
	if !strings.Contains(b.out.String(), logHandedIn) {
		t.Fatalf("runner b was not handed the lock:\n%s\n%s", a.out.String(), b.out.String())
	}
	pair, _, err := agent.Client().KV().Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v", l.Key, err)
	}
	b.closeStdin()
	var v lockmodel.HolderValue
	if err := json.Unmarshal(pair.Value, &v); err != nil {
		t.Fatalf("holder value %q: %v", pair.Value, err)
	}
	if skew := v.Started.Sub(before); skew < offset-time.Minute || skew > offset+time.Minute {
		t.Fatalf("the hand-off dated b's started %s, %s from the system clock; want the releasing runner's clock, %s ahead",
			v.Started.Format(time.RFC3339Nano), skew.Round(time.Millisecond), offset)
	}
	for _, p := range []*proc{a, b} {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
}
