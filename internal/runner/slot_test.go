package runner

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// A slot has one identity (issue 44), tried with real runners on a
// minutely schedule in Europe/Berlin, each started with its clock moved to
// a chosen time of the schedule (slots ten minutes in the past, so that
// no real minute boundary matters), and every command appending to one
// record so that executions are counted per slot:
//   - an on-time trigger runs slot S;
//   - -run-id S spelled in UTC, or with a fraction of a second, is S's
//     run: it runs nothing and exits -exit-code-if-done;
//   - a timestamp that is no slot is refused (exit 2) naming the
//     schedule, the zone and the nearest slots;
//   - a trigger past starting_deadline for S (completed) exits as done,
//     not 119; one for a slot no runner began exits 119 and writes nothing;
//     one for a slot whose attempt is running waits for it;
//   - a trigger 2s before slot S2 runs S2 (not the slot before), not
//     before S2's time by its clock; the on-time trigger then finds it done;
//   - a slot before the lock's declaration is never run, derived or given.
func TestRunOnce_aSlotHasOneIdentity(t *testing.T) {
	t.Parallel()
	ro := ledger.RunOnce{Schedule: "* * * * *", TimeZone: "Europe/Berlin", StartingDeadline: 30 * time.Second}
	sched, err := ro.ParsedSchedule()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := sched.Prev(time.Now().Add(-10 * time.Minute))
	ro.Since = s.Add(-time.Hour)
	l, token := declareRunOnce(t, ro)
	record := filepath.Join(t.TempDir(), "record")
	const doneCode = 122
	done := strconv.Itoa(doneCode)
	id := sched.SlotID
	// start starts a runner of l whose clock reads clockAt at its start
	// (zero: the real clock); offsets keeps each one's clock offset.
	offsets := map[string]time.Duration{}
	start := func(name string, clockAt time.Time, args []string, extra ...string) *proc {
		t.Helper()
		var offset time.Duration
		if !clockAt.IsZero() {
			offset = time.Until(clockAt)
		}
		offsets[name] = offset
		return startRunAtClock(t, name, token, offset, append([]string{"-lock", l.Name, "-exit-code-if-done", done}, args...),
			childArgs(record, name, append([]string{"-sleep", "50ms"}, extra...)...)...)
	}
	run := func(name string, clockAt time.Time, want int, args ...string) *proc {
		t.Helper()
		p := start(name, clockAt, args)
		if code := p.wait(time.Minute); code != want {
			t.Fatalf("%s exited %d, want %d:\n%s", name, code, want, p.out.String())
		}
		return p
	}
	perSlot := func() map[string]int {
		n := map[string]int{}
		for _, r := range readRuns(t, record) {
			if r.scheduled != r.runID && !strings.HasPrefix(r.runID, "manual-") {
				t.Errorf("%s ran with %s=%s but %s=%s", r.tag, EnvRunID, r.runID, EnvScheduledTime, r.scheduled)
			}
			n[r.runID]++
		}
		return n
	}
	wantRuns := func(when string, want map[string]int) {
		t.Helper()
		if got := perSlot(); len(got) != len(want) || func() bool {
			for k, v := range want {
				if got[k] != v {
					return true
				}
			}
			return false
		}() {
			t.Fatalf("%s: executions per slot %v, want %v", when, got, want)
		}
	}

	run("on-time", s.Add(10*time.Second), 0)
	wantRuns("on time", map[string]int{id(s): 1})

	utc := run("utc-spelling", time.Time{}, doneCode, "-run-id", s.UTC().Format(time.RFC3339))
	if out := utc.out.String(); !strings.Contains(out, id(s)) {
		t.Errorf("the UTC spelling's log does not name the slot %s:\n%s", id(s), out)
	}
	run("fraction-spelling", time.Time{}, doneCode, "-run-id", s.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	wantRuns("retyped", map[string]int{id(s): 1})

	notSlot := s.Add(30 * time.Second).UTC().Format(time.RFC3339)
	refused := run("not-a-slot", time.Time{}, ExitUsage, "-run-id", notSlot)
	for _, text := range []string{notSlot, "run_once.schedule", "* * * * *", "in Europe/Berlin", id(s), id(s.Add(time.Minute))} {
		if !strings.Contains(refused.out.String(), text) {
			t.Errorf("the refusal does not name %s:\n%s", text, refused.out.String())
		}
	}
	run("manual", time.Time{}, 0, "-run-id", "manual-"+s.Format("2006-01-02"))
	if n := perSlot()["manual-"+s.Format("2006-01-02")]; n != 1 {
		t.Fatalf("a run ID that is not a timestamp ran %d times, want once (a run of its own)", n)
	}

	// Late: past the 30s deadline. S is done: exit as done. S+1m was begun
	// by no runner: 119, and the ledger is not written.
	run("late-done", s.Add(45*time.Second), doneCode)
	unbegun := s.Add(time.Minute)
	hook := filepath.Join(t.TempDir(), "hook")
	late := run("late-unbegun", unbegun.Add(45*time.Second), ledger.ExitRunPastDeadline, "-on-outcome", hookRecorder(hook))
	requireNotStartedHook(t, hook, HookMissed, id(unbegun))
	if out := late.out.String(); !strings.Contains(out, "started past run_once.starting_deadline") || !strings.Contains(out, id(unbegun)) {
		t.Errorf("the late runner's log does not say why or which slot:\n%s", late.out.String())
	}
	if ledger, _ := readLedger(t, l); ledger.Find(id(unbegun)) >= 0 {
		t.Fatalf("the late runner recorded slot %s: %+v", id(unbegun), ledger)
	}

	// Late for a slot whose attempt runs: it waits for it, then exits as
	// done once that attempt succeeded.
	busy := s.Add(2 * time.Minute)
	holder := start("busy-holder", busy.Add(5*time.Second), nil, "-wait-stdin")
	waitStarted(t, record, "busy-holder")
	waiter := start("busy-late", busy.Add(45*time.Second), nil)
	waitOutput(t, waiter, "another runner began the slot in time")
	holder.closeStdin()
	if code := holder.wait(time.Minute); code != 0 {
		t.Fatalf("the busy slot's holder exited %d:\n%s", code, holder.out.String())
	}
	if code := waiter.wait(time.Minute); code != doneCode {
		t.Fatalf("the late trigger of a running slot exited %d, want %d:\n%s", code, doneCode, waiter.out.String())
	}

	// Early: 2s before S2 by its clock, the trigger runs S2, not the slot
	// before it, and not before S2's time.
	s2 := s.Add(3 * time.Minute)
	early := s2.Add(-2 * time.Second)
	run("early", early, 0)
	run("on-time-after-early", s2.Add(5*time.Second), doneCode)
	wantRuns("early", map[string]int{id(s): 1, "manual-" + s.Format("2006-01-02"): 1, id(busy): 1, id(s2): 1})
	for _, r := range readRuns(t, record) {
		// The command's start by the runner's clock (its real time moved
		// by the runner's offset) is at or after S2: the runner waited.
		if at := r.start.Add(offsets["early"]); r.tag == "early" && at.Before(s2) {
			t.Fatalf("the early trigger started its command at %s by its clock, before the slot %s", at.Format(time.RFC3339Nano), id(s2))
		}
	}

	// Before the declaration (Since, an hour before S): never run.
	old := s.Add(-2 * time.Hour)
	before := run("before-declaration", old.Add(5*time.Second), ledger.ExitRunPastDeadline)
	if !strings.Contains(before.out.String(), "precedes the declaration") {
		t.Errorf("the runner's log does not say the slot precedes the declaration:\n%s", before.out.String())
	}
	run("before-declaration-given", time.Time{}, ExitUsage, "-run-id", id(old))
	wantRuns("in the end", map[string]int{id(s): 1, "manual-" + s.Format("2006-01-02"): 1, id(busy): 1, id(s2): 1})
}
