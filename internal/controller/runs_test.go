package controller

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

func attempt(n int, o ledger.RunOutcome, finished time.Time) ledger.Attempt {
	a := ledger.Attempt{Number: n, Node: "n", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: uint64(10 + n),
		Started: finished.Add(-time.Minute), Outcome: o}
	if o != ledger.RunRunning {
		a.Finished = finished
	}
	switch o {
	case ledger.RunSucceeded:
		a.ExitCode = new(int)
	case ledger.RunFailed:
		one := 1
		a.ExitCode = &one
	}
	return a
}

// The rules of consullock_lock_runs_total: an attempt is counted once,
// when first seen finished; a running one is not; a run is counted
// exhausted once when it used up max_attempts without a success (before
// a runner writes "exhausted"); a lock's last success is its newest
// succeeded attempt.
func TestRunMeter_countsEachOutcomeOnce(t *testing.T) {
	m := newRunMeter(time.Now)
	t0 := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	ro := &ledger.RunOnce{Period: 24 * time.Hour, MaxAttempts: 2}
	locks := map[string]lockmodel.Lock{"nightly": {Name: "nightly", RunOnce: ro}}
	led := func(runs ...ledger.Run) map[string]ledger.Ledger {
		return map[string]ledger.Ledger{"nightly": {Lock: "nightly", Runs: runs}}
	}
	want := func(step string, counts map[ledger.RunOutcome]float64, lastSuccess time.Time) {
		t.Helper()
		for _, o := range runOutcomeLabels {
			if got := counterValue(m.runs.WithLabelValues("nightly", o)); got != counts[ledger.RunOutcome(o)] {
				t.Errorf("%s: runs_total{outcome=%q} = %v, want %v", step, o, got, counts[ledger.RunOutcome(o)])
			}
		}
		if got := m.lastSuccess["nightly"]; !got.Equal(lastSuccess) {
			t.Errorf("%s: last success %v, want %v", step, got, lastSuccess)
		}
	}

	m.observe(nil, locks)
	want("declared, no ledger yet", nil, time.Time{})
	if m.period["nightly"] != 24*time.Hour {
		t.Errorf("period %v", m.period["nightly"])
	}
	day1 := ledger.Run{ID: "d1", Outcome: ledger.RunRunning, Attempts: []ledger.Attempt{attempt(1, ledger.RunRunning, t0)}}
	m.observe(led(day1), locks)
	want("attempt 1 running", nil, time.Time{})
	day1.Attempts = []ledger.Attempt{attempt(1, ledger.RunFailed, t0)}
	day1.Outcome = ledger.RunFailed
	m.observe(led(day1), locks)
	m.observe(led(day1), locks)
	want("attempt 1 failed, seen twice", map[ledger.RunOutcome]float64{ledger.RunFailed: 1}, time.Time{})
	day1.Attempts = append(day1.Attempts, attempt(2, ledger.RunSucceeded, t0.Add(time.Hour)))
	day1.Outcome = ledger.RunSucceeded
	m.observe(led(day1), locks)
	want("attempt 2 succeeded", map[ledger.RunOutcome]float64{ledger.RunFailed: 1, ledger.RunSucceeded: 1}, t0.Add(time.Hour))

	day2 := ledger.Run{ID: "d2", Outcome: ledger.RunLost, Attempts: []ledger.Attempt{
		attempt(1, ledger.RunCrashed, t0.Add(24*time.Hour)), attempt(2, ledger.RunLost, t0.Add(25*time.Hour))}}
	m.observe(led(day2, day1), locks)
	done := map[ledger.RunOutcome]float64{ledger.RunFailed: 1, ledger.RunSucceeded: 1, ledger.RunCrashed: 1, ledger.RunLost: 1, ledger.RunExhausted: 1}
	want("day 2 used up its 2 attempts", done, t0.Add(time.Hour))
	day2.Outcome = ledger.RunExhausted
	m.observe(led(day2, day1), locks)
	want("a runner wrote exhausted: counted already", done, t0.Add(time.Hour))

	m.observe(led(day2), locks)
	want("day 1 pruned", done, t0.Add(time.Hour))
	m.observe(nil, nil)
	if _, ok := m.period["nightly"]; ok || len(m.seen) != 0 {
		t.Errorf("lock and ledger gone: period %v seen %v", m.period, m.seen)
	}
}

