package controller

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// The run ledgers of run-once locks, read only: they come with the
// registry watch (<registry>/runs/<lock> is under the registry prefix, so
// no watch is added), and the controller never writes them.

// runOutcomeLabels are the outcome label values of
// consullock_lock_runs_total: the attempts' outcomes, and "exhausted" for a
// run that used up its attempts without a success.
var runOutcomeLabels = []string{
	string(ledger.RunSucceeded), string(ledger.RunFailed), string(ledger.RunLost),
	string(ledger.RunCrashed), string(ledger.RunTimedOut), string(ledger.RunReleased), string(ledger.RunExhausted),
	string(ledger.RunSkipped), string(ledger.RunReplaced),
}

var (
	descLastSuccess = prometheus.NewDesc("consullock_lock_last_success_timestamp_seconds",
		"Unix time at which the lock's newest succeeded run finished, from its run ledger (absent before the first success the ledger keeps).", []string{"lock"}, nil)
	descRunPeriod = prometheus.NewDesc("consullock_lock_run_period_seconds",
		"The lock's declared run_once.period (absent without run_once, and with run_once.schedule).", []string{"lock"}, nil)
	descNextSlot = prometheus.NewDesc("consullock_lock_next_slot_timestamp_seconds",
		"Unix time of the run_once lock's next slot (its period or schedule), at the scrape.", []string{"lock"}, nil)
	descNextAttempt = prometheus.NewDesc("consullock_lock_next_attempt_timestamp_seconds",
		"Unix time before which the lock's newest run starts no next attempt (its ledger's not_before, run_once.retry_after); absent when none waits.", []string{"lock"}, nil)
	descLastSlot = prometheus.NewDesc("consullock_lock_last_slot_timestamp_seconds",
		"Unix time of the run_once lock's latest slot at or before the scrape: the run a trigger now runs.", []string{"lock"}, nil)
	descSlotsSince = prometheus.NewDesc("consullock_lock_slots_since_timestamp_seconds",
		"Unix time at which the run_once lock was declared with its slots (created, or its period, offset, schedule or time_zone last changed); no slot before it is the lock's. Absent when its record does not say.", []string{"lock"}, nil)
)

// runKey names an attempt (attempt >= 1) or a run's exhaustion (attempt 0).
type runKey struct {
	run     string
	attempt int
}

// runMeter derives the run metrics from the ledgers each registry watch
// answer brings. consullock_lock_runs_total counts every attempt the
// first time this controller sees it finished (succeeded, failed, lost,
// crashed), and every run the first time it sees it exhausted: at start,
// what the ledgers keep; afterwards, each change once.
type runMeter struct {
	runs *prometheus.CounterVec

	// missed counts each slot this controller sees missed
	// (lockmodel RunOnce.MissedSlots), judged at each scrape.
	missed *prometheus.CounterVec
	now    func() time.Time // the controller's clock

	mu          sync.Mutex
	seen        map[string]map[runKey]ledger.RunOutcome // lock -> what was counted
	lastSuccess map[string]time.Time
	period      map[string]time.Duration
	declared    map[string]ledger.RunOnce  // the run_once locks
	ledgers     map[string]ledger.Ledger   // as last observed
	missedSeen  map[string]map[string]bool // lock -> missed slots counted
	// missedAsOf is what a lock's missedSeen was judged at: it changes
	// only with the latest slot, its deadline passing, or a new registry
	// answer (observe clears it).
	missedAsOf map[string]missedAsOf
}

type missedAsOf struct {
	latest int64 // Unix nanoseconds of the latest slot
	past   bool
}

