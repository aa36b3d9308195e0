package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// poll is one blocking query: it queries with f's options (f.Index is
// the index it waits on) and returns the answer's X-Consul-Index.
type poll func(ctx context.Context, f *consul.Follower) (uint64, error)

// watch runs p until ctx ends, following its index with a consul.Follower
// (the index rule, its reset after an error, the jittered back-off). A
// failing watch counts in c.failing until it answers again.
func (c *Controller) watch(ctx context.Context, name string, p poll) {
	if ctx.Err() != nil {
		return // consul.Follow queries once before it looks at ctx
	}
	f := &consul.Follower{Wait: c.cfg.WaitTime}
	failing := false
	defer func() {
		if failing {
			c.failing.Add(-1)
		}
	}()
	query := func(*api.QueryOptions) (struct{}, *api.QueryMeta, error) {
		last, err := p(ctx, f)
		return struct{}{}, &api.QueryMeta{LastIndex: last}, err
	}
	_ = consul.Follow(ctx, f, query, func(_ struct{}, err error) bool {
		switch {
		case err != nil:
			if !failing {
				failing = true
				c.failing.Add(1)
			}
			c.metrics.watchErrors.WithLabelValues(name).Inc()
			c.log.Error("watch failed", "watch", name, "error", err.Error(), "retry_in", f.RetryIn().String())
		case failing:
			failing = false
			c.failing.Add(-1)
			c.log.Info("watch recovered", "watch", name)
		}
		return true
	})
}

// unchanged reports whether an answer with index last is a wait that
// timed out without a change.
func unchanged(f *consul.Follower, last uint64) bool {
	return f.Index() != 0 && last == f.Index()
}

// filtered is the error for an answer Consul trimmed because the token may
// not read everything: absence then proves nothing.
func filtered(op, permission, resource string) error {
	return &consul.Error{Kind: consul.KindPermissionDenied, Op: op, StatusCode: 200, Permission: permission, Resource: resource,
		Message: "Consul filtered the results by ACLs"}
}

// listedRecord is one registry record as last listed: its version and what it
// decoded to (value is nil when it did not decode).
type listedRecord struct {
	index      uint64
	kind, name string
	value      any
}

// pollRegistry lists every declaration under the registry prefix. Like a
// lock key watch it reads the listing uncompressed and walks it beside
// the previous one (listKeys): only the records whose ModifyIndex moved
// are decoded. An answer that changed only run ledgers (every run-once
// attempt writes one) updates the run metrics and leaves the
// declarations, the lock watches and the verdicts alone.
func (c *Controller) pollRegistry(ctx context.Context, f *consul.Follower) (uint64, error) {
	prefix := c.cfg.RegistryPrefix + "/"
	covers := func(key string) bool { _, ok := recordKind(prefix, key); return ok }
	listed, changes, meta, err := listKeys(ctx, c.watcher, prefix, f, c.cache.registryListed, covers)
	if err != nil {
		return 0, consul.Classify("watch registry "+prefix, err)
	}
	if meta.filtered {
		if err := c.checkBlind(ctx, prefix, false); err != nil {
			return 0, err
		}
		return 0, filtered("watch registry "+prefix, "key:read", prefix)
	}
	if unchanged(f, meta.lastIndex) {
		// The wait timed out without a change; a token that was blind
		// may have been granted read meanwhile.
		if c.blind.Load() != nil {
			c.noteVisibility(ctx, prefix)
		}
		return meta.lastIndex, nil
	}
	c.cache.registryListed = listed
	declChanged, ledgersChanged := c.diffRecords(prefix, changes)
	c.noteVisibility(ctx, prefix)
	c.mu.Lock()
	synced := c.cache.registrySync
	c.mu.Unlock()
	if !declChanged && !ledgersChanged && synced {
		return meta.lastIndex, nil
	}
	locks := map[string]lockmodel.Lock{}
	ledgers := map[string]ledger.Ledger{}
	pauses := map[string]record.Pause{}
	if declChanged || !synced {
		profiles := map[string]lockmodel.Profile{}
		policies := map[string]record.ACLPolicySpec{}
		versions := map[string]uint64{}
		for _, r := range c.cache.records {
			switch v := r.value.(type) {
			case lockmodel.Lock:
				locks[r.name] = v
			case lockmodel.Profile:
				profiles[r.name] = v
			case record.ACLPolicySpec:
				policies[r.name] = v
			case ledger.Ledger:
				ledgers[r.name] = v
				continue
			case record.Pause:
				pauses[r.name] = v
				continue
			default:
				continue
			}
			versions[compliance.SettlingKey(r.kind, r.name)] = r.index
		}
		c.setDeclarations(locks, profiles, policies, versions, c.cfg.Clock.Now())
		c.trigger()
	} else {
		for _, r := range c.cache.records {
			switch v := r.value.(type) {
			case ledger.Ledger:
				ledgers[r.name] = v
			case record.Pause:
				pauses[r.name] = v
			}
		}
		c.mu.Lock()
		locks = c.cache.locks // replaced, never changed in place
		c.mu.Unlock()
	}
	c.metrics.runMeter.observe(ledgers, locks)
	c.metrics.pauseMeter.observe(pauses, locks)
	c.notify.observe(locks, ledgers, pauses)
	return meta.lastIndex, nil
}

