package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// The watches, by the name their errors are counted under.
const (
	watchRegistry    = "registry"
	watchLockKeys    = "lock_keys"
	watchSessions    = "sessions"
	watchACLPolicies = "acl_policies"
)

// The label values of the labelled counters. Each series is exported at 0
// from the first scrape (the per-lock ones from the first registry answer
// that declares the lock), because increase() and rate() read a series
// that appears at 1 as no increase: the first event of a kind would never
// alert.
var (
	watchNames = []string{watchRegistry, watchLockKeys, watchSessions, watchACLPolicies}
	// violationReasons are the profile violations (lockmodel) and the
	// controller's own reasons (compliance).
	violationReasons = []string{
		lockmodel.ViolationTTLTooLong, lockmodel.ViolationLockDelayTooShort, lockmodel.ViolationBehaviorMismatch,
		lockmodel.ViolationNodeCheckMissing, lockmodel.ViolationServiceCheckMissing,
		compliance.ReasonMaxHoldExceeded, compliance.ReasonPredatesProfile,
	}
	// driftKinds are the kinds consullock_drift_total counts (Kind.IsDrift).
	driftKinds = []compliance.Kind{
		compliance.KindRecreateKey, compliance.KindRestoreFlags, compliance.KindRestoreLimit, compliance.KindRestoreACLRules,
		compliance.KindHeldKeyDrift, compliance.KindUnusableKey, compliance.KindACLPolicyMissing,
	}
	// repairKinds are the writes the controller makes: the decisions it
	// acts on (actuate.go), and the removal of holder service instances.
	repairKinds = []compliance.Kind{
		compliance.KindRecreateKey, compliance.KindRestoreFlags, compliance.KindRestoreLimit, compliance.KindRestoreACLRules,
		compliance.KindEndSession, holderRepairKind,
	}
)

// Metrics are the controller's Prometheus metrics, all named consullock_*.
type Metrics struct {
	Registry *prometheus.Registry

	leader            prometheus.Gauge
	lockWatches       prometheus.Gauge
	handovers         *prometheus.CounterVec
	violations        *prometheus.CounterVec
	drift             *prometheus.CounterVec
	pending           prometheus.Gauge
	repairs           *prometheus.CounterVec
	repairErrors      *prometheus.CounterVec
	watchErrors       *prometheus.CounterVec
	reconcileDuration prometheus.Histogram
	runMeter          *runMeter   // the run ledgers (runs.go)
	pauseMeter        *pauseMeter // the pause records (pauses.go)
}

