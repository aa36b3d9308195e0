package controller

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// consullock_lock_paused is 0 for a declared lock, 1 while its pause
// record exists, with the pause time; the controller writes nothing.
func TestMetrics_lockPaused(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("nightly"), Prefix: h.prefix + "/nightly"})
	if _, err := h.api.KV().Put(&api.KVPair{Key: l.Key, Flags: l.Flags()}, nil); err != nil {
		t.Fatal(err)
	}
	c := h.startWith(startOpts{mode: compliance.ModeObserve})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	s := &metricsScript{t: t, base: srv.URL}
	paused := lockSeries("consullock_lock_paused", l.Name)
	since := lockSeries("consullock_lock_paused_since_timestamp_seconds", l.Name)
	s.waitFor(paused, 0)
	s.absent("not paused", since)

	at := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	rec, err := record.EncodePauseRecord(record.Pause{Lock: l.Name, Reason: "INC-1", By: "alice", At: at})
	if err != nil {
		t.Fatal(err)
	}
	key := record.PauseKey(h.registry, l.Name)
	h.put(key, rec)
	s.waitFor(paused, 1)
	s.want("paused", since, float64(at.Unix()))
	if _, err := h.api.KV().Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	s.waitFor(paused, 0)
	s.absent("resumed", since)
}
