package controller

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// TestWatch_aWriteOutsideTheLocksMakesTheControllerReadNothing: locks under
// unrelated top-level prefixes, with -max-lock-watches 1 (merging them
// would watch the whole KV store), and many other keys elsewhere. A write
// to any of those keys must not make a lock watch answer or read them.
func TestWatch_aWriteOutsideTheLocksMakesTheControllerReadNothing(t *testing.T) {
	h := newHarness(t, agent)
	tag := strings.ReplaceAll(h.prefix, "/", "-")
	a := h.declareLock(lockmodel.Lock{Name: h.name("a"), Prefix: "a-" + tag + "/x"})
	b := h.declareLock(lockmodel.Lock{Name: h.name("b"), Prefix: "b-" + tag + "/y"})
	for _, top := range []string{"a-" + tag + "/", "b-" + tag + "/"} {
		t.Cleanup(func() { _, _ = h.api.KV().DeleteTree(top, nil) })
	}
	unrelated := h.prefix + "/unrelated/"
	filler := bytes.Repeat([]byte("x"), 1024)
	for i := range 100 {
		h.put(fmt.Sprintf("%sk%03d", unrelated, i), filler)
	}

	watches := newCountingProxy(t, h.a)
	c := h.startWith(startOpts{mode: compliance.ModeRepair, watchAddr: watches.Addr(), configure: func(cfg *Config) { cfg.MaxLockWatches = 1 }})
	h.waitKey(a.Key)
	h.waitKey(b.Key)
	eventually(t, 10*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, key := range []string{a.Key, b.Key} {
			if g := c.cache.groups[c.cache.keyGroup[key]]; g == nil || g.live[key].Flags != lockmodel.LockFlagValue {
				return fmt.Errorf("the controller has not seen %s created", key)
			}
		}
		return nil
	})
	watches.Reset()

	// Writes elsewhere, then a change the first lock's watch must see.
	for i := range 50 {
		h.put(fmt.Sprintf("%sk%03d", unrelated, i), []byte(fmt.Sprintf("write %d", i)))
	}
	h.put("c-"+tag+"/z", filler)
	t.Cleanup(func() { _, _ = h.api.KV().Delete("c-"+tag+"/z", nil) })
	s := h.session(api.SessionEntry{}, false)
	h.acquire(a.Key, s)
	eventually(t, 10*time.Second, func() error {
		if !c.holding(a.Name) {
			return fmt.Errorf("the controller has not seen %s acquired", a.Key)
		}
		return nil
	})

	registry := h.registry + "/"
	var lockReads, changed []string
	for _, r := range watches.KVReads() {
		if r.Key == registry {
			continue
		}
		lockReads = append(lockReads, fmt.Sprintf("%q index %d -> %d, %d bytes", r.Key, r.Index, r.Answer, len(r.Body)))
		if strings.HasPrefix(unrelated, r.Key) || bytes.Contains(r.Body, []byte(unrelated)) {
			t.Errorf("a lock watch read %q, which covers the unrelated keys", r.Key)
		}
		if r.Changed() {
			changed = append(changed, r.Key)
		}
	}
	if len(changed) != 1 || changed[0] != a.Key {
		t.Errorf("lock watches that answered with a change: %q; want only %q (the acquisition)\n%s",
			changed, a.Key, strings.Join(lockReads, "\n"))
	}
	t.Logf("lock watch answers after 51 unrelated writes and 1 acquisition:\n%s", strings.Join(lockReads, "\n"))
	if len(c.logs.lines(`"msg":"more lock watches than -max-lock-watches"`, `"lock_watches":2`)) == 0 {
		t.Error("exceeding -max-lock-watches was not logged")
	}
	if got := c.LockWatches(); got != 2 {
		t.Errorf("%d lock watches, want 2 (one per unrelated prefix)", got)
	}
}

// TestWatch_splitWatchesRepairTheirKeysAndFollowTheDeclarations: 300 locks
// numbered under one prefix with -max-lock-watches 16 are watched by 10
// queries (compliance.GroupKeys splits them by the digit after the
// prefix); a key deleted in any of them is re-created; declarations
// removed down to 100 locks merge them into one query, declarations added
// back split them again, and repairs go on across both changes.
func TestWatch_splitWatchesRepairTheirKeysAndFollowTheDeclarations(t *testing.T) {
	h := newHarness(t, agent)
	locks := make([]lockmodel.Lock, 300)
	for i := range locks {
		locks[i] = h.declareLock(lockmodel.Lock{Name: h.name(fmt.Sprintf("l%d", i)), Prefix: fmt.Sprintf("%s/%d", h.prefix, i)})
	}
	c := h.startWith(startOpts{mode: compliance.ModeRepair, configure: func(cfg *Config) {
		cfg.MaxLockWatches = 16
		cfg.ApplyGrace = 200 * time.Millisecond
	}})
	watches := func(want int) {
		t.Helper()
		eventually(t, 10*time.Second, func() error {
			if n := c.LockWatches(); n != want {
				return fmt.Errorf("%d lock key watches, want %d", n, want)
			}
			return nil
		})
	}
	repaired := func(is ...int) {
		t.Helper()
		for _, i := range is {
			h.waitKey(locks[i].Key)
			if _, err := h.api.KV().Delete(locks[i].Key, nil); err != nil {
				t.Fatal(err)
			}
			if p := h.waitKey(locks[i].Key); p.Flags != lockmodel.LockFlagValue {
				t.Errorf("%s re-created with flags %#x", locks[i].Key, p.Flags)
			}
		}
	}
	watches(10)
	repaired(0, 1, 17, 150, 199, 2, 25, 3, 4, 5, 6, 7, 8, 9, 299)

	for _, l := range locks[100:] {
		if _, err := h.api.KV().Delete(lockmodel.RegistryKey(h.registry, lockmodel.KindLock, l.Name), nil); err != nil {
			t.Fatal(err)
		}
	}
	watches(1)
	repaired(0, 55, 99)

	for _, l := range locks[100:] {
		h.declareLock(l)
	}
	watches(10)
	time.Sleep(300 * time.Millisecond) // past the apply grace of the declarations written back
	repaired(100, 250, 7, 42)
}

// TestWatch_theDefaultCapGrowsWithTheFleet: with no -max-lock-watches, 1,000
// locks numbered under one prefix are watched by 10 queries
// (compliance.AutoLockWatches: one per 100 locks), so a change lists about
// 100 keys, not 1,000; a key deleted in one of them is re-created.
func TestWatch_theDefaultCapGrowsWithTheFleet(t *testing.T) {
	h := newHarness(t, agent)
	const n = 1000
	locks := make([]lockmodel.Lock, n)
	for i := range locks {
		locks[i] = h.declareLock(lockmodel.Lock{Name: h.name(fmt.Sprintf("l%d", i)), Prefix: fmt.Sprintf("%s/%d", h.prefix, i)})
	}
	c := h.startWith(startOpts{mode: compliance.ModeRepair})
	eventually(t, 20*time.Second, func() error {
		if got, want := c.LockWatches(), compliance.AutoLockWatches(n); got != want {
			return fmt.Errorf("%d lock key watches, want %d", got, want)
		}
		return nil
	})
	for _, i := range []int{0, 5, 123, 999} {
		h.waitKey(locks[i].Key)
		if _, err := h.api.KV().Delete(locks[i].Key, nil); err != nil {
			t.Fatal(err)
		}
		if p := h.waitKey(locks[i].Key); p.Flags != lockmodel.LockFlagValue {
			t.Errorf("%s re-created with flags %#x", locks[i].Key, p.Flags)
		}
	}
}