// A scrape shows one moment: a counter in it has the value it had when
// the scrape read the last success, even when the registry writes the
// counter out after observe has counted a new success.
func TestRunMeter_aScrapeReadsTheCountersWithTheLastSuccess(t *testing.T) {
	m := newRunMeter(time.Now)
	locks := map[string]lockmodel.Lock{"nightly": {Name: "nightly", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour}}}
	m.observe(nil, locks)
	scraped := make(chan prometheus.Metric, 100)
	m.Collect(scraped)
	close(scraped)
	finished := time.Date(2026, 12, 1, 0, 6, 0, 0, time.UTC)
	m.observe(map[string]ledger.Ledger{"nightly": {Lock: "nightly", Runs: []ledger.Run{{ID: "d1",
		Outcome: ledger.RunSucceeded, Attempts: []ledger.Attempt{attempt(1, ledger.RunSucceeded, finished)}}}}}, locks)
	counters := 0
	for metric := range scraped {
		var pb dto.Metric
		if err := metric.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(metric.Desc().String(), "consullock_lock_last_success_timestamp_seconds") {
			t.Fatalf("the scrape before the success shows a last success: %v", pb.String())
		}
		if pb.Counter != nil {
			counters++
			if v := pb.Counter.GetValue(); v != 0 {
				t.Errorf("the scrape before the success shows a counter at %v: %v", v, pb.String())
			}
		}
	}
	if want := len(runOutcomeLabels) + 1; counters != want { // runs_total by outcome, missed_slots_total
		t.Errorf("%d counters scraped, want %d", counters, want)
	}
}

