package controller

import (
	"context"
	"maps"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// confirmDrift applies Pending to the drift findings of one reconcile that
// are not reported yet. The watches answer independently, so this replica
// may see an apply's live write (the policy watch) before the declaration
// write that preceded it (the registry watch): the old declaration then
// looks violated by the new object. Before such a finding is logged,
// counted or acted on, its declaration is read once with ?consistent; one
// newer than the version judged makes the object pending, and the apply
// grace starts from now, as if the registry watch had just listed it.
//
// The acts of the same reconcile take these reads instead of reading the
// declarations again (see declRead).
//
// It returns the findings left, the pending declarations (settling plus
// those found here) and the next time a grace ends (next, or earlier).
// A finding whose declaration cannot be read is kept: the read failing
// proves nothing about an apply.
func (c *Controller) confirmDrift(ctx context.Context, ds []compliance.Decision, settling map[string]bool, next, now time.Time) ([]compliance.Decision, map[string]bool, time.Time) {
	var check []string
	judged := map[string]uint64{}
	c.mu.Lock()
	for _, d := range ds {
		id := d.SettlingKey()
		if !d.IsDrift() || settling[id] {
			continue
		}
		if _, reported := c.recon.reported[d.ID()]; reported {
			continue
		}
		if _, ok := judged[id]; !ok {
			judged[id] = c.cache.declSeen[id].index
			check = append(check, id)
		}
	}
	c.mu.Unlock()
	c.recon.declReads = map[string]declRead{}
	if len(check) == 0 {
		return ds, settling, next
	}
	reg := store.New(c.client).Registry(c.cfg.RegistryPrefix)
	pending := map[string]bool{}
	for _, id := range check {
		kind, name := lockmodel.KindLock, ""
		if d := findDecl(ds, id); d.Lock != "" {
			name = d.Lock
		} else {
			kind, name = lockmodel.KindACLPolicy, d.Policy
		}
		rec, found, err := reg.Get(ctx, kind, name)
		if err != nil {
			c.log.Error("reading a declaration before reporting drift failed; reported as drift", "declaration", id, "error", err.Error())
			continue
		}
		c.recon.declReads[id] = declRead{rec: rec, found: found, at: c.cfg.Clock.Now()}
		var current uint64
		if found {
			current = rec.ModifyIndex
		}
		if !compliance.Pending(judged[id], current, time.Time{}, now, c.cfg.ApplyGrace) {
			continue
		}
		pending[id] = true
		c.mu.Lock()
		if v, ok := c.cache.declSeen[id]; !ok || v.index == judged[id] {
			c.cache.declSeen[id] = declVersion{index: current, changed: now}
		}
		c.mu.Unlock()
		c.log.Debug("difference pending: the declaration changed after the version judged; the apply that wrote it is given time to write the object",
			"declaration", id, "judged_index", judged[id], "current_index", current, "apply_grace", c.cfg.ApplyGrace.String())
	}
	if len(pending) == 0 {
		return ds, settling, next
	}
	kept := ds[:0:0]
	for _, d := range ds {
		if !pending[d.SettlingKey()] {
			kept = append(kept, d)
		}
	}
	all := maps.Clone(settling)
	if all == nil {
		all = map[string]bool{}
	}
	maps.Copy(all, pending)
	if end := now.Add(c.cfg.ApplyGrace); next.IsZero() || end.Before(next) {
		next = end
	}
	return kept, all, next
}

// declReadReuse is how long a declaration read by confirmDrift stands for
// the act's own consistent read (act, recheck). The first act follows the
// read at once; a later act of the same reconcile, after earlier writes
// that took longer, reads again, so the time from the declaration's read
// to the write stays what one read before the write gives.
const declReadReuse = 100 * time.Millisecond

// declRead is one declaration read with ?consistent by confirmDrift.
type declRead struct {
	rec   store.StoredRecord
	found bool
	at    time.Time
}

// readDeclaration returns the declaration kind/name read with ?consistent:
// confirmDrift's read of it in this reconcile when it is younger than
// declReadReuse, else a new read. One repair then reads its declaration
// once, not twice.
func (c *Controller) readDeclaration(ctx context.Context, kind, name string) (store.StoredRecord, bool, error) {
	if r, ok := c.recon.declReads[compliance.SettlingKey(kind, name)]; ok && c.cfg.Clock.Now().Sub(r.at) < declReadReuse {
		return r.rec, r.found, nil
	}
	return store.New(c.client).Registry(c.cfg.RegistryPrefix).Get(ctx, kind, name)
}

// findDecl returns the first decision about the declaration id.
func findDecl(ds []compliance.Decision, id string) compliance.Decision {
	for _, d := range ds {
		if d.SettlingKey() == id {
			return d
		}
	}
	return compliance.Decision{}
}
