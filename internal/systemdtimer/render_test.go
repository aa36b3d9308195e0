package systemdtimer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/oncalendar"
)

var now = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// exampleTimer is the lock of examples/run-once and examples/deploy, and
// the command examples/deploy/nightly-report.timer was made with.
var exampleTimer = Timer{
	Lock:    "nightly-report",
	RunOnce: ledger.RunOnce{Schedule: "0 2 * * *", StartingDeadline: time.Hour},
	Delay:   5 * time.Minute,
	Command: "consullock timer -lock nightly-report -randomized-delay 5m",
}

// TestRender_isTheShippedExample: examples/deploy/nightly-report.timer is
// what `consullock timer` prints for the example lock.
func TestRender_isTheShippedExample(t *testing.T) {
	got, err := Render(exampleTimer, now)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "examples", "deploy", "nightly-report.timer"))
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("examples/deploy/nightly-report.timer is not what timer prints; it prints:\n%s", got)
	}
}

// TestRender_unitLines: the events, the delay in systemd's units, the
// accuracy, and the packaged template's instance (or -service-name).
func TestRender_unitLines(t *testing.T) {
	tm := Timer{Lock: "billing", RunOnce: ledger.RunOnce{Schedule: "0 0 1 * 1", TimeZone: "Europe/Berlin", StartingDeadline: 10 * time.Minute},
		Delay: 1500 * time.Millisecond, Service: "billing-job.service"}
	got, err := Render(tm, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nOnCalendar=*-*-01 00:00:00 Europe/Berlin\nOnCalendar=Mon *-*-* 00:00:00 Europe/Berlin\n",
		"\nRandomizedDelaySec=1500ms\nAccuracySec=1s\n", "\nUnit=billing-job.service\n", "\nWantedBy=timers.target\n",
		"within run_once.starting_deadline (10m)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("timer lacks %q:\n%s", want, got)
		}
	}
	tm.Service, tm.Delay = "", 0
	got, _ = Render(tm, now)
	if !strings.Contains(got, "\nUnit=consullock-run@billing.service\n") || strings.Contains(got, "RandomizedDelaySec") {
		t.Errorf("default service, no delay:\n%s", got)
	}
}

// TestRender_refuses: no schedule (naming the lock), a schedule systemd
// skips a slot of, a delay at or past the starting deadline (naming both)
// or reaching the next slot.
func TestRender_refuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		timer Timer
		want  string
		delay bool
	}{
		{"no schedule", Timer{Lock: "hourly", RunOnce: ledger.RunOnce{Period: time.Hour}}, `lock "hourly" has no run_once.schedule`, false},
		{"no run_once", Timer{Lock: "plain"}, `lock "plain" has no run_once.schedule`, false},
		{"skipped time", Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "30 2 * * *", TimeZone: "Europe/Berlin"}}, "the clocks skip from 02:00 to 03:00", false},
		{"delay at deadline", Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "0 2 * * *", StartingDeadline: 30 * time.Minute}, Delay: 30 * time.Minute},
			"-randomized-delay 30m is not below run_once.starting_deadline 30m", true},
		{"delay past deadline", Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "0 2 * * *", StartingDeadline: 30 * time.Minute}, Delay: time.Hour},
			"-randomized-delay 1h is not below run_once.starting_deadline 30m", true},
		{"delay within accuracy of deadline", Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "0 2 * * *", StartingDeadline: 30 * time.Minute}, Delay: 30*time.Minute - 500*time.Millisecond},
			"give at most 29m59s", true},
		{"delay to the next slot", Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "*/15 * * * *"}, Delay: 15 * time.Minute},
			`-randomized-delay 15m reaches the next slot: run_once.schedule "*/15 * * * *" has slots 15m apart`, true},
		{"negative delay", Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "0 2 * * *"}, Delay: -time.Second}, "want 0 or more", true},
	} {
		_, err := Render(tc.timer, now)
		var delay *DelayError
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &delay) != tc.delay {
			t.Errorf("%s: %v; want an error with %q (a delay error: %v)", tc.name, err, tc.want, tc.delay)
		}
	}
	var in *oncalendar.Inexpressible
	if _, err := Render(Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "30 2 * * *", TimeZone: "Europe/Berlin"}}, now); !errors.As(err, &in) {
		t.Errorf("a skipped slot: %v, want an *oncalendar.Inexpressible", err)
	}
	// Just below both bounds is fine.
	if _, err := Render(Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "0 2 * * *", StartingDeadline: 30 * time.Minute}, Delay: 29*time.Minute + 59*time.Second}, now); err != nil {
		t.Error(err)
	}
	if _, err := Render(Timer{Lock: "x", RunOnce: ledger.RunOnce{Schedule: "*/15 * * * *"}, Delay: 14 * time.Minute}, now); err != nil {
		t.Error(err)
	}
}

// TestShortestGap: daylight saving shortens a gap between slots ("0 1,3"
// in Berlin: one hour on the spring-forward night, not two).
func TestShortestGap(t *testing.T) {
	for _, tc := range []struct {
		expr, zone string
		want       time.Duration
	}{
		{"*/15 * * * *", "UTC", 15 * time.Minute},
		{"0 2 * * 1-5", "UTC", 24 * time.Hour},
		{"0 1,3 * * *", "Europe/Berlin", time.Hour},
		{"0 0 1 1 *", "UTC", 365 * 24 * time.Hour},
	} {
		s, err := ledger.ParseSchedule(tc.expr, tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := shortestGap(s, now); got != tc.want {
			t.Errorf("%q in %s: shortest gap %s, want %s", tc.expr, tc.zone, got, tc.want)
		}
	}
}

func TestServiceName(t *testing.T) {
	for in, want := range map[string]string{
		"consullock-run@nightly-report": "consullock-run@nightly-report.service",
		"report.service":                "report.service",
		`job@a\x2db.service`:            `job@a\x2db.service`,
		"consullock-run@.service":       "",
		"two words":                     "",
		"a@b@c":                         "",
	} {
		got, err := ServiceName(in)
		if (want == "") != (err != nil) || (err == nil && got != want) {
			t.Errorf("ServiceName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
