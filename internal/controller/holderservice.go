package controller

import (
	"context"
	"errors"
	"sync"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Holder services: an agentless holder's instance (registered in the
// catalog, where nobody runs its check) stays passing in DNS until someone
// deregisters it. Its runner does on exit or loss, the next holder does
// before its command starts (consul.StaleHolderInstances); a holder killed
// or cut off with nobody waiting has neither. So when the controller
// (repair or enforce, leading) sees a holder of a lock with holder_service
// leave, or first looks at such a lock, it deregisters that lock's
// instances whose session has ended, on every node: one health query per
// such event, writes only for instances to remove. It needs the grant a
// worker has (service "<name>" write, node read on the holders' nodes,
// examples/controller/holder-services.hcl); without it the controller says
// so once per lock and leaves the instances to the next holder.
const holderRepairKind = "holder_service"

// holderReaper is the locks whose stale holder instances are to be looked
// for (set by the snapshot, taken by the reconcile that acts) and those
// the controller's token could not reap, reported once each.
type holderReaper struct {
	mu      sync.Mutex
	pending map[string]bool // lock name
	denied  map[string]bool // lock name, reported
}

// note marks lock l for a look when one of its holders left (or it is
// seen for the first time) and it declares holder_service.
func (r *holderReaper) note(l lockmodel.Lock, first bool, before, now map[string]bool) {
	if l.HolderService == nil {
		return
	}
	left := first
	for s := range before {
		left = left || !now[s]
	}
	if !left {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[string]bool{}
	}
	r.pending[l.Name] = true
}

// take returns the pending lock names and forgets them.
func (r *holderReaper) take() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = nil
	return p
}

// retry marks name pending again (a transient failure).
func (r *holderReaper) retry(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[string]bool{}
	}
	r.pending[name] = true
}

// deny reports whether a denial for name is new (and remembers it); allow
// forgets it once a look succeeds.
func (r *holderReaper) deny(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.denied == nil {
		r.denied = map[string]bool{}
	}
	isNew := !r.denied[name]
	r.denied[name] = true
	return isNew
}

func (r *holderReaper) allow(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.denied, name)
}

// reapHolderServices deregisters the instances of the pending locks whose
// session has ended (mine "": the controller holds nothing, so an
// instance is stale only once its session is gone). Called by the leading
// replica with the term's context, outside observe mode.
func (c *Controller) reapHolderServices(ctx context.Context) {
	if c.cfg.Mode == compliance.ModeObserve {
		return
	}
	names := c.reaper.take()
	for name := range names {
		c.mu.Lock()
		l, ok := c.cache.locks[name]
		c.mu.Unlock()
		if !ok || l.HolderService == nil {
			continue
		}
		stale, err := store.New(c.client).StaleHolderInstances(ctx, l.HolderService.Name, l.Name, l.Limit, "")
		failed := c.noteReapError(l, err)
		for _, in := range stale {
			if err := store.New(c.client).DeregisterHolderServiceCatalog(ctx, in.Node, in.ID); err != nil {
				failed = c.noteReapError(l, err) || failed
				continue
			}
			c.metrics.repairs.WithLabelValues(holderRepairKind).Inc()
			c.log.Info("former holder's instance deregistered", "lock", l.Name, "service", l.HolderService.Name,
				"service_id", in.ID, "node", in.Node)
		}
		if !failed {
			c.reaper.allow(l.Name)
		}
	}
}

// noteReapError logs err (nil: nothing) and reports whether there was
// one: a permission denial once per lock (the token lacks the grant: the
// next holder reaps), anything else each time, and the lock is looked at
// again at the next reconcile.
func (c *Controller) noteReapError(l lockmodel.Lock, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, consul.ErrPermissionDenied) {
		if c.reaper.deny(l.Name) {
			c.log.Warn("cannot remove former holders' instances of a holder service; the next holder removes them before its command starts",
				"lock", l.Name, "service", l.HolderService.Name, "error", err.Error(),
				"grant", `service "`+l.HolderService.Name+`" write and node read on the holders' nodes`)
		}
		return true
	}
	c.metrics.repairErrors.WithLabelValues(holderRepairKind).Inc()
	c.log.Error("removing former holders' instances failed; trying again at the next reconcile", "lock", l.Name, "error", err.Error())
	c.reaper.retry(l.Name)
	return true
}
