package status

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// TestStatusShowsNotBeforeAndKeptOutput: a run waiting for retry_after
// shows when its next attempt may start, in the table and -json; -lock
// NAME shows each attempt's kept stdout and stderr, and timed_out as its
// outcome.
func TestStatusShowsNotBeforeAndKeptOutput(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	f.lock(lockmodel.Lock{Name: "nightly", SessionDefaults: "strict", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, RetryAfter: time.Minute}}, false)
	t0 := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	exit := 137
	ledger := ledger.Ledger{Lock: "nightly", Runs: []ledger.Run{{ID: "2026-12-01T00:00:00Z", Outcome: ledger.RunTimedOut,
		NotBefore: t0.Add(2 * time.Minute), Attempts: []ledger.Attempt{{Number: 1, Node: "node-a", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7",
			FencingToken: 40, Started: t0, Finished: t0.Add(time.Minute), ExitCode: &exit, Outcome: ledger.RunTimedOut,
			Output: "loading 1/2\nupstream timed out\n", Stdout: "rows: 120\n"}}}}}
	rec, err := record.EncodeLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	f.put(record.RunLedgerKey(f.registry, "nightly"), rec)

	_, rep := f.report()
	n := lockByName(t, rep, "nightly")
	if n.LastRun == nil || n.LastRun.NotBefore == nil || *n.LastRun.NotBefore != "2026-12-01T00:07:00Z" || n.LastRun.Outcome != "timed_out" {
		t.Fatalf("last_run %+v: want timed_out with not_before 00:07", n.LastRun)
	}
	_, out, _ := f.run()
	if !strings.Contains(out, "timed_out 1/3, next not before 2026-12-01T00:07:00Z") {
		t.Fatalf("table lacks when the next attempt may start:\n%s", out)
	}
	_, out, _ = f.run("-lock", "nightly")
	for _, want := range []string{"1/3 timed_out", "next attempt not before 2026-12-01T00:07:00Z", "  | upstream timed out",
		"Stdout of 2026-12-01T00:00:00Z attempt 1 (its last 10 bytes):\n  | rows: 120"} {
		if !strings.Contains(out, want) {
			t.Fatalf("-lock nightly lacks %q:\n%s", want, out)
		}
	}
	t.Logf("status -lock nightly:\n%s", out)
	var detail Lock
	_, js, _ := f.run("-json", "-lock", "nightly")
	if err := jsonUnmarshal([]byte(js), &detail); err != nil {
		t.Fatal(err)
	}
	if a := detail.Runs[0].AttemptList[0]; a.Output != "loading 1/2\nupstream timed out\n" || a.Stdout != "rows: 120\n" || detail.Runs[0].NotBefore == nil {
		t.Fatalf("-json -lock: %+v", detail.Runs[0])
	}
}