// recordKind returns the kind of the registry record key (a key right
// under <registry>/<kind>/ of a kind the controller reads); false for any
// other key.
func recordKind(prefix, key string) (string, bool) {
	kind, name, ok := strings.Cut(strings.TrimPrefix(key, prefix), "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	switch kind {
	case lockmodel.KindLock, lockmodel.KindSessionDefaults, lockmodel.KindACLPolicy, lockmodel.KindRuns, lockmodel.KindPauses:
		return kind, true
	}
	return "", false
}

// declarationsVisible reports whether the registry listing holds a
// declaration (not only run ledgers or records that did not decode).
func (c *Controller) declarationsVisible() bool {
	for _, r := range c.cache.records {
		switch r.value.(type) {
		case lockmodel.Lock, lockmodel.Profile, record.ACLPolicySpec:
			return true
		}
	}
	return false
}

// checkBlind sets or clears c.blind. Seeing a declaration clears it;
// otherwise consul.CheckListable (one request) decides whether nothing
// visible may be a denial: it returns the *consul.BlindError then, or the
// check's own error.
func (c *Controller) checkBlind(ctx context.Context, prefix string, visible bool) error {
	var err error
	if !visible {
		err = c.watcher.CheckListable(ctx, prefix)
	}
	if b, ok := consul.IsBlind(err); ok {
		msg := b.Error()
		if c.blind.Swap(&msg) == nil {
			c.log.Warn("blind", "registry", prefix, "error", b.Error())
		}
		return b
	}
	if err != nil {
		return err
	}
	if c.blind.Swap(nil) != nil {
		c.log.Info("no longer blind", "registry", prefix)
	}
	return nil
}

// noteVisibility is checkBlind for an answer already applied: being
// blind is for /readyz to say, and a failed check is logged and tried
// again at the next answer.
func (c *Controller) noteVisibility(ctx context.Context, prefix string) {
	err := c.checkBlind(ctx, prefix, c.declarationsVisible())
	if _, blind := consul.IsBlind(err); err != nil && !blind && ctx.Err() == nil {
		c.log.Warn("cannot check whether the token may read the registry", "registry", prefix, "error", err.Error())
	}
}

// diffRecords applies the changes a registry answer brought to c.cache.records
// (owned by the registry watch), decoding the records written, and
// reports whether declarations and whether run ledgers changed.
func (c *Controller) diffRecords(prefix string, changes []keyChange) (declChanged, ledgersChanged bool) {
	for _, ch := range changes {
		kind, _ := recordKind(prefix, ch.key)
		if kind == lockmodel.KindRuns || kind == lockmodel.KindPauses {
			ledgersChanged = true // read only, for metrics: no reconcile
		} else {
			declChanged = true
		}
		if !ch.present {
			delete(c.cache.records, ch.key)
			continue
		}
		_, name, _ := strings.Cut(strings.TrimPrefix(ch.key, prefix), "/")
		c.cache.records[ch.key] = c.decodeRecord(ch.key, ch.entry, kind, name)
	}
	return declChanged, ledgersChanged
}