func newMetrics(c *Controller) *Metrics {
	m := &Metrics{
		Registry:   prometheus.NewRegistry(),
		runMeter:   newRunMeter(c.cfg.Clock.Now),
		pauseMeter: newPauseMeter(),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consullock_leader", Help: "1 when this controller replica holds the leader lock and acts, else 0.",
		}),
		lockWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consullock_lock_watches", Help: "Blocking queries open on lock keys (grouped by prefix; does not grow with the number of locks).",
		}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_lock_handovers_total", Help: "Times a lock passed to a new holder (LockIndex increased, or a new semaphore holder).",
		}, []string{"lock"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_violations_total", Help: "Holder sessions found violating their declared profile or max_hold, by reason (counted once per finding; predates_profile_change marks holders left to finish).",
		}, []string{"reason"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_drift_total", Help: "Declared objects (lock keys, ACL policies) found differing from their declarations, by kind (counted once per finding; a difference pending an apply is not drift and is not counted).",
		}, []string{"kind"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consullock_declarations_pending", Help: "Declarations whose objects are left to the apply that changed them (changed within the apply grace, or newer than the version the watches showed): neither reported as drift nor repaired until the grace has passed.",
		}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_repairs_total", Help: "Writes the controller made to put live Consul back to the declarations, by kind.",
		}, []string{"kind"}),
		repairErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_repair_errors_total", Help: "Repairs that failed, by kind.",
		}, []string{"kind"}),
		watchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consullock_watch_errors_total", Help: "Failed blocking queries, by watch (registry, lock_keys, sessions, acl_policies).",
		}, []string{"watch"}),
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "consullock_reconcile_duration_seconds", Help: "Time of one reconcile (decide and act).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}
	for _, w := range watchNames {
		m.watchErrors.WithLabelValues(w)
	}
	for _, r := range violationReasons {
		m.violations.WithLabelValues(r)
	}
	for _, k := range driftKinds {
		m.drift.WithLabelValues(string(k))
	}
	for _, k := range repairKinds {
		m.repairs.WithLabelValues(string(k))
		m.repairErrors.WithLabelValues(string(k))
	}
	m.Registry.MustRegister(m.leader, m.lockWatches, m.handovers, m.violations, m.drift, m.pending, m.repairs, m.repairErrors,
		m.watchErrors, m.reconcileDuration, &lockCollector{c: c}, m.runMeter, m.pauseMeter,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// declareLock exports the counters of a newly declared lock at 0.
func (m *Metrics) declareLock(name string) {
	m.handovers.WithLabelValues(name)
}

// forgetLock drops the counters of a lock no longer declared.
func (m *Metrics) forgetLock(name string) {
	m.handovers.DeleteLabelValues(name)
}

func (m *Metrics) setLeader(on bool) {
	if on {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// RepairsTotal returns consullock_repairs_total for kind (for tests).
func (m *Metrics) RepairsTotal(kind compliance.Kind) float64 {
	return counterValue(m.repairs.WithLabelValues(string(kind)))
}

// DriftTotal returns consullock_drift_total for kind (for tests).
func (m *Metrics) DriftTotal(kind compliance.Kind) float64 {
	return counterValue(m.drift.WithLabelValues(string(kind)))
}

// ViolationsTotal returns consullock_violations_total for reason.
func (m *Metrics) ViolationsTotal(reason string) float64 {
	return counterValue(m.violations.WithLabelValues(reason))
}

func counterValue(c prometheus.Counter) float64 {
	var pb dto.Metric
	if err := c.Write(&pb); err != nil || pb.Counter == nil {
		return 0
	}
	return pb.Counter.GetValue()
}

var (
	descHeld = prometheus.NewDesc("consullock_lock_held",
		"1 when the declared lock has a holder, else 0.", []string{"lock"}, nil)
	descIndex = prometheus.NewDesc("consullock_lock_index",
		"Consul's LockIndex of a mutex key (not monotone: it restarts when the key is re-created; not a fencing token).", []string{"lock"}, nil)
	descSinceHandover = prometheus.NewDesc("consullock_lock_since_handover_seconds",
		"Seconds since this controller saw the lock pass to a new holder (absent before the first hand-over it saw).", []string{"lock"}, nil)
	descUnheld = prometheus.NewDesc("consullock_lock_unheld_seconds",
		"Seconds the lock has been without a holder; 0 while held.", []string{"lock"}, nil)
	descHolders = prometheus.NewDesc("consullock_lock_holders",
		"Live holders of the lock (1 for a held mutex, up to the limit for a semaphore).", []string{"lock"}, nil)
	descHolderInfo = prometheus.NewDesc("consullock_lock_holder_info",
		"1 for each holder of each lock (as kube_lease_owner): the holder's node and session.", []string{"lock", "node", "session"}, nil)
	descHeldFor = prometheus.NewDesc("consullock_lock_holder_held_seconds",
		"Seconds the holder has held the lock, what max_hold is judged on: from the start its holder value gives (consullock run writes one), bounded by what this controller saw itself, else from when this controller first saw the hold.", []string{"lock", "session"}, nil)
	descMaxHold = prometheus.NewDesc("consullock_lock_max_hold_seconds",
		"The lock's declared max_hold (absent when it has none).", []string{"lock"}, nil)
	descWorstCaseGap = prometheus.NewDesc("consullock_lock_worst_case_gap_seconds",
		"The worst_case_gap of the lock's session profile, 2 x ttl + lock_delay (absent without a declared profile).", []string{"lock"}, nil)
	descFencingToken = prometheus.NewDesc("consullock_lock_fencing_token",
		"The lock's newest fencing token: a held mutex's key ModifyIndex (the Raft index of the hold), a semaphore's highest holder token (monotone across holders; absent while unheld).", []string{"lock"}, nil)
	descHolderToken = prometheus.NewDesc("consullock_lock_holder_fencing_token",
		"Each holder's fencing token: the Raft index of its hold, the ModifyIndex of a mutex's key or of a semaphore holder's contender key <prefix>/<session>.", []string{"lock", "session"}, nil)
	descAlwaysHeld = prometheus.NewDesc("consullock_lock_always_held",
		"1 when the lock is declared always_held (it must always have a holder), else 0.", []string{"lock"}, nil)
)

// lockCollector computes the per-lock gauges at scrape time, so that the
// "seconds since" series are current without a ticker.
type lockCollector struct{ c *Controller }

func (lc *lockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHeld
	ch <- descIndex
	ch <- descSinceHandover
	ch <- descUnheld
	ch <- descHolders
	ch <- descHolderInfo
	ch <- descHeldFor
	ch <- descMaxHold
	ch <- descWorstCaseGap
	ch <- descFencingToken
	ch <- descHolderToken
	ch <- descAlwaysHeld
}

func (lc *lockCollector) Collect(ch chan<- prometheus.Metric) {
	now := lc.c.cfg.Clock.Now()
	lc.c.mu.Lock()
	defer lc.c.mu.Unlock()
	for name, ls := range lc.c.recon.lockStatus {
		held, unheld := 0.0, now.Sub(ls.unheldSince).Seconds()
		if ls.held {
			held, unheld = 1, 0
		}
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, held, name)
		ch <- prometheus.MustNewConstMetric(descIndex, prometheus.GaugeValue, float64(ls.lockIndex), name)
		ch <- prometheus.MustNewConstMetric(descUnheld, prometheus.GaugeValue, unheld, name)
		ch <- prometheus.MustNewConstMetric(descHolders, prometheus.GaugeValue, float64(len(ls.holders)), name)
		if !ls.lastHandover.IsZero() {
			ch <- prometheus.MustNewConstMetric(descSinceHandover, prometheus.GaugeValue, now.Sub(ls.lastHandover).Seconds(), name)
		}
		lc.collectDeclared(ch, name, ls, now)
	}
}

// collectDeclared adds the holder and declaration series of one lock, for
// alerts that compare a lock with its own declaration (c.mu held).
func (lc *lockCollector) collectDeclared(ch chan<- prometheus.Metric, name string, ls *lockStatus, now time.Time) {
	c := lc.c
	l, ok := c.cache.locks[name]
	if !ok {
		return
	}
	always := 0.0
	if l.AlwaysHeld {
		always = 1
	}
	ch <- prometheus.MustNewConstMetric(descAlwaysHeld, prometheus.GaugeValue, always, name)
	if l.MaxHold > 0 {
		ch <- prometheus.MustNewConstMetric(descMaxHold, prometheus.GaugeValue, l.MaxHold.Seconds(), name)
	}
	if p, ok := c.cache.profiles[l.SessionDefaults]; ok {
		ch <- prometheus.MustNewConstMetric(descWorstCaseGap, prometheus.GaugeValue, p.WorstCaseGap().Seconds(), name)
	}
	var newest uint64
	for id := range ls.holders {
		ch <- prometheus.MustNewConstMetric(descHolderInfo, prometheus.GaugeValue, 1, name, c.cache.sessions[id].Node, id)
		if start, ok := c.recon.holdStart[compliance.LockSession{Lock: name, Session: id}]; ok {
			ch <- prometheus.MustNewConstMetric(descHeldFor, prometheus.GaugeValue, max(now.Sub(start).Seconds(), 0), name, id)
		}
		if lk, ok := c.holderKey(l, id); ok {
			ch <- prometheus.MustNewConstMetric(descHolderToken, prometheus.GaugeValue, float64(lk.ModifyIndex), name, id)
			newest = max(newest, lk.ModifyIndex)
		}
	}
	if newest > 0 {
		ch <- prometheus.MustNewConstMetric(descFencingToken, prometheus.GaugeValue, float64(newest), name)
	}
}
