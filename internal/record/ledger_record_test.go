package record

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Fixtures of the ledger package's tests, for ledgers built here.
var (
	t0    = time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	nodeA = holder.Holder{Node: "worker-1", Session: "11111111-1111-1111-1111-111111111111", FencingToken: 100}
	nodeB = holder.Holder{Node: "worker-2", Session: "22222222-2222-2222-2222-222222222222", FencingToken: 200}
	nodeC = holder.Holder{Node: "worker-3", Session: "33333333-3333-3333-3333-333333333333", FencingToken: 300}
)

// ledgerRecord is a valid ledger: a run that succeeded at its second
// attempt after a crash, and an older one that failed.
const ledgerRecord = `{"schema_version":1,"kind":"run_ledger","name":"nightly","spec":{"lock":"nightly","runs":[` +
	`{"run_id":"2026-12-01T00:00:00Z","outcome":"succeeded","attempts":[` +
	`{"attempt":1,"node":"worker-1","session":"11111111-1111-1111-1111-111111111111","fencing_token":100,"started":"2026-12-01T00:05:00Z","finished":"2026-12-01T00:06:00Z","exit_code":null,"outcome":"crashed"},` +
	`{"attempt":2,"node":"worker-2","session":"22222222-2222-2222-2222-222222222222","fencing_token":200,"started":"2026-12-01T00:06:00Z","finished":"2026-12-01T00:07:00Z","exit_code":0,"outcome":"succeeded"}]},` +
	`{"run_id":"2026-11-30T00:00:00Z","outcome":"failed","attempts":[` +
	`{"attempt":1,"node":"worker-3","session":"33333333-3333-3333-3333-333333333333","fencing_token":50,"started":"2026-11-30T00:05:00Z","finished":"2026-11-30T00:05:30Z","exit_code":3,"outcome":"failed"}]}` +
	`]},"managed_by":"consullock"}`

func TestLedgerRecord_roundTrip(t *testing.T) {
	l, err := DecodeLedger([]byte(ledgerRecord))
	if err != nil {
		t.Fatal(err)
	}
	if l.Lock != "nightly" || len(l.Runs) != 2 || l.Runs[0].Attempts[1].FencingToken != 200 || *l.Runs[1].Attempts[0].ExitCode != 3 {
		t.Fatalf("decoded %+v", l)
	}
	got, err := EncodeLedger(l)
	if err != nil || string(got) != ledgerRecord {
		t.Fatalf("EncodeLedger = %s, %v\nwant %s", got, err, ledgerRecord)
	}
	empty, err := EncodeLedger(ledger.Ledger{Lock: "nightly"})
	if want := `{"schema_version":1,"kind":"run_ledger","name":"nightly","spec":{"lock":"nightly","runs":[]},"managed_by":"consullock"}`; err != nil || string(empty) != want {
		t.Fatalf("empty ledger = %s, %v", empty, err)
	}
	if RunLedgerKey("consul-lock", "nightly") != "consul-lock/runs/nightly" || RegistryKindOf(RecordKindRunLedger) != lockmodel.KindRuns {
		t.Fatal("the ledger is not at <registry_prefix>/runs/<lock>")
	}
}