func newRunMeter(now func() time.Time) *runMeter {
	return &runMeter{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_lock_runs_total",
			Help: "Attempts of run-once runs seen finished in the lock's run ledger, and runs seen using up max_attempts without a success (exhausted), by outcome (" +
				strings.Join(runOutcomeLabels, ", ") + "). Derived from the ledgers; each counted once per controller.",
		}, []string{"lock", "outcome"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_lock_missed_slots_total",
			Help: "Slots of a run_once lock (its period or schedule) seen passing with no run in its ledger: of the last keep slots, those since the slots were declared (or the ledger's oldest run), the latest once past starting_deadline. Each counted once per controller; backfill with consullock run -run-id.",
		}, []string{"lock"}),
		now:  now,
		seen: map[string]map[runKey]ledger.RunOutcome{}, lastSuccess: map[string]time.Time{}, period: map[string]time.Duration{},
		declared: map[string]ledger.RunOnce{}, ledgers: map[string]ledger.Ledger{}, missedSeen: map[string]map[string]bool{},
		missedAsOf: map[string]missedAsOf{},
	}
}

// observe takes the ledgers and the declared locks of one registry
// answer. Series of a lock that has neither a ledger nor run_once any
// more are dropped.
func (m *runMeter) observe(ledgers map[string]ledger.Ledger, locks map[string]lockmodel.Lock) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.period, m.ledgers, m.missedAsOf = map[string]time.Duration{}, ledgers, map[string]missedAsOf{}
	declared := map[string]ledger.RunOnce{}
	for name, l := range locks {
		if l.RunOnce != nil {
			declared[name] = *l.RunOnce
			if l.RunOnce.Period > 0 {
				m.period[name] = l.RunOnce.Period
			}
			m.initSeries(name)
			if _, ok := m.declared[name]; !ok {
				m.missed.WithLabelValues(name)
			}
		}
	}
	for name := range m.declared {
		if _, ok := declared[name]; !ok {
			m.missed.DeleteLabelValues(name)
			delete(m.missedSeen, name)
		}
	}
	m.declared = declared
	for name, led := range ledgers {
		m.initSeries(name)
		maxAttempts := ledger.DefaultMaxAttempts
		if l, ok := locks[name]; ok && l.RunOnce != nil {
			maxAttempts = l.RunOnce.WithDefaults().MaxAttempts
		}
		m.count(name, led, maxAttempts)
	}
	for name := range m.seen {
		if _, ok := ledgers[name]; ok {
			continue
		}
		delete(m.seen, name)
		delete(m.lastSuccess, name)
		if _, declared := m.declared[name]; !declared {
			for _, o := range runOutcomeLabels {
				m.runs.DeleteLabelValues(name, o)
			}
		}
	}
}

// initSeries creates a lock's counters at 0, so that the first increase is
// seen by increase() and rate().
func (m *runMeter) initSeries(name string) {
	if _, ok := m.seen[name]; ok {
		return
	}
	m.seen[name] = map[runKey]ledger.RunOutcome{}
	for _, o := range runOutcomeLabels {
		m.runs.WithLabelValues(name, o)
	}
}

// count adds what is new in ledger and keeps, as seen, only what it
// holds (the ledger is pruned to keep runs, so this stays bounded).
func (m *runMeter) count(name string, led ledger.Ledger, maxAttempts int) {
	before, now := m.seen[name], map[runKey]ledger.RunOutcome{}
	for _, r := range led.Runs {
		for _, a := range r.Attempts {
			k := runKey{run: r.ID, attempt: a.Number}
			now[k] = a.Outcome
			if a.Outcome != ledger.RunRunning && before[k] != a.Outcome {
				m.runs.WithLabelValues(name, string(a.Outcome)).Inc()
			}
			if a.Outcome == ledger.RunSucceeded && a.Finished.After(m.lastSuccess[name]) {
				m.lastSuccess[name] = a.Finished
			}
		}
		if r.Exhausted(maxAttempts) {
			k := runKey{run: r.ID}
			now[k] = ledger.RunExhausted
			if before[k] != ledger.RunExhausted {
				m.runs.WithLabelValues(name, string(ledger.RunExhausted)).Inc()
			}
		}
	}
	m.seen[name] = now
}

func (m *runMeter) Describe(ch chan<- *prometheus.Desc) {
	m.runs.Describe(ch)
	m.missed.Describe(ch)
	ch <- descLastSuccess
	ch <- descRunPeriod
	ch <- descNextSlot
	ch <- descLastSlot
	ch <- descNextAttempt
	ch <- descSlotsSince
}

