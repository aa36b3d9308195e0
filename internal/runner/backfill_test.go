package runner

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// startBackfill starts `consullock backfill <args> -- <child> <childArgs>`.
func startBackfill(t testing.TB, name, token string, args []string, childArgs ...string) *proc {
	t.Helper()
	full := append(append([]string{"backfill"}, args...), "--", childBin)
	return startProc(t, name, processEnv(agent.Addr, token), runnerBin, append(full, childArgs...)...)
}

// startedRuns is the CONSUL_LOCK_RUN_ID of every command start in record,
// in the order the commands recorded them (one tag runs many slots).
func startedRuns(t testing.TB, record string) []string {
	t.Helper()
	data, err := os.ReadFile(record)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "start" {
			continue
		}
		var id, scheduled string
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "run="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "scheduled="); ok {
				scheduled = v
			}
		}
		if scheduled != id {
			t.Errorf("a command ran with %s=%s but %s=%s", EnvRunID, id, EnvScheduledTime, scheduled)
		}
		ids = append(ids, id)
	}
	return ids
}

// backfillLock declares a minutely run-once lock whose slots were declared
// an hour before slot s, ten minutes in the past, and returns it with a
// worker token and the slots s .. s+3m.
func backfillLock(t *testing.T) (lockmodel.Lock, string, []string) {
	t.Helper()
	ro := ledger.RunOnce{Schedule: "* * * * *", StartingDeadline: 10 * time.Second}
	sched, err := ro.ParsedSchedule()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := sched.Prev(time.Now().Add(-10 * time.Minute))
	ro.Since = s.Add(-time.Hour)
	l, token := declareRunOnce(t, ro)
	var slots []string
	for i := range 4 {
		slots = append(slots, sched.SlotID(s.Add(time.Duration(i)*time.Minute)))
	}
	return l, token, slots
}

// A backfill of four past slots, one of them already run by a runner
// with -run-id: the other three run once each, oldest first, each with
// its slot's run ID and scheduled time, in spite of starting_deadline;
// the done slot is said skipped; a second backfill of the range runs
// nothing and exits 0.
func TestBackfill_runsTheSlotsNotDoneOnceEachInOrder(t *testing.T) {
	t.Parallel()
	l, token, slots := backfillLock(t)
	record := t.TempDir() + "/record"
	if p := startRun(t, "by-hand", token, []string{"-lock", l.Name, "-run-id", slots[1]}, childArgs(record, "by-hand")...); p.wait(time.Minute) != 0 {
		t.Fatalf("the runner of slot %s exited %d:\n%s", slots[1], p.code, p.out.String())
	}
	args := []string{"-lock", l.Name, "-from", slots[0], "-to", slots[3]}
	b := startBackfill(t, "backfill", token, args, childArgs(record, "backfill")...)
	if code := b.wait(2 * time.Minute); code != 0 {
		t.Fatalf("backfill exited %d:\n%s", code, b.out.String())
	}
	want := []string{slots[1], slots[0], slots[2], slots[3]}
	if got := startedRuns(t, record); !slices.Equal(got, want) {
		t.Fatalf("commands ran for %q, want %q (the slot run by hand, then the others once each, oldest first)", got, want)
	}
	if out := b.out.String(); !strings.Contains(out, "slot already succeeded") || !strings.Contains(out, slots[1]) {
		t.Errorf("backfill does not say it skipped the done slot %s:\n%s", slots[1], out)
	}
	for _, id := range slots {
		if run := ledgerRun(t, l, id); run.Outcome != ledger.RunSucceeded || len(run.Attempts) != 1 {
			t.Errorf("ledger run %s: %s with %d attempts, want succeeded with 1", id, run.Outcome, len(run.Attempts))
		}
	}
	again := startBackfill(t, "again", token, args, childArgs(record, "again")...)
	if code := again.wait(time.Minute); code != 0 {
		t.Fatalf("a second backfill exited %d:\n%s", code, again.out.String())
	}
	if got := startedRuns(t, record); len(got) != len(want) {
		t.Fatalf("a second backfill of a done range ran %q", got[len(want):])
	}
}