// TestDecodeLedger_refusesWhatItCannotTrust: a corrupted or hand-written
// ledger is an error that names the field; nothing is guessed, because a
// runner decides from it whether to run a command.
func TestDecodeLedger_refusesWhatItCannotTrust(t *testing.T) {
	edit := func(from, to string) string {
		if !strings.Contains(ledgerRecord, from) {
			t.Fatalf("test edit %q does not apply", from)
		}
		return strings.Replace(ledgerRecord, from, to, 1)
	}
	for _, tc := range []struct {
		name, in  string
		fragments []string
		newer     bool
	}{
		{"not JSON", `{"schema_version":1,`, []string{"not a JSON object"}, false},
		{"truncated", ledgerRecord[:len(ledgerRecord)/2], []string{"not a JSON object"}, false},
		{"newer schema", edit(`"schema_version":1`, `"schema_version":2`), []string{"newer consullock"}, true},
		{"a reason on a succeeded attempt", edit(`"exit_code":0,"outcome":"succeeded"`, `"exit_code":0,"outcome":"succeeded","reason":"x"`),
			[]string{"runs[0].attempts[1].reason", "lost"}, false},
		{"a lock record", lockRecord, []string{`"lock" record, not "run_ledger"`}, false},
		{"names differ", edit(`"lock":"nightly"`, `"lock":"other"`), []string{`has a spec named "other"`}, false},
		{"runs not a list", edit(`"runs":[`, `"runs":{"x":[`)[:0] + `{"schema_version":1,"kind":"run_ledger","name":"n","spec":{"lock":"n","runs":{}}}`, []string{"unreadable spec"}, false},
		{"bad run ID", edit(`"run_id":"2026-11-30T00:00:00Z"`, `"run_id":"a b"`), []string{`runs[1].run_id: "a b"`}, false},
		{"duplicate run ID", edit(`"run_id":"2026-11-30T00:00:00Z"`, `"run_id":"2026-12-01T00:00:00Z"`), []string{"runs[1].run_id", "at most once"}, false},
		{"unknown run outcome", edit(`"outcome":"failed","attempts"`, `"outcome":"done","attempts"`), []string{`runs[1].outcome: "done"`, `"exhausted"`}, false},
		{"run outcome contradicts its attempt", edit(`"outcome":"failed","attempts"`, `"outcome":"succeeded","attempts"`), []string{`runs[1].outcome: "succeeded"`, `"failed", the latest attempt's outcome`}, false},
		{"no attempts", `{"schema_version":1,"kind":"run_ledger","name":"n","spec":{"lock":"n","runs":[{"run_id":"r","outcome":"running","attempts":[]}]}}`, []string{"runs[0].attempts", "1 to 100 attempts"}, false},
		{"attempts out of order", edit(`{"attempt":2,`, `{"attempt":3,`), []string{"runs[0].attempts[1].attempt", "numbered from 1"}, false},
		{"unknown attempt outcome", edit(`"exit_code":3,"outcome":"failed"`, `"exit_code":3,"outcome":"exhausted"`), []string{`runs[1].attempts[0].outcome: "exhausted"`}, false},
		{"a success before the last attempt", edit(`"exit_code":null,"outcome":"crashed"`, `"exit_code":0,"outcome":"succeeded"`), []string{"runs[0].attempts[0].outcome", "only on the latest attempt"}, false},
		{"a running attempt before the last", edit(`"finished":"2026-12-01T00:06:00Z","exit_code":null,"outcome":"crashed"`, `"finished":null,"exit_code":null,"outcome":"running"`), []string{"runs[0].attempts[0].outcome", "only the latest attempt may still run"}, false},
		{"session not a UUID", edit(`"session":"33333333-3333-3333-3333-333333333333"`, `"session":"me"`), []string{`runs[1].attempts[0].session: "me"`}, false},
		{"empty node", edit(`"node":"worker-3"`, `"node":""`), []string{"runs[1].attempts[0].node"}, false},
		{"zero fencing token", edit(`"fencing_token":50`, `"fencing_token":0`), []string{"runs[1].attempts[0].fencing_token"}, false},
		{"negative fencing token", edit(`"fencing_token":50`, `"fencing_token":-5`), []string{"unreadable spec"}, false},
		{"started not a time", edit(`"started":"2026-11-30T00:05:00Z"`, `"started":"yesterday"`), []string{`runs[1].attempts[0].started: "yesterday"`}, false},
		{"finished missing once finished", edit(`"finished":"2026-11-30T00:05:30Z"`, `"finished":null`), []string{"runs[1].attempts[0].finished"}, false},
		{"failed with exit 0", edit(`"exit_code":3`, `"exit_code":0`), []string{"runs[1].attempts[0].exit_code", "non-zero"}, false},
		{"succeeded with exit 1", edit(`"exit_code":0,"outcome":"succeeded"`, `"exit_code":1,"outcome":"succeeded"`), []string{"runs[0].attempts[1].exit_code", "0 for a \"succeeded\""}, false},
		{"succeeded without exit code", edit(`"exit_code":0,"outcome":"succeeded"`, `"exit_code":null,"outcome":"succeeded"`), []string{"runs[0].attempts[1].exit_code"}, false},
		{"crashed with an exit code", edit(`"exit_code":null,"outcome":"crashed"`, `"exit_code":1,"outcome":"crashed"`), []string{"runs[0].attempts[0].exit_code", `null for a "crashed"`}, false},
		{"exit code out of range", edit(`"exit_code":3`, `"exit_code":300`), []string{"runs[1].attempts[0].exit_code", "0 to 255"}, false},
		{"exit code not a number", edit(`"exit_code":3`, `"exit_code":"3"`), []string{"unreadable spec"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeLedger([]byte(tc.in))
			if err == nil {
				t.Fatalf("decoded without error: %s", tc.in)
			}
			for _, f := range tc.fragments {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not contain %q", err, f)
				}
			}
			if errors.Is(err, ErrNewerSchema) != tc.newer {
				t.Errorf("errors.Is(err, ErrNewerSchema) = %v, want %v", !tc.newer, tc.newer)
			}
		})
	}
}

