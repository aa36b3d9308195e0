package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestRepair_readsItsDeclarationOnce: confirmDrift reads the declaration
// of a new finding with ?consistent before reporting it, and the act that
// follows takes that read instead of sending the same one again.
func TestRepair_readsItsDeclarationOnce(t *testing.T) {
	h := newHarness(t, agent)
	l := h.declareLock(lockmodel.Lock{Name: h.name("once"), Prefix: h.prefix + "/once"})
	decl := lockmodel.RegistryKey(h.registry, lockmodel.KindLock, l.Name)
	proxy := newCountingProxy(t, h.a)
	c := h.startWith(startOpts{mode: compliance.ModeRepair, addr: proxy.Addr(), ha: true})
	h.waitKey(l.Key)
	eventually(t, 10*time.Second, func() error {
		if n := c.Metrics().RepairsTotal(compliance.KindRecreateKey); n != 1 {
			return fmt.Errorf("repairs{recreate_key} = %v, want 1 (the key created at start)", n)
		}
		return nil
	})
	for i := range 3 {
		proxy.Reset()
		if _, err := h.api.KV().Delete(l.Key, nil); err != nil {
			t.Fatal(err)
		}
		h.waitKey(l.Key)
		eventually(t, 10*time.Second, func() error {
			if n := c.Metrics().RepairsTotal(compliance.KindRecreateKey); n != float64(2+i) {
				return fmt.Errorf("repairs{recreate_key} = %v, want %d", n, 2+i)
			}
			return nil
		})
		time.Sleep(200 * time.Millisecond) // the watches' answers to the repair's own write
		reads := 0
		for _, r := range proxy.KVReads() {
			if r.Key == decl && r.Index == 0 {
				reads++
			}
		}
		proxy.mu.Lock()
		requests := proxy.reads
		proxy.mu.Unlock()
		writes := proxy.Writes()
		t.Logf("repair %d: %d reads of the declaration, %d GET requests (blocking queries' answers included), writes %s", i+1, reads, requests, formatCounts(writes))
		if reads != 1 {
			t.Errorf("repair %d read its declaration %s %d times, want once", i+1, decl, reads)
		}
	}
}
