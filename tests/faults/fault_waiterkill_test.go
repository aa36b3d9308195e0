package faults

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// FaultWaiterKill SIGKILLs the runner first in line in a queued mutex's
// waiter queue (Target: the lock), as a crash would: its session lives on
// until Consul ends it. With waiters = "queue" the line waits for that;
// with "handoff" the releasing holder hands the dead waiter the lock,
// which then waits for the session's end and its lock-delay. Either way
// the stall is at most 2 x ttl + lock_delay (WaiterKillStalls).
const FaultWaiterKill FaultKind = "waiter-kill"

type waiterKill struct{}

func (waiterKill) Spec() FaultSpec {
	return FaultSpec{Name: FaultWaiterKill, Weight: 2, Needs: func(cfg ScheduleConfig) bool { return len(cfg.Queued) > 0 }}
}

func (waiterKill) Draw(sc *scheduler, s *Step) { s.Target = sc.cfg.Queued[sc.intN(len(sc.cfg.Queued))] }

func (waiterKill) Inject(n *nemesis, sh shot) (func(), bool) {
	return nil, n.killFirstWaiter(sh.i, n.target(sh.s))
}

// killFirstWaiter SIGKILLs the runner first in line in h's waiter queue
// (step i), as a crash would: its session lives on until Consul ends it.
// The line is read as a waiter reads it (a consistent listing, the
// holder's entry left out, lockmodel.QueueOrder) and its first entry's
// value names the runner's pid; only a worker's runner is killed (not an
// OpenTofu apply's provider, nor a skewed runner). Jobs are short and the
// line is often empty: the queue is watched (a blocking listing) for up to
// 3s until a worker stands first; false when none did. The store mark
// says which cluster faults were in force (WaiterKillStalls judges only
// the stalls of kills with none). The runner may have taken the lock
// meanwhile: then a holder was killed, under the same bound.
func (n *nemesis) killFirstWaiter(i int, h *harness) bool {
	var index uint64
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && h.ctx.Err() == nil; {
		var pairs api.KVPairs
		holder := ""
		if !n.admin(func(c *api.Client) error {
			var meta *api.QueryMeta
			var err error
			pairs, meta, err = c.KV().List(lockmodel.WaiterQueuePrefix(h.lock), &api.QueryOptions{RequireConsistent: true, WaitIndex: index, WaitTime: time.Until(deadline)})
			if err != nil {
				return err
			}
			index = meta.LastIndex
			pair, _, err := c.KV().Get(h.lock.Key, &api.QueryOptions{RequireConsistent: true})
			if err == nil && pair != nil {
				holder = pair.Session
			}
			return err
		}) {
			return false
		}
		line, _ := lockmodel.QueueOrder(lockproto.QueueEntries(pairs), holder)
		if len(line) == 0 {
			continue
		}
		var value lockmodel.HolderValue
		for _, p := range pairs {
			if p.Key == line[0].Key {
				_ = json.Unmarshal(p.Value, &value)
			}
		}
		for _, w := range h.workers {
			w.mu.Lock()
			if w.cmd != nil && w.cmd.Process.Pid == value.PID {
				h.store.Mark(w.id, fmt.Sprintf("%s (session %s, runner pid %d); %s: %s", WaiterKillNote, line[0].Session, value.PID, FaultsInForceNote, n.clusterFaultsInForce(i)))
				_ = w.cmd.Process.Kill()
				w.mu.Unlock()
				return true
			}
			w.mu.Unlock()
		}
	}
	return false
}
