package record

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

func TestPauseRecord_roundTrip(t *testing.T) {
	p := Pause{Lock: "nightly", Reason: "INC-1: downstream outage", By: "alice@ops1", At: time.Date(2026, 12, 1, 2, 3, 4, 0, time.UTC)}
	b, err := EncodePauseRecord(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema_version":1,"kind":"pause","name":"nightly","spec":{"lock":"nightly","reason":"INC-1: downstream outage","by":"alice@ops1","at":"2026-12-01T02:03:04Z"},"managed_by":"consullock"}`
	if string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
	got, err := DecodePauseRecord(b)
	if err != nil || got != p {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, p)
	}
	if PauseKey("consul-lock", "nightly") != "consul-lock/pauses/nightly" || RegistryKindOf(RecordKindPause) != lockmodel.KindPauses {
		t.Fatal("pause key or kind")
	}
}

func TestValidateReason(t *testing.T) {
	for _, tc := range []struct {
		name, reason, want string
	}{
		{"ok", "INC-1234", ""},
		{"blank", "  ", "a reason is required"},
		{"too long", strings.Repeat("x", MaxPauseReasonLength+1), "at most 512 characters (got 513)"},
		{"at the limit", strings.Repeat("é", MaxPauseReasonLength), ""},
		{"two lines", "a\nb", "one line"},
		{"not utf-8", "\xff", "valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateReason("-reason", tc.reason)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "-reason: ")):
				t.Fatalf("error %v; want one naming -reason and saying %q", err, tc.want)
			}
		})
	}
}

func TestLedgerRelease_marksTheSessionsRunningAttempt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sess := "11111111-2222-3333-4444-555555555555"
	l := ledger.Ledger{Lock: "nightly", Runs: []ledger.Run{{ID: "r1", Outcome: ledger.RunRunning, Attempts: []ledger.Attempt{
		{Number: 1, Node: "n1", Session: sess, FencingToken: 7, Started: t0, Outcome: ledger.RunRunning},
	}}}}
	if _, _, _, found := l.Release("00000000-2222-3333-4444-555555555555", "bob", "stuck", t0); found {
		t.Fatal("released an attempt of another session")
	}
	out, run, n, found := l.Release(sess, "bob@ops", "stuck since 02:00", t0.Add(time.Hour))
	if !found || run != "r1" || n != 1 {
		t.Fatalf("Release = %q %d %v", run, n, found)
	}
	a := out.Runs[0].Attempts[0]
	if a.Outcome != ledger.RunReleased || out.Runs[0].Outcome != ledger.RunReleased || a.ReleasedBy != "bob@ops" || a.Reason != "stuck since 02:00" || !a.Finished.Equal(t0.Add(time.Hour)) {
		t.Fatalf("attempt %+v", a)
	}
	if l.Runs[0].Attempts[0].Outcome != ledger.RunRunning {
		t.Fatal("Release changed its receiver")
	}
	b, err := EncodeLedger(out)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeLedger(b)
	if err != nil || back.Runs[0].Attempts[0].ReleasedBy != "bob@ops" {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	if !ledger.RunReleased.Retried() {
		t.Fatal("a released attempt is retried")
	}
	d, err := out.Begin("r1", holder.Holder{Node: "n2", Session: "22222222-2222-3333-4444-555555555555", FencingToken: 9}, 3, t0.Add(2*time.Hour))
	if err != nil || d.Kind != ledger.BeginRun || d.Attempt != 2 {
		t.Fatalf("Begin after a release: %+v, %v", d, err)
	}
}