// decodeRecord decodes one registry record of kind; one that does not
// decode is reported (reportBadRecord) and kept without a value.
func (c *Controller) decodeRecord(key string, p lockmodel.KeyEntry, kind, name string) listedRecord {
	r := listedRecord{index: p.ModifyIndex, kind: kind, name: name}
	var err error
	switch kind {
	case lockmodel.KindLock:
		var l lockmodel.Lock
		if l, err = record.DecodeLockRecord(p.Value); err == nil {
			r.name, r.value = l.Name, l
		}
	case lockmodel.KindSessionDefaults:
		var s lockmodel.Profile
		if s, err = record.DecodeSessionProfileRecord(p.Value); err == nil {
			r.name, r.value = s.Name, s
		}
	case lockmodel.KindACLPolicy:
		var s record.ACLPolicySpec
		if s, err = record.DecodeACLPolicyRecord(p.Value); err == nil {
			r.name, r.value = s.Name, s
		}
	case lockmodel.KindRuns:
		// A run ledger: read only, for the run metrics (runs.go).
		var l ledger.Ledger
		if l, err = record.DecodeLedger(p.Value); err == nil {
			r.value = l
		}
	case lockmodel.KindPauses:
		// A pause record: read only, for consullock_lock_paused (pauses.go).
		var ps record.Pause
		if ps, err = record.DecodePauseRecord(p.Value); err == nil {
			r.name, r.value = ps.Lock, ps
		}
	}
	if err != nil {
		c.reportBadRecord(key, p.ModifyIndex, err)
	}
	return r
}

// reportBadRecord logs a declaration that cannot be read, once per version.
// It is ignored, never acted on.
func (c *Controller) reportBadRecord(key string, index uint64, err error) {
	c.mu.Lock()
	seen := c.cache.badRecords[key] == index
	c.cache.badRecords[key] = index
	c.mu.Unlock()
	if !seen {
		c.log.Error("declaration ignored", "record", key, "error", err.Error())
	}
}

// pollGroup lists the keys under one group's prefix and keeps the declared
// lock keys among them, and the contender keys of declared semaphores
// (listKeys: uncompressed, and only the keys that changed are decoded).
func (c *Controller) pollGroup(ctx context.Context, g *group, f *consul.Follower) (uint64, error) {
	listed, changes, meta, err := listKeys(ctx, c.watcher, g.prefix, f, g.listed, g.covers)
	if err != nil {
		return 0, consul.Classify(fmt.Sprintf("watch lock keys under %q", g.prefix), err)
	}
	if meta.filtered {
		c.markGroup(g, nil, false)
		g.listed = nil // what the controller knew of the group is gone
		return 0, filtered(fmt.Sprintf("watch lock keys under %q", g.prefix), "key:read", g.prefix)
	}
	if unchanged(f, meta.lastIndex) {
		return meta.lastIndex, nil
	}
	g.listed = listed
	c.applyChanges(g, changes)
	c.trigger()
	return meta.lastIndex, nil
}

// applyChanges records the changes a group's answer brought (its first
// answer: every key it keeps) and marks dirty the locks they touch.
func (c *Controller) applyChanges(g *group, changes []keyChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cache.groups[g.prefix] != g {
		return // replaced by a regrouping
	}
	if !g.synced {
		// The first answer since start or a failure: the group's keys
		// were unknown (and g.live empty: markGroup cleared it).
		c.diffKeys(g, nil, false, map[string]lockmodel.KeyEntry{}, true)
		g.live, g.synced = map[string]lockmodel.KeyEntry{}, true
	}
	for _, ch := range changes {
		if ch.present {
			g.live[ch.key] = ch.entry
		} else {
			delete(g.live, ch.key)
		}
		c.setKey(ch.key, ch.entry, ch.present)
	}
}

// covers reports whether the group keeps key from its listing: a declared
// lock key, or a key right under a semaphore's directory (its holder
// table and contender keys).
func (g *group) covers(key string) bool {
	i := strings.LastIndexByte(key, '/')
	return g.keys[key] || (i >= 0 && g.keys[key[:i+1]])
}

// markGroup records a group's answer (synced false: the watch failed and
// its keys are unknown) and marks dirty the locks whose keys it changed.
func (c *Controller) markGroup(g *group, live map[string]lockmodel.KeyEntry, synced bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cache.groups[g.prefix] != g {
		return // replaced by a regrouping
	}
	old, wasSynced := g.live, g.synced
	g.live, g.synced = live, synced
	c.diffKeys(g, old, wasSynced, live, synced)
}