func TestEncodeLedger_refusesAnInvalidLedger(t *testing.T) {
	l := ledger.Ledger{Lock: "nightly", Runs: []ledger.Run{{ID: "r1", Outcome: ledger.RunRunning, Attempts: []ledger.Attempt{{Number: 1, Node: "n", Session: "s", FencingToken: 1, Started: t0, Outcome: ledger.RunRunning}}}}}
	if _, err := EncodeLedger(l); err == nil || !strings.Contains(err.Error(), "runs[0].attempts[0].session") {
		t.Fatalf("EncodeLedger = %v, want the session named", err)
	}
}

func TestLockRecord_runOnceSchedule(t *testing.T) {
	l := lockmodel.Lock{Name: "nightly", Prefix: "svc/nightly", RunOnce: &ledger.RunOnce{Schedule: "0 2 * * 1-5", StartingDeadline: 10 * time.Minute}}
	b, err := EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"run_once":{"max_attempts":3,"keep":20,"schedule":"0 2 * * 1-5","time_zone":"UTC","starting_deadline":"10m0s"}`)) {
		t.Fatalf("record %s does not carry the schedule with its defaults", b)
	}
	back, err := DecodeLockRecord(b)
	want := ledger.RunOnce{Schedule: "0 2 * * 1-5", TimeZone: "UTC", StartingDeadline: 10 * time.Minute, MaxAttempts: 3, Keep: 20}
	if err != nil || back.RunOnce == nil || *back.RunOnce != want {
		t.Fatalf("decoded run_once %+v, %v", back.RunOnce, err)
	}
	since := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	l.RunOnce.Since = since
	b, _ = EncodeLockRecord(l)
	if back, err := DecodeLockRecord(b); err != nil || !bytes.Contains(b, []byte(`"since":"2026-07-01T12:00:00Z"`)) || !back.RunOnce.Since.Equal(since) {
		t.Fatalf("since: record %s, decoded %+v, %v", b, back.RunOnce, err)
	}
	bad := strings.Replace(lockRecord, `"description":""`, `"description":"","run_once":{"schedule":"0 2 * *","time_zone":"Europe/Berlin"}`, 1)
	if _, err := DecodeLockRecord([]byte(bad)); err == nil || !strings.Contains(err.Error(), `run_once.schedule: "0 2 * *"`) {
		t.Fatalf("a bad schedule decodes with %v", err)
	}
}

func TestLockRecord_runOnce(t *testing.T) {
	l := lockmodel.Lock{Name: "nightly", Prefix: "svc/nightly", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, Offset: 2 * time.Hour}}
	b, err := EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"run_once":{"period":"24h0m0s","offset":"2h0m0s","max_attempts":3,"keep":20}`)) {
		t.Fatalf("record %s does not carry run_once with its defaults", b)
	}
	back, err := DecodeLockRecord(b)
	if err != nil || back.RunOnce == nil || *back.RunOnce != (ledger.RunOnce{Period: 24 * time.Hour, Offset: 2 * time.Hour, MaxAttempts: 3, Keep: 20}) {
		t.Fatalf("decoded run_once %+v, %v", back.RunOnce, err)
	}
	// Without run_once the record is exactly what earlier versions wrote,
	// and they decode as nil.
	plain, _ := EncodeLockRecord(lockmodel.Lock{Name: "job", Prefix: "svc/job"})
	if bytes.Contains(plain, []byte("run_once")) {
		t.Fatalf("a lock without run_once writes %s", plain)
	}
	if old, err := DecodeLockRecord([]byte(lockRecord)); err != nil || old.RunOnce != nil {
		t.Fatalf("an older record decodes with run_once %+v, %v", old.RunOnce, err)
	}
	// Absent offset, max_attempts and keep are their defaults.
	short := strings.Replace(lockRecord, `"description":""`, `"description":"","run_once":{"period":"1h"}`, 1)
	if got, err := DecodeLockRecord([]byte(short)); err != nil || *got.RunOnce != (ledger.RunOnce{Period: time.Hour, MaxAttempts: 3, Keep: 20}) {
		t.Fatalf("minimal run_once decodes as %+v, %v", got.RunOnce, err)
	}
	for _, tc := range []struct{ in, field string }{
		{`"run_once":{}`, "run_once.period"},
		{`"run_once":{"period":"daily"}`, "run_once.period"},
		{`"run_once":{"period":"1h","offset":"1h"}`, "run_once.offset"},
		{`"run_once":{"period":"1h","max_attempts":101}`, "run_once.max_attempts"},
		{`"run_once":{"period":"1h","keep":-1}`, "run_once.keep"},
	} {
		_, err := DecodeLockRecord([]byte(strings.Replace(lockRecord, `"description":""`, `"description":"",`+tc.in, 1)))
		if fes := validation.AsFieldErrors(err); len(fes) != 1 || fes[0].Field != tc.field {
			t.Errorf("%s: %v, want one %s error", tc.in, err, tc.field)
		}
	}
	sem := strings.Replace(strings.Replace(lockRecord, `"limit":1`, `"limit":2`, 1), `"flags":"0x2ddccbc058a50c18"`, `"flags":"0xe0f69a2baa414de0"`, 1)
	if _, err := DecodeLockRecord([]byte(strings.Replace(sem, `"description":""`, `"description":"","run_once":{"period":"1h"}`, 1))); err == nil || !strings.Contains(err.Error(), "run_once:") {
		t.Errorf("a semaphore with run_once decodes: %v", err)
	}
}

