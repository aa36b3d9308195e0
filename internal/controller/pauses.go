package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// The locks' pause records (<registry>/pauses/<lock>, record.Pause),
// read only: they come with the registry watch, as the run ledgers do.

var (
	descPaused = prometheus.NewDesc("consullock_lock_paused",
		"1 while the lock is paused (consullock pause, consullock_lock.paused): new runs do not start; 0 otherwise. Every declared lock has the series.", []string{"lock"}, nil)
	descPausedSince = prometheus.NewDesc("consullock_lock_paused_since_timestamp_seconds",
		"Unix time at which the paused lock was paused, from its pause record (absent while it is not paused).", []string{"lock"}, nil)
)

// pauseMeter exports the pauses of each registry watch answer.
type pauseMeter struct {
	mu       sync.Mutex
	declared map[string]bool
	pauses   map[string]record.Pause
}

func newPauseMeter() *pauseMeter { return &pauseMeter{} }

// observe takes the pauses and the declared locks of one registry answer.
func (m *pauseMeter) observe(pauses map[string]record.Pause, locks map[string]lockmodel.Lock) {
	declared := make(map[string]bool, len(locks))
	for name := range locks {
		declared[name] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.declared, m.pauses = declared, pauses
}

func (m *pauseMeter) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPaused
	ch <- descPausedSince
}

// Collect exports consullock_lock_paused for every declared lock (and a
// paused lock not declared, whose record outlived it), and the pause time
// of each paused one.
func (m *pauseMeter) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.declared {
		if _, ok := m.pauses[name]; !ok {
			ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, 0, name)
		}
	}
	for name, p := range m.pauses {
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, 1, name)
		ch <- prometheus.MustNewConstMetric(descPausedSince, prometheus.GaugeValue, float64(p.At.Unix()), name)
	}
}
