package status

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// A paused lock shows PAUSED with its reason in the table, who (with the
// token's accessor ID) and when in -lock, and paused in -json; its
// released attempt shows who released it, with which token, and why; the
// pause comes with the registry listing (no request).
func TestStatusPausedAndReleased(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	f.lock(lockmodel.Lock{Name: "nightly", SessionDefaults: "strict", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour}}, false)
	f.lock(lockmodel.Lock{Name: "plain", SessionDefaults: "strict"}, false)
	_, before := f.report()

	at := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	const alice, bob = "5f0c1e2a-0c1f-4d47-a1a8-6b0f2a9d8e01", "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	rec, err := record.EncodePauseRecord(record.Pause{Lock: "nightly", Reason: "INC-1: billing outage", By: "alice@ops", At: at, Accessor: alice})
	if err != nil {
		t.Fatal(err)
	}
	f.put(record.PauseKey(f.registry, "nightly"), rec)
	ledger := ledger.Ledger{Lock: "nightly", Runs: []ledger.Run{{ID: "r1", Outcome: ledger.RunReleased, Attempts: []ledger.Attempt{
		{Number: 1, Node: "node-a", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 40, Started: at.Add(-time.Hour),
			Finished: at, Outcome: ledger.RunReleased, ReleasedBy: "bob@ops", ReleasedByAccessor: bob, Reason: "stuck on NFS"},
	}}}}
	lrec, err := record.EncodeLedger(ledger)
	if err != nil {
		t.Fatal(err)
	}
	f.put(record.RunLedgerKey(f.registry, "nightly"), lrec)

	code, rep := f.report()
	if code != ExitOK || len(rep.BadRecords) != 0 {
		t.Fatalf("exit %d, bad records %+v", code, rep.BadRecords)
	}
	n := lockByName(t, rep, "nightly")
	if n.Paused == nil || n.Paused.Reason != "INC-1: billing outage" || n.Paused.By != "alice@ops" || n.Paused.At != "2026-12-01T02:00:00Z" || n.Paused.Accessor != alice {
		t.Fatalf("nightly paused %+v", n.Paused)
	}
	if p := lockByName(t, rep, "plain"); p.Paused != nil {
		t.Fatalf("plain paused %+v, want null", p.Paused)
	}
	if rep.ConsulRequests != before.ConsulRequests {
		t.Fatalf("%d requests with a pause, %d without", rep.ConsulRequests, before.ConsulRequests)
	}
	_, out, _ := f.run()
	if !strings.Contains(out, "PAUSED (INC-1: billing outage)") {
		t.Fatalf("table lacks the pause:\n%s", out)
	}
	_, out, _ = f.run("-lock", "nightly")
	if !strings.Contains(out, "PAUSED by alice@ops (token "+alice+") at 2026-12-01T02:00:00Z: INC-1: billing outage") {
		t.Fatalf("detail lacks the pause:\n%s", out)
	}
	if !strings.Contains(out, "released by bob@ops (token "+bob+"): stuck on NFS") {
		t.Fatalf("detail lacks the release:\n%s", out)
	}
	_, out, _ = f.run("-lock", "nightly", "-json")
	var l Lock
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Runs) != 1 || len(l.Runs[0].AttemptList) != 1 || l.Runs[0].AttemptList[0].ReleasedBy != "bob@ops" || l.Runs[0].AttemptList[0].ReleasedByAccessor != bob || l.Runs[0].AttemptList[0].Reason != "stuck on NFS" {
		t.Fatalf("runs %+v", l.Runs)
	}
}