// pollSessions lists every session.
func (c *Controller) pollSessions(ctx context.Context, f *consul.Follower) (uint64, error) {
	entries, meta, err := c.watcher.Session().List(f.Options(ctx))
	if err != nil {
		return 0, consul.Classify("watch sessions", err)
	}
	if meta.ResultsFilteredByACLs {
		// Holders on nodes the token may not read are missing: they are
		// not judged (Decide skips unseen sessions), but say so.
		c.log.Warn("some sessions are hidden by ACLs; their holders are not checked",
			"permission", "session:read", "hint", `grant session_prefix "" { policy = "read" }`)
	}
	if unchanged(f, meta.LastIndex) {
		return meta.LastIndex, nil
	}
	sessions := make(map[string]lockmodel.ObservedSession, len(entries))
	for _, e := range entries {
		sessions[e.ID] = store.ObservedSession(e)
	}
	c.mu.Lock()
	c.setSessions(sessions)
	c.mu.Unlock()
	c.trigger()
	return meta.LastIndex, nil
}

// pollPolicies lists the ACL policies and reads only the declared ones
// whose Hash changed since they were last read.
func (c *Controller) pollPolicies(ctx context.Context, f *consul.Follower) (uint64, error) {
	entries, meta, err := c.watcher.ACL().PolicyList(f.Options(ctx))
	if err != nil {
		e := consul.Classify("watch ACL policies", err)
		if e.Kind == consul.KindPermissionDenied && e.Permission == "" {
			e.Permission, e.Resource = "acl:read", "/v1/acl/policies"
		}
		c.mu.Lock()
		c.recon.view.policiesDirty = c.recon.view.policiesDirty || c.cache.policySync
		c.cache.policySync = false
		c.mu.Unlock()
		return 0, e
	}
	hashes := make(map[string]string, len(entries))
	for _, e := range entries {
		hashes[e.ID] = fmt.Sprintf("%x", e.Hash)
	}
	c.mu.Lock()
	changed := f.Index() == 0 || !sameHashes(hashes, c.cache.policyHashes)
	c.cache.policyHashes = hashes
	c.recon.view.policiesDirty = c.recon.view.policiesDirty || changed
	c.mu.Unlock()
	if err := c.fetchPolicies(ctx); err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.recon.view.policiesDirty = c.recon.view.policiesDirty || !c.cache.policySync
	c.cache.policySync = true
	c.mu.Unlock()
	if changed {
		c.trigger()
	}
	return meta.LastIndex, nil
}

func sameHashes(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// fetchPolicies reads the declared policies whose live Hash differs from
// the one last read, and drops those no longer listed.
func (c *Controller) fetchPolicies(ctx context.Context) error {
	c.mu.Lock()
	hashes := c.cache.policyHashes
	if hashes == nil {
		c.mu.Unlock()
		return nil // not listed yet
	}
	cur := c.cache.livePolicies
	var todo []string
	for _, spec := range c.cache.policies {
		if h, ok := hashes[spec.ID]; ok && spec.ID != "" {
			if lp, have := cur[spec.ID]; !have || lp.Hash != h {
				todo = append(todo, spec.ID)
			}
		}
	}
	c.mu.Unlock()
	sort.Strings(todo)
	fetched := map[string]compliance.LivePolicy{}
	for _, id := range todo {
		p, _, err := c.client.ACL().PolicyRead(id, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			e := consul.Classify("read ACL policy "+id, err)
			if e.Kind == consul.KindInvalidToken || e.Kind == consul.KindNotFound {
				continue // deleted between list and read: the next list says so
			}
			return e
		}
		if p == nil {
			continue
		}
		fetched[id] = compliance.LivePolicy{ID: p.ID, Name: p.Name, Rules: p.Rules, Description: p.Description,
			Datacenters: p.Datacenters, ModifyIndex: p.ModifyIndex, Hash: fmt.Sprintf("%x", p.Hash)}
	}
	c.mu.Lock()
	next := make(map[string]compliance.LivePolicy, len(c.cache.policyHashes))
	for id, lp := range c.cache.livePolicies {
		if _, listed := c.cache.policyHashes[id]; listed {
			next[id] = lp
		}
	}
	for id, lp := range fetched {
		next[id] = lp
	}
	if len(fetched) > 0 || len(next) != len(c.cache.livePolicies) || (c.cache.livePolicies == nil) != (next == nil) {
		c.recon.view.policiesDirty = true
	}
	c.cache.livePolicies = next
	c.mu.Unlock()
	return nil
}
