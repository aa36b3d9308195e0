package faults

import (
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// FaultPoolResize rewrites the semaphore's limit (Value: the new limit,
// another of Limits than the one in force).
const FaultPoolResize FaultKind = "pool-resize"

type poolResize struct{}

func (poolResize) Spec() FaultSpec { return FaultSpec{Name: FaultPoolResize, Weight: 1} }

func (poolResize) Draw(sc *scheduler, s *Step) {
	limits := sc.cfg.Limits
	next := sc.limit
	for len(limits) > 1 && next == sc.limit {
		next = limits[sc.intN(len(limits))]
	}
	sc.limit = next
	s.Target, s.Value = sc.cfg.Semaphore, next
}

func (poolResize) Inject(n *nemesis, sh shot) (func(), bool) { return nil, n.resize(sh.s.Value) }

// resize changes the semaphore's limit as the provider does: the
// declaration, then the Limit in the holder table by check-and-set,
// keeping the holders. A growth counts from before the first write, a
// shrink from after the last (the checker is never stricter than the
// system could be).
func (n *nemesis) resize(limit int) bool {
	h := n.sem
	lock := h.lock
	lock.Limit = limit
	rec, err := record.EncodeLockRecord(lock)
	if err != nil {
		n.fatalf("encoding the lock: %v", err)
	}
	n.mu.Lock()
	prev := n.limits[len(n.limits)-1].Limit
	if limit > prev {
		n.limits = append(n.limits, LimitChange{At: time.Now(), Limit: limit})
	}
	n.mu.Unlock()
	h.store.Mark("", fmt.Sprintf("nemesis: resize %s %d -> %d", lock.Name, prev, limit))
	key := lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, lock.Name)
	ok := n.admin(func(c *api.Client) error { _, err := c.KV().Put(&api.KVPair{Key: key, Value: rec}, nil); return err })
	ok = ok && n.admin(func(c *api.Client) error {
		kv := c.KV()
		for {
			pair, _, err := kv.Get(lock.Key, &api.QueryOptions{RequireConsistent: true})
			if err != nil || pair == nil {
				return err // deleted: the controller restores it from the declaration
			}
			value, err := lockmodel.SemaphoreValueWithLimit(pair.Value, limit)
			if err != nil {
				return err
			}
			p := *pair
			p.Value = value
			if done, _, err := kv.CAS(&p, nil); err != nil || done {
				return err
			}
		}
	})
	n.mu.Lock()
	if limit < prev {
		n.limits = append(n.limits, LimitChange{At: time.Now(), Limit: limit})
	}
	n.mu.Unlock()
	return ok
}
