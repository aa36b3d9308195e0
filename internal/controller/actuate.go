package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Repair back-off: a repair that failed (Consul refused or failed the
// write, or the reads before it) is tried again after
// consul.Backoff(repairMinBackoff, repairMaxBackoff, failures), jittered,
// and not before, however often the watches answer meanwhile. The cap
// bounds how late a repair comes once Consul answers again (after an
// outage, or a permission granted), and is well below the 10 minutes over
// which ConsulLockRepairErrors reads consullock_repair_errors_total: a
// repair that keeps failing keeps the alert firing.
const (
	repairMinBackoff = time.Second
	repairMaxBackoff = time.Minute
)

// repairBackoff is the pause after a repair's failures-th consecutive
// failure.
func repairBackoff(failures int) time.Duration {
	return consul.Jitter(consul.Backoff(repairMinBackoff, repairMaxBackoff, failures))
}

// retry is a failed repair's back-off: its consecutive failures, and when
// it is tried again.
type retry struct {
	failures int
	at       time.Time
}

// actOn carries out, in term t, the decisions to act on, except the
// failed repairs whose back-off has not passed, and returns next moved to
// the first retry. A repair that succeeds, or is no longer needed, forgets
// its failures.
func (c *Controller) actOn(t *term, ds []compliance.Decision, next time.Time) time.Time {
	retries := map[string]retry{}
	for _, d := range ds {
		if !d.Act {
			continue
		}
		id := d.ID()
		r, failed := c.recon.retries[id]
		switch {
		case t.ctx.Err() != nil || !c.acting.Load():
		case failed && c.cfg.Clock.Now().Before(r.at):
		default:
			pause := c.act(t, d, r.failures+1)
			if pause == 0 {
				continue
			}
			r, failed = retry{failures: r.failures + 1, at: c.cfg.Clock.Now().Add(pause)}, true
		}
		if failed {
			retries[id] = r
			next = earliest(next, r.at)
		}
	}
	c.recon.retries = retries
	return next
}

// act carries out one decision in term t. Watches may lag behind Consul,
// so it first reads everything the decision rests on again with
// ?consistent (the declaration included: Terraform removes a declaration
// before the object), decides again on that, and writes only what the
// fresh decision still asks for, fenced by the term (see leader.go).
// failures counts this attempt and the failed ones before it; after a
// failure act returns the pause before the next attempt (0 when it did
// not fail).
func (c *Controller) act(t *term, d compliance.Decision, failures int) (retryIn time.Duration) {
	log := c.log.With(logAttrs(d)...).With("kind", string(d.Kind))
	fresh, ok, err := c.recheck(t.ctx, d)
	if t.ctx.Err() != nil {
		log.Info("repair abandoned: this replica no longer leads")
		return 0
	}
	if errors.Is(err, errDeclarationChanging) {
		log.Info("repair deferred: the declaration has just changed; the apply that wrote it is given time to write the object",
			"apply_grace", c.cfg.ApplyGrace.String())
		return 0
	}
	if err != nil {
		c.metrics.repairErrors.WithLabelValues(string(d.Kind)).Inc()
		retryIn = repairBackoff(failures)
		log.Error("repair skipped: re-reading before acting failed", "error", err.Error(), "failures", failures, "retry_in", retryIn.String())
		return retryIn
	}
	if !ok {
		log.Info("repair skipped: a consistent read shows it is no longer needed")
		return 0
	}
	if !c.acting.Load() {
		return 0
	}
	log.Info("repair writing") // the nemesis's checker: no write begun after leadership passed on
	done, err := c.execute(t, fresh)
	switch {
	case errors.Is(err, errNotLeader) || errors.Is(err, store.ErrFenceLost) || t.ctx.Err() != nil:
		log.Info("repair abandoned: this replica no longer leads")
	case err != nil:
		c.metrics.repairErrors.WithLabelValues(string(d.Kind)).Inc()
		retryIn = repairBackoff(failures)
		log.Error("repair failed", "error", err.Error(), "failures", failures, "retry_in", retryIn.String())
		return retryIn
	case !done:
		log.Info("repair skipped: the object changed while acting; the next answer of the watch decides again")
	default:
		c.metrics.repairs.WithLabelValues(string(d.Kind)).Inc()
		log.Info("repaired", "detail", fresh.Detail)
	}
	return 0
}

// errDeclarationChanging is recheck's answer when the declaration read
// consistently is not the settled version the decision rests on.
var errDeclarationChanging = errors.New("the declaration is being changed")

// recheck re-reads the inputs of d consistently (the declaration: once per
// repair, see readDeclaration) and decides again. A
// declaration newer than the one the watch listed, or listed within the
// apply grace, belongs to an apply in progress: errDeclarationChanging.
func (c *Controller) recheck(ctx context.Context, d compliance.Decision) (compliance.Decision, bool, error) {
	q := (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
	st := compliance.State{
		Locks: map[string]lockmodel.Lock{}, Profiles: map[string]lockmodel.Profile{},
		Policies: map[string]record.ACLPolicySpec{}, Keys: map[string]lockmodel.KeyEntry{},
		Sessions: map[string]lockmodel.ObservedSession{}, HeldSince: map[compliance.LockSession]time.Time{}, Now: c.cfg.Clock.Now(),
	}
	if d.Policy != "" {
		return c.recheckPolicy(ctx, d, st, q)
	}
	return c.recheckLock(ctx, d, st, q)
}

// settledDeclaration reads the declaration record of kind and name
// (found false: gone); errDeclarationChanging while an apply may still be
// writing it (declarationSettled).
func (c *Controller) settledDeclaration(ctx context.Context, kind, name string, now time.Time) (store.StoredRecord, bool, error) {
	rec, found, err := c.readDeclaration(ctx, kind, name)
	if err != nil || !found {
		return store.StoredRecord{}, false, err
	}
	if !c.declarationSettled(compliance.SettlingKey(kind, name), rec.ModifyIndex, now) {
		return store.StoredRecord{}, false, errDeclarationChanging
	}
	return rec, true, nil
}

// recheckPolicy is recheck for a decision about an ACL policy.
func (c *Controller) recheckPolicy(ctx context.Context, d compliance.Decision, st compliance.State, q *api.QueryOptions) (compliance.Decision, bool, error) {
	rec, found, err := c.settledDeclaration(ctx, lockmodel.KindACLPolicy, d.Policy, st.Now)
	if err != nil || !found {
		return compliance.Decision{}, false, err
	}
	spec, err := record.DecodeACLPolicyRecord(rec.Value)
	if err != nil {
		return compliance.Decision{}, false, err
	}
	st.Policies[spec.Name] = spec
	st.LivePolicies = map[string]compliance.LivePolicy{}
	if spec.ID != "" {
		p, _, err := c.client.ACL().PolicyRead(spec.ID, q)
		if err != nil {
			if e := c.client.Classify(ctx, "read ACL policy "+spec.Name, err); e.Kind != consul.KindNotFound {
				return compliance.Decision{}, false, e
			}
		} else if p != nil {
			st.LivePolicies[p.ID] = compliance.LivePolicy{ID: p.ID, Name: p.Name, Rules: p.Rules, Description: p.Description,
				Datacenters: p.Datacenters, ModifyIndex: p.ModifyIndex}
		}
	}
	return pick(compliance.Decide(st, c.cfg.Mode), d)
}

// recheckLock is recheck for a decision about a lock (and, with
// d.Session, one of its holders).
func (c *Controller) recheckLock(ctx context.Context, d compliance.Decision, st compliance.State, q *api.QueryOptions) (compliance.Decision, bool, error) {
	rec, found, err := c.settledDeclaration(ctx, lockmodel.KindLock, d.Lock, st.Now)
	if err != nil || !found {
		return compliance.Decision{}, false, err
	}
	l, err := record.DecodeLockRecord(rec.Value)
	if err != nil {
		return compliance.Decision{}, false, err
	}
	if l, err = l.Normalize(); err != nil {
		return compliance.Decision{}, false, err
	}
	st.Locks[l.Name] = l
	pair, _, err := c.client.KV().Get(l.Key, q)
	if err != nil {
		return compliance.Decision{}, false, consul.Classify("read lock key "+l.Key, err)
	}
	if pair != nil {
		st.Keys[l.Key] = lockmodel.KeyEntry{Flags: pair.Flags, Value: pair.Value, Session: pair.Session, LockIndex: pair.LockIndex, ModifyIndex: pair.ModifyIndex}
	}
	if d.Session != "" {
		if ok, err := c.recheckHolder(ctx, d, l, pair, &st, q); err != nil || !ok {
			return compliance.Decision{}, false, err
		}
	}
	return pick(compliance.Decide(st, c.cfg.Mode), d)
}

// recheckHolder reads into st what deciding on d.Session's hold of l
// needs: the profile l names, the session (false: gone), the hold's value
// and when it began.
func (c *Controller) recheckHolder(ctx context.Context, d compliance.Decision, l lockmodel.Lock, pair *api.KVPair, st *compliance.State, q *api.QueryOptions) (bool, error) {
	reg := store.New(c.client).Registry(c.cfg.RegistryPrefix)
	if l.SessionDefaults != "" {
		prec, found, err := reg.Get(ctx, lockmodel.KindSessionDefaults, l.SessionDefaults)
		if err != nil {
			return false, err
		}
		if found {
			p, err := record.DecodeSessionProfileRecord(prec.Value)
			if err != nil {
				return false, err
			}
			st.Profiles[p.Name] = p
			st.ProfileIndex = map[string]uint64{p.Name: prec.ModifyIndex}
		}
	}
	se, _, err := c.client.Session().Info(d.Session, q)
	if err != nil {
		return false, consul.Classify("read session "+d.Session, err)
	}
	if se == nil {
		return false, nil // already gone
	}
	st.Sessions[se.ID] = store.ObservedSession(se)
	// The hold's value, read now: the mutex key's, or the holder's
	// contender key's for a semaphore.
	var value []byte
	if !l.IsSemaphore() {
		if pair != nil && pair.Session == d.Session {
			value = pair.Value
		}
	} else {
		cp, _, err := c.client.KV().Get(semaphoreDir(l)+d.Session, q)
		if err != nil {
			return false, consul.Classify("read semaphore contender key "+semaphoreDir(l)+d.Session, err)
		}
		if cp != nil {
			// Decide's holders (lockmodel.Holders) need it too: a
			// listed session holds a slot only while it holds it.
			st.Keys[cp.Key] = lockmodel.KeyEntry{Flags: cp.Flags, Value: cp.Value, Session: cp.Session, LockIndex: cp.LockIndex, ModifyIndex: cp.ModifyIndex}
			if cp.Session == d.Session {
				value = cp.Value
			}
		}
	}
	c.mu.Lock()
	h := compliance.LockSession{Lock: l.Name, Session: d.Session}
	if hold, ok := c.recon.heldSince[h]; ok && (l.IsSemaphore() || pair == nil || hold.Acquisition == pair.LockIndex) {
		st.HeldSince[h], _ = lockmodel.HoldStart(value, hold.Evidence(), st.Now)
	}
	st.ProfileSwitched = map[string]uint64{l.Name: c.cache.profileSwitched[l.Name]}
	c.mu.Unlock()
	return true, nil
}

// pick finds the fresh decision that corresponds to d.
func pick(fresh []compliance.Decision, d compliance.Decision) (compliance.Decision, bool, error) {
	for _, f := range fresh {
		if f.Kind == d.Kind && f.Act && f.Session == d.Session {
			return f, true, nil
		}
	}
	return compliance.Decision{}, false, nil
}

// execute performs one write in term t, within LeaderGrace. done is false
// when a check-and-set lost. Lock key writes are fenced by the term's hold
// on the leader key; the others are preceded by a consistent read that
// confirms it (see leader.go for what remains).
func (c *Controller) execute(t *term, d compliance.Decision) (bool, error) {
	ctx, cancel := context.WithTimeout(t.ctx, LeaderGrace)
	defer cancel()
	w := (&api.WriteOptions{}).WithContext(ctx)
	switch d.Kind {
	case compliance.KindRecreateKey, compliance.KindRestoreFlags, compliance.KindRestoreLimit:
		ok, err := store.New(c.client).FencedCAS(ctx, t.fence, &api.KVPair{Key: d.Key, Flags: d.Flags, Value: d.Value, ModifyIndex: d.ModifyIndex})
		if err != nil {
			return false, fmt.Errorf("%s: %w", d.Kind, err)
		}
		return ok, nil
	case compliance.KindRestoreACLRules:
		if err := c.confirmLeader(ctx, t); err != nil {
			return false, err
		}
		p, _, err := c.client.ACL().PolicyRead(d.PolicyID, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			return false, c.client.Classify(ctx, "read ACL policy "+d.Policy, err)
		}
		if p == nil || p.ModifyIndex != d.ModifyIndex {
			return false, nil
		}
		// Consul has no check-and-set for policies: read again right
		// before writing and give up if anyone wrote in between.
		upd := &api.ACLPolicy{ID: p.ID, Name: p.Name, Description: p.Description, Datacenters: p.Datacenters, Rules: d.Rules}
		if _, _, err := c.client.ACL().PolicyUpdate(upd, w); err != nil {
			e := c.client.Classify(ctx, "update ACL policy "+d.Policy, err)
			if e.Kind == consul.KindPermissionDenied && e.Resource == "" {
				// Consul names no resource for ACL permissions.
				if e.Permission == "" {
					e.Permission = "acl:write"
				}
				e.Resource = "ACL policy " + d.Policy
			}
			return false, e
		}
		return true, nil
	case compliance.KindEndSession:
		if err := c.confirmLeader(ctx, t); err != nil {
			return false, err
		}
		if _, err := c.client.Session().Destroy(d.Session, w); err != nil {
			return false, consul.Classify("destroy session "+d.Session, err)
		}
		return true, nil
	}
	return false, fmt.Errorf("no actuator for %s", d.Kind)
}