// The controller exports the run metrics from the ledgers that come with
// its registry watch (no new watch), and writes nothing.
func TestMetrics_runLedgers(t *testing.T) {
	h := newHarness(t, agent)
	profile := h.name("strict")
	h.declareProfile(lockmodel.SessionProfile{Name: profile, TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	l := h.declareLock(lockmodel.Lock{Name: h.name("nightly"), Prefix: h.prefix + "/nightly", SessionDefaults: profile,
		RunOnce: &ledger.RunOnce{Period: 24 * time.Hour}})
	if _, err := h.api.KV().Put(&api.KVPair{Key: l.Key, Flags: l.Flags()}, nil); err != nil {
		t.Fatal(err)
	}
	c := h.startWith(startOpts{mode: compliance.ModeObserve})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	s := &metricsScript{t: t, base: srv.URL}
	s.waitFor(lockSeries("consullock_lock_run_period_seconds", l.Name), 86400)
	watches := s.m["consullock_lock_watches"]
	succeeded := `consullock_lock_runs_total{lock="` + l.Name + `",outcome="succeeded"}`
	s.want("declared", succeeded, 0)
	s.absent("declared", lockSeries("consullock_lock_last_success_timestamp_seconds", l.Name))

	finished := time.Date(2026, 12, 1, 0, 6, 0, 0, time.UTC)
	rec, err := record.EncodeLedger(ledger.Ledger{Lock: l.Name, Runs: []ledger.Run{{ID: "2026-12-01T00:00:00Z",
		Outcome: ledger.RunSucceeded, Attempts: []ledger.Attempt{attempt(1, ledger.RunSucceeded, finished)}}}})
	if err != nil {
		t.Fatal(err)
	}
	ledgerKey := record.RunLedgerKey(h.registry, l.Name)
	h.put(ledgerKey, rec)
	s.waitFor(succeeded, 1)
	s.want("succeeded", lockSeries("consullock_lock_last_success_timestamp_seconds", l.Name), float64(finished.Unix()))
	s.want("succeeded", "consullock_lock_watches", watches)
	pair, _, err := h.api.KV().Get(ledgerKey, nil)
	if err != nil || pair == nil || string(pair.Value) != string(rec) {
		t.Fatalf("the ledger changed: %v %v", pair, err)
	}
}

// consullock_lock_missed_slots_total counts each slot seen passing with no
// run once (lockmodel RunOnce.MissedSlots), at the scrape; a backfill does
// not undo it; the next and latest slot are exported; a schedule lock has
// no period series (the missed-run alert then reads its slots).
func TestRunMeter_missedSlotsAndNextSlot(t *testing.T) {
	now := time.Date(2026, 7, 10, 12, 0, 0, 0, time.UTC)
	m := newRunMeter(func() time.Time { return now })
	ro := &ledger.RunOnce{Schedule: "0 2 * * *", TimeZone: "Europe/Berlin"}
	locks := map[string]lockmodel.Lock{"nightly": {Name: "nightly", RunOnce: ro}}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	run := func(day int) ledger.Run {
		at := time.Date(2026, 7, day, 0, 0, 0, 0, time.UTC) // 02:00 CEST
		return ledger.Run{ID: at.In(berlin).Format(time.RFC3339), Outcome: ledger.RunSucceeded,
			Attempts: []ledger.Attempt{attempt(1, ledger.RunSucceeded, at.Add(2*time.Minute))}}
	}
	scrape := func() map[string]float64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(m)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				if mt.GetCounter() != nil {
					got[mf.GetName()] = mt.GetCounter().GetValue()
				} else {
					got[mf.GetName()] = mt.GetGauge().GetValue()
				}
			}
		}
		return got
	}
	m.observe(map[string]ledger.Ledger{"nightly": {Lock: "nightly", Runs: []ledger.Run{run(9), run(6)}}}, locks)
	got := scrape()
	if got["consullock_lock_missed_slots_total"] != 2 { // the 7th and 8th; the 10th may still start
		t.Fatalf("missed after the 9th: %v", got)
	}
	if got["consullock_lock_next_slot_timestamp_seconds"] != float64(time.Date(2026, 7, 11, 0, 0, 0, 0, time.UTC).Unix()) ||
		got["consullock_lock_last_slot_timestamp_seconds"] != float64(time.Date(2026, 7, 10, 0, 0, 0, 0, time.UTC).Unix()) {
		t.Fatalf("slot gauges: %v", got)
	}
	if _, ok := got["consullock_lock_run_period_seconds"]; ok {
		t.Fatalf("a schedule lock exports a period: %v", got)
	}
	if got = scrape(); got["consullock_lock_missed_slots_total"] != 2 {
		t.Fatalf("missed counted again at the second scrape: %v", got)
	}
	m.observe(map[string]ledger.Ledger{"nightly": {Lock: "nightly", Runs: []ledger.Run{run(7), run(9), run(6)}}}, locks) // a backfill
	now = time.Date(2026, 7, 11, 12, 0, 0, 0, time.UTC)
	if got = scrape(); got["consullock_lock_missed_slots_total"] != 3 { // + the 10th
		t.Fatalf("missed a day later: %v", got)
	}
}

// consullock_lock_runs_total{outcome="exhausted"} reads a run by the one
// rule (lockmodel Run.Exhausted): an attempt set aside under
// run_once.overlap (replaced, skipped) does not count toward max_attempts.
func TestRunMeter_exhaustedByTheLedgersRule(t *testing.T) {
	m := newRunMeter(time.Now)
	t0 := time.Date(2026, 12, 1, 0, 5, 0, 0, time.UTC)
	locks := map[string]lockmodel.Lock{"nightly": {Name: "nightly", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, MaxAttempts: 2}}}
	run := ledger.Run{ID: "2026-12-01T00:00:00Z", Outcome: ledger.RunFailed,
		Attempts: []ledger.Attempt{attempt(1, ledger.RunReplaced, t0), attempt(2, ledger.RunFailed, t0.Add(time.Minute))}}
	m.observe(map[string]ledger.Ledger{"nightly": {Lock: "nightly", Runs: []ledger.Run{run}}}, locks)
	if got, want := counterValue(m.runs.WithLabelValues("nightly", string(ledger.RunExhausted))), 0.0; got != want {
		t.Errorf("a run with a replaced and a failed attempt of max_attempts 2: exhausted = %v, want %v (Exhausted: %v)",
			got, want, run.Exhausted(2))
	}
}
