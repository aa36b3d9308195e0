package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// Backoff bounds for failed watches.
const (
	watchMinBackoff = 200 * time.Millisecond
	watchMaxBackoff = 15 * time.Second
)

// poll is one blocking query: it waits for a change after index and
// returns the new index.
type poll func(ctx context.Context, index uint64) (uint64, error)

// watch runs p until ctx ends. After an error it waits with jittered
// exponential backoff and starts again from index 0: the agent may have
// restarted with a fresh (lower) raft index, and blocking on an index it
// will not reach for a long time would hide every change. An index that
// goes backwards in a successful answer is reset the same way.
func (c *Controller) watch(ctx context.Context, name string, p poll) {
	var index uint64
	failures := 0
	defer func() {
		if failures > 0 {
			c.failing.Add(-1)
		}
	}()
	for ctx.Err() == nil {
		next, err := p(ctx, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if failures == 0 {
				c.failing.Add(1)
			}
			failures++
			index = 0
			c.metrics.watchErrors.WithLabelValues(name).Inc()
			wait := backoff(failures)
			c.log.Error("watch failed", "watch", name, "error", err.Error(), "retry_in", wait.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		if failures > 0 {
			c.failing.Add(-1)
			c.log.Info("watch recovered", "watch", name)
		}
		failures = 0
		switch {
		case next < index:
			index = 0 // Consul's index went backwards: start over
		case next == 0:
			index = 1
		default:
			index = next
		}
	}
}

// backoff is exponential from watchMinBackoff to watchMaxBackoff, each step
// jittered between half and all of it.
func backoff(failures int) time.Duration {
	return consul.Jitter(consul.Backoff(watchMinBackoff, watchMaxBackoff, failures))
}

func (c *Controller) query(ctx context.Context, index uint64) *api.QueryOptions {
	return (&api.QueryOptions{WaitIndex: index, WaitTime: c.cfg.WaitTime}).WithContext(ctx)
}

// filtered is the error for an answer Consul trimmed because the token may
// not read everything: absence then proves nothing.
func filtered(op, permission, resource string) error {
	return &consul.Error{Kind: consul.KindPermissionDenied, Op: op, StatusCode: 200, Permission: permission, Resource: resource,
		Message: "Consul filtered the results by ACLs"}
}

// pollRegistry lists every declaration under the registry prefix.
func (c *Controller) pollRegistry(ctx context.Context, index uint64) (uint64, error) {
	prefix := c.cfg.RegistryPrefix + "/"
	pairs, meta, err := c.watcher.KV().List(prefix, c.query(ctx, index))
	if err != nil {
		return 0, consul.Classify("watch registry "+prefix, err)
	}
	if meta.ResultsFilteredByACLs {
		return 0, filtered("watch registry "+prefix, "key:read", prefix)
	}
	if index != 0 && meta.LastIndex == index {
		return index, nil // wait timed out without a change
	}
	locks := map[string]lockmodel.Lock{}
	profiles := map[string]lockmodel.SessionProfile{}
	policies := map[string]lockmodel.ACLPolicySpec{}
	versions := map[string]uint64{}
	ledgers := map[string]lockmodel.Ledger{}
	for _, p := range pairs {
		rest := strings.TrimPrefix(p.Key, prefix)
		kind, name, ok := strings.Cut(rest, "/")
		if !ok || name == "" || strings.Contains(name, "/") {
			continue
		}
		var derr error
		switch kind {
		case lockmodel.KindLock:
			var l lockmodel.Lock
			if l, derr = lockmodel.DecodeLockRecord(p.Value); derr == nil {
				locks[l.Name] = l
				versions[declID(kind, l.Name)] = p.ModifyIndex
			}
		case lockmodel.KindSessionDefaults:
			var s lockmodel.SessionProfile
			if s, derr = lockmodel.DecodeSessionProfileRecord(p.Value); derr == nil {
				profiles[s.Name] = s
				versions[declID(kind, s.Name)] = p.ModifyIndex
			}
		case lockmodel.KindACLPolicy:
			var s lockmodel.ACLPolicySpec
			if s, derr = lockmodel.DecodeACLPolicyRecord(p.Value); derr == nil {
				policies[s.Name] = s
				versions[declID(kind, s.Name)] = p.ModifyIndex
			}
		case lockmodel.KindRuns:
			// A run ledger: read only, for the run metrics (runs.go).
			var l lockmodel.Ledger
			if l, derr = lockmodel.DecodeLedger(p.Value); derr == nil {
				ledgers[name] = l
			}
		default:
			continue
		}
		if derr != nil {
			c.reportBadRecord(p, derr)
		}
	}
	c.setDeclarations(locks, profiles, policies, versions)
	c.metrics.runMeter.observe(ledgers, locks)
	c.trigger()
	return meta.LastIndex, nil
}

// reportBadRecord logs a declaration that cannot be read, once per version.
// It is ignored, never acted on.
func (c *Controller) reportBadRecord(p *api.KVPair, err error) {
	c.mu.Lock()
	seen := c.badRecords[p.Key] == p.ModifyIndex
	c.badRecords[p.Key] = p.ModifyIndex
	c.mu.Unlock()
	if !seen {
		c.log.Error("declaration ignored", "record", p.Key, "error", err.Error())
	}
}

// pollGroup lists the keys under one group's prefix and keeps the declared
// lock keys among them, and the contender keys of declared semaphores.
func (c *Controller) pollGroup(ctx context.Context, g *group, index uint64) (uint64, error) {
	pairs, meta, err := c.watcher.KV().List(g.prefix, c.query(ctx, index))
	if err != nil {
		return 0, consul.Classify(fmt.Sprintf("watch lock keys under %q", g.prefix), err)
	}
	if meta.ResultsFilteredByACLs {
		c.markGroup(g, nil, false)
		return 0, filtered(fmt.Sprintf("watch lock keys under %q", g.prefix), "key:read", g.prefix)
	}
	if index != 0 && meta.LastIndex == index {
		return index, nil
	}
	live := make(map[string]LiveKey, len(g.keys))
	for _, p := range pairs {
		// A declared lock key, or a key right under a semaphore's
		// directory (its holder table and contender keys).
		if i := strings.LastIndexByte(p.Key, '/'); g.keys[p.Key] || (i >= 0 && g.keys[p.Key[:i+1]]) {
			live[p.Key] = LiveKey{Flags: p.Flags, Value: p.Value, Session: p.Session, LockIndex: p.LockIndex, ModifyIndex: p.ModifyIndex}
		}
	}
	c.markGroup(g, live, true)
	c.trigger()
	return meta.LastIndex, nil
}

func (c *Controller) markGroup(g *group, live map[string]LiveKey, synced bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups[g.prefix] != g {
		return // replaced by a regrouping
	}
	g.live, g.synced = live, synced
}

// pollSessions lists every session.
func (c *Controller) pollSessions(ctx context.Context, index uint64) (uint64, error) {
	entries, meta, err := c.watcher.Session().List(c.query(ctx, index))
	if err != nil {
		return 0, consul.Classify("watch sessions", err)
	}
	if meta.ResultsFilteredByACLs {
		// Holders on nodes the token may not read are missing: they are
		// not judged (Decide skips unseen sessions), but say so.
		c.log.Warn("some sessions are hidden by ACLs; their holders are not checked",
			"permission", "session:read", "hint", `grant session_prefix "" { policy = "read" }`)
	}
	if index != 0 && meta.LastIndex == index {
		return index, nil
	}
	sessions := make(map[string]lockmodel.ObservedSession, len(entries))
	for _, e := range entries {
		sessions[e.ID] = observedSession(e)
	}
	c.mu.Lock()
	c.sessions = sessions
	c.mu.Unlock()
	c.trigger()
	return meta.LastIndex, nil
}

func observedSession(e *api.SessionEntry) lockmodel.ObservedSession {
	ttl, _ := lockmodel.ParseConsulTTL(e.TTL)
	node, svc := consul.SessionChecks(e)
	return lockmodel.ObservedSession{
		ID: e.ID, Name: e.Name, Node: e.Node, TTL: ttl, LockDelay: e.LockDelay,
		Behavior: lockmodel.Behavior(e.Behavior), NodeChecks: node, ServiceChecks: svc, CreateIndex: e.CreateIndex,
	}
}

// pollPolicies lists the ACL policies and reads only the declared ones
// whose Hash changed since they were last read.
func (c *Controller) pollPolicies(ctx context.Context, index uint64) (uint64, error) {
	entries, meta, err := c.watcher.ACL().PolicyList(c.query(ctx, index))
	if err != nil {
		e := consul.Classify("watch ACL policies", err)
		if e.Kind == consul.KindPermissionDenied && e.Permission == "" {
			e.Permission, e.Resource = "acl:read", "/v1/acl/policies"
		}
		c.mu.Lock()
		c.policySync = false
		c.mu.Unlock()
		return 0, e
	}
	hashes := make(map[string]string, len(entries))
	for _, e := range entries {
		hashes[e.ID] = fmt.Sprintf("%x", e.Hash)
	}
	c.mu.Lock()
	changed := index == 0 || !sameHashes(hashes, c.policyHashes)
	c.policyHashes = hashes
	c.mu.Unlock()
	if err := c.fetchPolicies(ctx); err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.policySync = true
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
	hashes := c.policyHashes
	if hashes == nil {
		c.mu.Unlock()
		return nil // not listed yet
	}
	cur := c.livePolicies
	var todo []string
	for _, spec := range c.policies {
		if h, ok := hashes[spec.ID]; ok && spec.ID != "" {
			if lp, have := cur[spec.ID]; !have || lp.hash != h {
				todo = append(todo, spec.ID)
			}
		}
	}
	c.mu.Unlock()
	sort.Strings(todo)
	fetched := map[string]LivePolicy{}
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
		fetched[id] = LivePolicy{ID: p.ID, Name: p.Name, Rules: p.Rules, Description: p.Description,
			Datacenters: p.Datacenters, ModifyIndex: p.ModifyIndex, hash: fmt.Sprintf("%x", p.Hash)}
	}
	c.mu.Lock()
	next := make(map[string]LivePolicy, len(c.policyHashes))
	for id, lp := range c.livePolicies {
		if _, listed := c.policyHashes[id]; listed {
			next[id] = lp
		}
	}
	for id, lp := range fetched {
		next[id] = lp
	}
	c.livePolicies = next
	c.mu.Unlock()
	return nil
}

// GroupKeys assigns each lock key to the prefix of the blocking query that
// watches it. Such a query lists every key under its prefix, values
// included, and answers again on every write there, so a prefix must cover
// its locks and as little else as possible:
//
//   - keys that share a first path segment share one watch, on the deepest
//     path they all share ("t/1/locks/a/.lock" and "t/1/locks/b/.lock" ->
//     "t/1/locks/"); a key alone in its first segment is watched by itself
//     ("svc/job/.lock" lists that key only, not the semaphore contenders
//     or application keys beside it);
//   - only when that gives more than maxGroups watches are groups merged,
//     into watches on the longest prefix their keys share: groups are
//     first taken together by their first character and then split again
//     (largest first) as long as the count stays within maxGroups. Groups
//     whose keys begin with different characters share no prefix but ""
//     (the whole KV store) and are never merged: with more distinct first
//     characters than maxGroups there is one watch per first character,
//     more than maxGroups (see WatchCapExceeded).
//
// The number of watches therefore does not grow with the number of locks.
func GroupKeys(keys []string, maxGroups int) map[string]string {
	maxGroups = max(maxGroups, 1)
	bySegment := map[string][]string{}
	for _, k := range keys {
		seg := k
		if i := strings.IndexByte(k, '/'); i >= 0 {
			seg = k[:i+1]
		}
		bySegment[seg] = append(bySegment[seg], k)
	}
	base := make(map[string][]string, len(bySegment)) // watch prefix -> keys
	for _, ks := range bySegment {
		p := ks[0]
		if len(ks) > 1 {
			p = commonPrefix(ks)
			p = p[:strings.LastIndexByte(p, '/')+1] // they share the first segment
		}
		base[p] = append(base[p], ks...)
	}
	var watches [][]string // each: the sorted base prefixes one watch covers
	if len(base) > maxGroups {
		watches = mergeGroups(sortedKeys(base), maxGroups)
	} else {
		for _, p := range sortedKeys(base) {
			watches = append(watches, []string{p})
		}
	}
	out := make(map[string]string, len(keys))
	for _, members := range watches {
		prefix := commonPrefix(members)
		for _, m := range members {
			for _, k := range base[m] {
				out[k] = prefix
			}
		}
	}
	return out
}

// mergeGroups partitions sorted, distinct prefixes into at most maxGroups
// runs with a non-empty common prefix each, splitting the coarsest such
// partition (by first character) while the count allows; see GroupKeys.
func mergeGroups(prefixes []string, maxGroups int) [][]string {
	out := splitAt(prefixes, 0)
	for {
		split := false
		// Split the largest run first: it covers the most besides its locks.
		order := make([]int, len(out))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return len(out[order[a]]) > len(out[order[b]]) })
		for _, i := range order {
			run := out[i]
			if len(run) < 2 {
				continue
			}
			at := len(commonPrefix(run))
			if len(run[0]) == at {
				continue // one member is the common prefix itself and covers the rest
			}
			parts := splitAt(run, at)
			if len(out)-1+len(parts) > maxGroups {
				continue
			}
			out = append(out[:i], append(parts, out[i+1:]...)...)
			split = true
			break
		}
		if !split {
			return out
		}
	}
}

// splitAt groups sorted prefixes (each longer than at) by their byte at at.
func splitAt(sorted []string, at int) [][]string {
	var out [][]string
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j][at] == sorted[i][at] {
			j++
		}
		out = append(out, sorted[i:j])
		i = j
	}
	return out
}

// WatchCapExceeded reports, for a grouping by GroupKeys, how many watches it
// opens and whether that is more than maxGroups (lock keys beginning with
// more distinct characters than maxGroups).
func WatchCapExceeded(assign map[string]string, maxGroups int) (int, bool) {
	prefixes := map[string]bool{}
	for _, p := range assign {
		prefixes[p] = true
	}
	return len(prefixes), len(prefixes) > max(maxGroups, 1)
}

func commonPrefix(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	p := ss[0]
	for _, s := range ss[1:] {
		for !strings.HasPrefix(s, p) {
			p = p[:len(p)-1]
		}
	}
	for !utf8.ValidString(p) { // never cut a character in two
		p = p[:len(p)-1]
	}
	return p
}