// countMissed adds the slots newly seen missed at now, and exports each
// run_once lock's next and latest slot and when its slots were declared.
func (m *runMeter) countMissed(ch chan<- prometheus.Metric, now time.Time) {
	for name, ro := range m.declared {
		if !ro.Since.IsZero() {
			ch <- prometheus.MustNewConstMetric(descSlotsSince, prometheus.GaugeValue, float64(ro.Since.Unix()), name)
		}
		if next, ok := ro.NextSlot(now); ok {
			ch <- prometheus.MustNewConstMetric(descNextSlot, prometheus.GaugeValue, float64(next.Unix()), name)
		}
		_, last, err := ro.Slot(now)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descLastSlot, prometheus.GaugeValue, float64(last.Unix()), name)
		_, past := ro.PastDeadline(last, now)
		if asOf := (missedAsOf{latest: last.UnixNano(), past: past}); m.missedAsOf[name] == asOf {
			continue
		} else {
			m.missedAsOf[name] = asOf
		}
		seen := map[string]bool{}
		for _, id := range ro.MissedSlots(m.ledgers[name], now) {
			seen[id] = true
			if !m.missedSeen[name][id] {
				m.missed.WithLabelValues(name).Inc()
			}
		}
		m.missedSeen[name] = seen
	}
}

// Collect shows one moment: observe increments a counter and then sets
// the last success, so the counters are read under the same lock as the
// rest (collectNow), not later, when the registry writes them out.
func (m *runMeter) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	collectNow(m.runs, ch)
	m.countMissed(ch, m.now())
	collectNow(m.missed, ch)
	for name, t := range m.lastSuccess {
		ch <- prometheus.MustNewConstMetric(descLastSuccess, prometheus.GaugeValue, float64(t.UnixNano())/1e9, name)
	}
	for name, p := range m.period {
		ch <- prometheus.MustNewConstMetric(descRunPeriod, prometheus.GaugeValue, p.Seconds(), name)
	}
	for name, l := range m.ledgers {
		if r, ok := l.LastRun(); ok && !r.NotBefore.IsZero() {
			ch <- prometheus.MustNewConstMetric(descNextAttempt, prometheus.GaugeValue, float64(r.NotBefore.UnixNano())/1e9, name)
		}
	}
}

// collectNow sends c's metrics as copies of their values now. A metric
// that Collect passes on is read by the registry only later (its Write),
// after the caller's lock is released.
func collectNow(c prometheus.Collector, ch chan<- prometheus.Metric) {
	live := make(chan prometheus.Metric)
	go func() {
		defer close(live)
		c.Collect(live)
	}()
	for m := range live {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			ch <- prometheus.NewInvalidMetric(m.Desc(), err)
			continue
		}
		ch <- frozenMetric{desc: m.Desc(), pb: &pb}
	}
}

// frozenMetric is a metric's value as collectNow read it.
type frozenMetric struct {
	desc *prometheus.Desc
	pb   *dto.Metric
}

func (f frozenMetric) Desc() *prometheus.Desc { return f.desc }

func (f frozenMetric) Write(out *dto.Metric) error {
	out.Label, out.Counter, out.Gauge, out.Untyped = f.pb.Label, f.pb.Counter, f.pb.Gauge, f.pb.Untyped
	out.Histogram, out.Summary, out.TimestampMs = f.pb.Histogram, f.pb.Summary, f.pb.TimestampMs
	return nil
}

// MissedSlotsTotal returns consullock_lock_missed_slots_total for lock (for
// tests).
func (m *Metrics) MissedSlotsTotal(lock string) float64 {
	return counterValue(m.runMeter.missed.WithLabelValues(lock))
}

// RunOutcomes returns the outcome label values of
// consullock_lock_runs_total, each exported at 0 for every run_once lock.
func RunOutcomes() []string { return slices.Clone(runOutcomeLabels) }

// RunsTotal returns consullock_lock_runs_total for lock and outcome (for
// tests).
func (m *Metrics) RunsTotal(lock, outcome string) float64 {
	return counterValue(m.runMeter.runs.WithLabelValues(lock, outcome))
}