func FuzzDecodeLedger(f *testing.F) {
	f.Add([]byte(ledgerRecord))
	f.Add([]byte(`{"schema_version":1,"kind":"run_ledger","name":"n","spec":{"lock":"n","runs":[]}}`))
	f.Add([]byte(`{"schema_version":1,"kind":"run_ledger","name":"n","spec":{"lock":"n","runs":[{"run_id":"r","outcome":"running","attempts":[{"attempt":1,"node":"a","session":"11111111-1111-1111-1111-111111111111","fencing_token":1,"started":"2026-12-01T00:00:00Z","finished":null,"exit_code":null,"outcome":"running"}]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeLedger(data)
		if err != nil {
			return
		}
		// What decodes encodes, stably, and the rules accept it.
		first, err := EncodeLedger(l)
		if err != nil {
			t.Fatalf("a decoded ledger does not encode: %v", err)
		}
		back, err := DecodeLedger(first)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", first, err)
		}
		second, err := EncodeLedger(back)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("decode->encode is not stable:\n%s\n%s", first, second)
		}
		for _, r := range l.Runs {
			d, err := l.Begin(r.ID, holder.Holder{Node: "fuzz", Session: "99999999-9999-9999-9999-999999999999", FencingToken: 1}, ledger.MaxMaxAttempts, time.Now())
			if err != nil {
				t.Fatalf("Begin on a decoded ledger: %v", err)
			}
			if _, ok := r.Succeeded(); ok != (d.Kind == ledger.BeginAlreadySucceeded) {
				t.Fatalf("run %q succeeded=%v but Begin decided %v", r.ID, ok, d.Kind)
			}
			if d.Changed {
				if _, err := EncodeLedger(d.Ledger.Prune(ledger.MaxRunKeep, r.ID)); err != nil {
					t.Fatalf("Begin produced a ledger that does not encode: %v", err)
				}
			}
		}
	})
}

func TestEncodeLedger_refusesALedgerConsulWouldRefuse(t *testing.T) {
	l := ledger.Ledger{Lock: "nightly"}
	for i := range ledger.MaxRunKeep {
		id := fmt.Sprintf("run-%04d", i)
		for _, h := range []holder.Holder{nodeA, nodeB, nodeC} { // three attempts, two crashed
			h.Node = strings.Repeat("n", 200)
			d, err := l.Begin(id, h, 3, t0)
			if err != nil {
				t.Fatal(err)
			}
			l = d.Ledger
		}
	}
	_, err := EncodeLedger(l)
	if fes := validation.AsFieldErrors(err); len(fes) != 1 || fes[0].Field != "run_once.keep" || !strings.Contains(fes[0].Allowed, "524288 bytes") {
		t.Fatalf("EncodeLedger of %d runs with long node names = %v, want a run_once.keep error naming Consul's limit", len(l.Runs), err)
	}
	if _, err := EncodeLedger(l.Prune(100, "run-0999")); err != nil {
		t.Fatalf("a pruned ledger: %v", err)
	}
}
