package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// A timed_out attempt is counted under its own outcome, and the newest
// run's not_before is consullock_lock_next_attempt_timestamp_seconds, gone
// once the next attempt runs.
func TestRunMeter_timedOutAndNextAttempt(t *testing.T) {
	m := newRunMeter(time.Now)
	t0 := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	locks := map[string]lockmodel.Lock{"nightly": {Name: "nightly", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, RetryAfter: time.Minute}}}
	run := ledger.Run{ID: "d1", Outcome: ledger.RunTimedOut, NotBefore: t0.Add(3 * time.Minute),
		Attempts: []ledger.Attempt{attempt(1, ledger.RunTimedOut, t0)}}
	m.observe(map[string]ledger.Ledger{"nightly": {Lock: "nightly", Runs: []ledger.Run{run}}}, locks)
	if got := counterValue(m.runs.WithLabelValues("nightly", "timed_out")); got != 1 {
		t.Fatalf("runs_total{outcome=\"timed_out\"} = %v, want 1", got)
	}
	if got, ok := nextAttempt(t, m); !ok || got != float64(t0.Add(3*time.Minute).Unix()) {
		t.Fatalf("next_attempt_timestamp_seconds = %v (present %v), want %d", got, ok, t0.Add(3*time.Minute).Unix())
	}
	run.NotBefore, run.Outcome = time.Time{}, ledger.RunRunning
	run.Attempts = append(run.Attempts, attempt(2, ledger.RunRunning, t0.Add(3*time.Minute)))
	m.observe(map[string]ledger.Ledger{"nightly": {Lock: "nightly", Runs: []ledger.Run{run}}}, locks)
	if _, ok := nextAttempt(t, m); ok {
		t.Fatal("next_attempt_timestamp_seconds still exported while attempt 2 runs")
	}
}

func nextAttempt(t *testing.T, m *runMeter) (float64, bool) {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	m.Collect(ch)
	close(ch)
	for metric := range ch {
		if metric.Desc() != descNextAttempt {
			continue
		}
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetGauge().GetValue(), true
	}
	return 0, false
}
