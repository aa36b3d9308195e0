package status

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// TestStatusLastRunAndHistory: a run-once lock's ledger shows as the LAST
// RUN column (run ID, outcome, attempts/max) and last_run in -json, and
// -lock NAME gives the history with every attempt; a lock without a ledger
// has last_run null; a corrupted ledger is an unreadable record, named,
// and the request count does not grow (the ledgers are in the registry
// listing).
func TestStatusLastRunAndHistory(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	f.lock(lockmodel.Lock{Name: "nightly", SessionDefaults: "strict", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, MaxAttempts: 4}}, false)
	f.lock(lockmodel.Lock{Name: "plain", SessionDefaults: "strict"}, false)
	_, before := f.report()

	// The latest two slots ran (none is missed).
	today, _ := daily(0)
	yesterday, slot := daily(1)
	t0 := slot.Add(24*time.Hour + 5*time.Minute)
	one, three := 1, 0
	ledger := ledger.Ledger{Lock: "nightly", Runs: []ledger.Run{
		{ID: today, Outcome: ledger.RunSucceeded, Attempts: []ledger.Attempt{
			{Number: 1, Node: "node-a", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 40, Started: t0,
				Finished: t0.Add(time.Minute), ExitCode: &one, Outcome: ledger.RunFailed},
			{Number: 2, Node: "node-b", Session: "1b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 42, Started: t0.Add(2 * time.Minute),
				Finished: t0.Add(3 * time.Minute), ExitCode: &three, Outcome: ledger.RunSucceeded},
		}},
		{ID: yesterday, Outcome: ledger.RunSucceeded, Attempts: []ledger.Attempt{
			{Number: 1, Node: "node-c", Session: "2b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 30, Started: t0.Add(-24 * time.Hour),
				Finished: t0.Add(-23 * time.Hour), ExitCode: &three, Outcome: ledger.RunSucceeded},
		}},
	}}
	rec, err := record.EncodeLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	f.put(record.RunLedgerKey(f.registry, "nightly"), rec)

	code, rep := f.report()
	if code != ExitOK || len(rep.BadRecords) != 0 {
		t.Fatalf("exit %d, bad records %+v", code, rep.BadRecords)
	}
	n := lockByName(t, rep, "nightly")
	if n.LastRun == nil || n.LastRun.RunID != today || n.LastRun.Outcome != "succeeded" || n.LastRun.Attempts != 2 ||
		n.LastRun.MaxAttempts != 4 || n.LastRun.Node != "node-b" || n.LastRun.FencingToken != 42 || n.LastRun.ExitCode == nil ||
		n.LastRun.Finished == nil || len(n.LastRun.AttemptList) != 0 || len(n.Runs) != 0 {
		t.Fatalf("nightly last_run %+v runs %+v", n.LastRun, n.Runs)
	}
	if p := lockByName(t, rep, "plain"); p.LastRun != nil {
		t.Fatalf("plain has last_run %+v, want null", p.LastRun)
	}
	if rep.ConsulRequests != before.ConsulRequests {
		t.Fatalf("%d requests with a ledger, %d without: the ledgers must come with the registry listing", rep.ConsulRequests, before.ConsulRequests)
	}
	_, out, _ := f.run()
	if !strings.Contains(out, "LAST RUN") || !strings.Contains(out, today+" succeeded 2/4") {
		t.Fatalf("table lacks the last run:\n%s", out)
	}

	code, out, _ = f.run("-lock", "nightly")
	if code != ExitOK || !strings.Contains(out, "Runs (the run ledger, newest first):") ||
		!strings.Contains(out, "1/4 failed") || !strings.Contains(out, "2/4 succeeded") || !strings.Contains(out, "node-c") {
		t.Fatalf("-lock nightly (exit %d) lacks the history:\n%s", code, out)
	}
	t.Logf("status -lock nightly:\n%s", out)
	var detail Lock
	_, js, _ := f.run("-json", "-lock", "nightly")
	if err := jsonUnmarshal([]byte(js), &detail); err != nil {
		t.Fatal(err)
	}
	if len(detail.Runs) != 2 || len(detail.Runs[0].AttemptList) != 2 || detail.Runs[0].AttemptList[0].Outcome != "failed" ||
		detail.Runs[0].AttemptList[0].FencingToken != 40 || detail.Runs[1].RunID != yesterday {
		t.Fatalf("-json -lock runs %+v", detail.Runs)
	}

	f.put(record.RunLedgerKey(f.registry, "nightly"), []byte(`{"kind":"run_ledger"`))
	_, rep = f.report()
	if len(rep.BadRecords) != 1 || !strings.Contains(rep.BadRecords[0].Key, "/runs/nightly") || lockByName(t, rep, "nightly").LastRun != nil {
		t.Fatalf("a corrupted ledger: bad records %+v", rep.BadRecords)
	}
}

// TestStatusNextAndMissedSlots: a scheduled lock shows its next slot in
// the table and, with -lock NAME, the slots since its oldest kept run that
// have no run, to backfill with -run-id.
func TestStatusNextAndMissedSlots(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	f.lock(lockmodel.Lock{Name: "nightly", SessionDefaults: "strict", RunOnce: &ledger.RunOnce{Schedule: "0 2 * * *"}}, false)
	now := time.Now().UTC()
	latest := time.Date(now.Year(), now.Month(), now.Day(), 2, 0, 0, 0, time.UTC)
	if latest.After(now) {
		latest = latest.AddDate(0, 0, -1)
	}
	slot := func(daysBefore int) string { return latest.AddDate(0, 0, -daysBefore).Format(time.RFC3339) }
	zero := 0
	ran := func(id string) ledger.Run {
		at, _ := time.Parse(time.RFC3339, id)
		return ledger.Run{ID: id, Outcome: ledger.RunSucceeded, Attempts: []ledger.Attempt{
			{Number: 1, Node: "node-a", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 40, Started: at.Add(time.Minute),
				Finished: at.Add(2 * time.Minute), ExitCode: &zero, Outcome: ledger.RunSucceeded}}}
	}
	rec, err := record.EncodeLedger(ledger.Ledger{Lock: "nightly", Runs: []ledger.Run{ran(slot(2)), ran(slot(5))}})
	if err != nil {
		t.Fatal(err)
	}
	f.put(record.RunLedgerKey(f.registry, "nightly"), rec)

	_, rep := f.report()
	n := lockByName(t, rep, "nightly")
	next := latest.AddDate(0, 0, 1).Format(time.RFC3339)
	want := []string{slot(4), slot(3), slot(1)} // the latest may still start: no deadline
	if n.NextSlot == nil || *n.NextSlot != next || strings.Join(n.MissedSlots, " ") != strings.Join(want, " ") {
		t.Fatalf("next_slot %v, missed_slots %v; want %s and %v", n.NextSlot, n.MissedSlots, next, want)
	}
	if _, out, _ := f.run(); !strings.Contains(out, "NEXT SLOT") || !strings.Contains(out, next) {
		t.Fatalf("table lacks the next slot:\n%s", out)
	}
	_, out, _ := f.run("-lock", "nightly")
	if !strings.Contains(out, "Next slot: "+next) || !strings.Contains(out, "Missed slots") || !strings.Contains(out, "  "+slot(3)+"\n") ||
		!strings.Contains(out, "consullock backfill -lock nightly") {
		t.Fatalf("-lock nightly lacks the slots:\n%s", out)
	}
	t.Logf("status -lock nightly:\n%s", out)
}
