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
			if g := c.groups[c.keyGroup[key]]; g == nil || g.live[key].Flags != lockmodel.LockFlagValue {
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