// Two backfills of the same range started together (as on two nodes) run
// each slot once in total; both exit 0.
func TestBackfill_twoBackfillsTogetherRunEachSlotOnce(t *testing.T) {
	t.Parallel()
	l, token, slots := backfillLock(t)
	record := t.TempDir() + "/record"
	args := []string{"-lock", l.Name, "-from", slots[0], "-to", slots[3]}
	a := startBackfill(t, "a", token, args, childArgs(record, "a", "-sleep", "200ms")...)
	b := startBackfill(t, "b", token, args, childArgs(record, "b", "-sleep", "200ms")...)
	for _, p := range []*proc{a, b} {
		if code := p.wait(3 * time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	got := startedRuns(t, record)
	if !slices.Equal(got, slots) {
		t.Fatalf("commands ran for %q, want each slot once in order: %q", got, slots)
	}
}

// -dry-run prints the slots that have no succeeded run, one run ID per
// line, and runs and writes nothing; a reversed range, a range past now,
// one with too many slots and a lock without a schedule are refused
// (exit 2) naming the flag, the value and the limit.
func TestBackfill_dryRunRunsNothingAndBadRangesAreRefused(t *testing.T) {
	t.Parallel()
	l, token, slots := backfillLock(t)
	record := t.TempDir() + "/record"
	if p := startRun(t, "by-hand", token, []string{"-lock", l.Name, "-run-id", slots[2]}, childArgs(record, "by-hand")...); p.wait(time.Minute) != 0 {
		t.Fatalf("the runner of slot %s exited %d:\n%s", slots[2], p.code, p.out.String())
	}
	_, before := readLedger(t, l)
	dry := startBackfill(t, "dry", token, []string{"-lock", l.Name, "-from", slots[0], "-to", slots[3], "-dry-run"}, childArgs(record, "dry")...)
	if code := dry.wait(time.Minute); code != 0 {
		t.Fatalf("dry run exited %d:\n%s", code, dry.out.String())
	}
	var printed []string
	for _, line := range strings.Split(dry.out.String(), "\n") {
		if _, err := time.Parse(time.RFC3339, line); err == nil {
			printed = append(printed, line)
		}
	}
	if want := []string{slots[0], slots[1], slots[3]}; !slices.Equal(printed, want) {
		t.Errorf("dry run printed %q, want %q:\n%s", printed, want, dry.out.String())
	}
	if got := startedRuns(t, record); len(got) != 1 {
		t.Errorf("dry run ran commands: %q", got[1:])
	}
	if _, after := readLedger(t, l); after.ModifyIndex != before.ModifyIndex {
		t.Errorf("dry run wrote the ledger (ModifyIndex %d -> %d)", before.ModifyIndex, after.ModifyIndex)
	}

	now := time.Now().UTC()
	future := now.Add(time.Hour).Format(time.RFC3339)
	for _, c := range []struct {
		name     string
		from, to string
		want     []string
	}{
		{"reversed", slots[3], slots[0], []string{"-to", slots[0], "at or after -from"}},
		{"future", slots[0], future, []string{"-to", future, "at or before now"}},
		{"too-many", now.Add(-72 * time.Hour).Format(time.RFC3339), slots[0], []string{"-from", "at most 1000 slots"}},
	} {
		p := startBackfill(t, c.name, token, []string{"-lock", l.Name, "-from", c.from, "-to", c.to}, childArgs(record, c.name)...)
		if code := p.wait(time.Minute); code != ExitUsage {
			t.Errorf("%s: exit %d, want %d:\n%s", c.name, code, ExitUsage, p.out.String())
		}
		for _, text := range c.want {
			if !strings.Contains(p.out.String(), text) {
				t.Errorf("%s: the refusal does not say %q:\n%s", c.name, text, p.out.String())
			}
		}
	}
	plain, plainToken := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	p := startBackfill(t, "no-schedule", plainToken, []string{"-lock", plain.Name, "-from", slots[0], "-to", slots[1]}, childArgs(record, "no-schedule")...)
	if code := p.wait(time.Minute); code != ExitUsage || !strings.Contains(p.out.String(), "no run_once.schedule") || !strings.Contains(p.out.String(), plain.Name) {
		t.Errorf("a lock without a schedule: exit %d, want %d naming the lock and the missing schedule:\n%s", code, ExitUsage, p.out.String())
	}
	if got := startedRuns(t, record); len(got) != 1 {
		t.Errorf("refused backfills ran commands: %q", got[1:])
	}
}

// backfill takes every run flag but -run-id (it names each slot) and the
// -key flags (a backfill needs a declared lock); each refusal names the
// flag.
func TestBackfill_refusesRunIDAndKeyFlags(t *testing.T) {
	base := []string{"-lock", "nightly", "-from", "2026-12-01T00:00:00Z", "-to", "2026-12-02T00:00:00Z"}
	for _, extra := range [][]string{{"-run-id", "x"}, {"-key", "a/b"}, {"-ttl", "20s"}, {"-from", "2026-12-01"}} {
		var out strings.Builder
		_, err := parseBackfill(append(append(append([]string{}, base...), extra...), "--", "true"), &out)
		if err == nil || !strings.Contains(err.Error(), extra[0]) {
			t.Errorf("backfill %s %s: error %v, want one naming %s", extra[0], extra[1], err, extra[0])
		}
	}
	b, err := parseBackfill(append(append([]string{}, base...), "-grace", "2s", "-dry-run"), &strings.Builder{})
	if err != nil || !slices.Contains(b.runArgs, "-grace=2s") || slices.Contains(b.runArgs, "-dry-run=true") {
		t.Errorf("backfill -grace 2s -dry-run: %v, runner args %q, want -grace passed on and -dry-run kept", err, b.runArgs)
	}
}
