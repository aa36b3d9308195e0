package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// Config is what a controller needs besides its Consul client.
type Config struct {
	Mode           compliance.Mode
	RegistryPrefix string
	Logger         *slog.Logger
	// MaxLockWatches caps the number of blocking queries on lock keys; lock
	// keys are grouped by their first path segment, and the groups merged
	// by their non-empty common prefix when there are more (see GroupKeys).
	// 0 chooses the cap from the number of lock keys at each regrouping
	// (compliance.AutoLockWatches).
	MaxLockWatches int
	// WaitTime is the blocking query wait; 0 means 5 minutes.
	WaitTime time.Duration
	// DisableHA makes this replica act without electing a leader (tests,
	// single-replica deployments that want no session renewals at all).
	DisableHA bool
	// Identity is written as the value of the leader key ("" = hostname/pid).
	Identity string
	// ApplyGrace is how long after a declaration changes the controller
	// leaves the object it declares to the apply that wrote it: the
	// provider writes the declaration first and the live object right
	// after, and a controller acting in between would do the apply's write
	// itself (or, for a change it saw half of, undo it). Out-of-band drift
	// of an object whose declaration did not change is repaired at once.
	// 0 means none, as -apply-grace 0 does (the flag's default is
	// compliance.DefaultApplyGrace); negative is refused.
	ApplyGrace time.Duration
	// WatchClient serves the blocking queries; it should not retry on its
	// own (RetrySettings.MaxAttempts 1): a connection error must reach the
	// watch loop, which resets the index (an agent that restarted has a
	// lower one, and a query blocking on the old index would hang for the
	// whole wait time). nil means the main client.
	WatchClient *consul.Client
	// Clock is the wall clock (lockmodel.EnvClockOffset: fault injection);
	// the zero Clock is the system's.
	Clock lockmodel.Clock
	// Notify is where the leader POSTs events that need a person
	// (notify.go); its URL "" is off.
	Notify NotifyConfig
}

// Controller reconciles one registry.
type Controller struct {
	cfg     Config
	client  *consul.Client
	watcher *consul.Client
	log     *slog.Logger
	metrics *Metrics

	kick   chan struct{}
	leader atomic.Bool
	// term is the leadership term this replica acts in; nil while it
	// does not lead.
	term atomic.Pointer[term]
	// acting is cleared first thing on shutdown: no action starts after it.
	acting atomic.Bool
	// actMu is held while actions run; the election ends the term (which
	// cancels the action's requests) and takes it before it releases the
	// leader key.
	actMu sync.Mutex

	// mu guards cache and recon (and the groups' live and synced).
	mu       sync.Mutex
	cache    cache      // what the watches saw (state.go)
	recon    reconState // what the reconciler derives, tracks and reports
	groupCtx context.Context
	groupWG  *sync.WaitGroup

	ready atomic.Bool
	// failing counts watches whose last query failed.
	failing atomic.Int32
	// reaper: locks whose former holders' instances are to be removed
	// (holderservice.go).
	reaper holderReaper
	// blind is why the registry watch sees no declaration although some
	// may be there (a *consul.BlindError's text); nil when it can see.
	blind atomic.Pointer[string]
	// notify sends -notify's events; nil without (notify.go).
	notify *notifier
}

var groupGen atomic.Uint64

// New returns a controller; Run starts it.
func New(client *consul.Client, cfg Config) (*Controller, error) {
	if cfg.Mode == "" {
		cfg.Mode = compliance.ModeRepair
	}
	if _, err := compliance.ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.RegistryPrefix == "" {
		cfg.RegistryPrefix = lockmodel.DefaultRegistryPrefix
	}
	p, err := lockmodel.ValidateRegistryPrefix(cfg.RegistryPrefix)
	if err != nil {
		return nil, err
	}
	cfg.RegistryPrefix = p
	if cfg.MaxLockWatches < 0 {
		cfg.MaxLockWatches = 0
	}
	if cfg.WaitTime <= 0 {
		cfg.WaitTime = 5 * time.Minute
	}
	if err := compliance.ValidateApplyGrace("ApplyGrace", cfg.ApplyGrace); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Notify.URL != "" && cfg.Notify.PausedAfter == 0 {
		cfg.Notify.PausedAfter = DefaultNotifyPausedAfter
	}
	if err := cfg.Notify.validate(); err != nil {
		return nil, err
	}
	if cfg.WatchClient == nil {
		cfg.WatchClient = client
	}
	c := &Controller{
		cfg: cfg, client: client, watcher: cfg.WatchClient, log: cfg.Logger.With("mode", string(cfg.Mode)),
		kick:  make(chan struct{}, 1),
		cache: newCache(),
		recon: newReconState(),
	}
	c.metrics = newMetrics(c)
	if cfg.Notify.URL != "" {
		c.notify = newNotifier(cfg.Notify)
	}
	return c, nil
}

// Metrics returns the controller's metrics.
func (c *Controller) Metrics() *Metrics { return c.metrics }

// Ready reports whether every watch has answered once since start.
func (c *Controller) Ready() bool { return c.ready.Load() }

// IsLeader reports whether this replica currently acts.
func (c *Controller) IsLeader() bool { return c.leader.Load() }

// LeaderKey is the key replicas elect their leader with.
func (c *Controller) LeaderKey() string {
	return lockmodel.DefaultLockKey(c.cfg.RegistryPrefix + "/controller")
}

// Run watches and reconciles until ctx ends. On return this replica has
// stopped acting and, if it led, released then destroyed its session.
func (c *Controller) Run(ctx context.Context) error {
	c.log.Info("controller starting", "registry_prefix", c.cfg.RegistryPrefix, "leader_key", c.LeaderKey())
	var wg sync.WaitGroup
	groupCtx, cancelGroups := context.WithCancel(ctx)
	c.mu.Lock()
	c.groupCtx, c.groupWG = groupCtx, &wg
	c.mu.Unlock()

	c.acting.Store(true)
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	start(func(ctx context.Context) { c.watch(ctx, watchRegistry, c.pollRegistry) })
	start(func(ctx context.Context) { c.watch(ctx, watchSessions, c.pollSessions) })
	start(func(ctx context.Context) { c.watch(ctx, watchACLPolicies, c.pollPolicies) })
	if c.notify != nil {
		start(c.notifyLoop)
	}

	leaderDone := make(chan struct{})
	if c.cfg.DisableHA {
		c.setTerm(&term{ctx: ctx})
		close(leaderDone)
	} else {
		go func() { defer close(leaderDone); c.elect(ctx) }()
	}

	c.reconcileLoop(ctx)

	// Shutdown: stop acting before anything else, then let the election
	// release and destroy its session, then wait for the watches.
	c.acting.Store(false)
	c.setTerm(nil)
	<-leaderDone
	cancelGroups()
	wg.Wait()
	c.log.Info("controller stopped")
	return nil
}

// setTerm starts a leadership term, or with nil says this replica no
// longer leads (the caller has ended the term's context).
func (c *Controller) setTerm(t *term) {
	c.term.Store(t)
	on := t != nil
	c.leader.Store(on)
	c.metrics.setLeader(on)
	if on {
		c.trigger()
		c.notify.wakeUp() // a new leader looks for events at once
	}
}

// trigger asks for a reconcile soon; it never blocks.
func (c *Controller) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// reconcileLoop decides after every watch answer and at the next max_hold
// deadline.
func (c *Controller) reconcileLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-timer.C:
		}
		next := c.reconcile(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		d := time.Hour
		if !next.IsZero() {
			d = max(next.Sub(c.cfg.Clock.Now()), 10*time.Millisecond)
		}
		timer.Reset(d)
	}
}

// reconcile decides once and, if this replica leads, acts. It returns the
// next time a max_hold deadline or an apply grace passes, or a failed
// repair is tried again (zero when none).
func (c *Controller) reconcile(ctx context.Context) time.Time {
	start := c.cfg.Clock.Now()
	if err := c.fetchPolicies(ctx); err != nil && ctx.Err() == nil {
		c.log.Error("reading declared ACL policies failed", "error", err.Error())
	}
	c.mu.Lock()
	st, ready, next := c.snapshotLocked(start)
	var decisions []compliance.Decision
	if ready {
		decisions = c.decideDirty(st)
	}
	settling := st.Settling
	c.mu.Unlock()
	if !ready {
		return next
	}
	decisions, st.Settling, next = c.confirmDrift(ctx, decisions, settling, next, start)
	if len(st.Settling) > len(settling) {
		// confirmDrift found declarations newer than the version judged:
		// pending from now for the apply grace.
		c.mu.Lock()
		for id := range st.Settling {
			if !settling[id] {
				c.startGrace(id, start.Add(c.cfg.ApplyGrace))
			}
		}
		c.mu.Unlock()
	}
	c.observe(decisions, st.Settling)
	if t := c.term.Load(); t != nil && c.acting.Load() {
		c.actMu.Lock()
		defer c.actMu.Unlock()
		next = c.actOn(t, decisions, next)
		if t.ctx.Err() == nil && c.acting.Load() {
			c.reapHolderServices(t.ctx)
		}
	}
	c.metrics.reconcileDuration.Observe(c.cfg.Clock.Now().Sub(start).Seconds())
	return next
}

// observe logs and counts each finding once, while it lasts. Findings
// about a pending declaration (which Decide skips) are not forgotten: a
// holder still in violation after an apply is not counted twice.
func (c *Controller) observe(ds []compliance.Decision, settling map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.metrics.pending.Set(float64(len(settling)))
	current := map[string]bool{}
	for _, d := range ds {
		id := d.ID()
		current[id] = true
		if _, ok := c.recon.reported[id]; ok {
			continue
		}
		c.recon.reported[id] = d.SettlingKey()
		for _, r := range d.Reasons {
			c.metrics.violations.WithLabelValues(r).Inc()
		}
		if d.IsDrift() {
			c.metrics.drift.WithLabelValues(string(d.Kind)).Inc()
		}
		attrs := []any{"kind", string(d.Kind), "act", d.Act && c.leader.Load(), "detail", d.Detail}
		attrs = append(attrs, logAttrs(d)...)
		c.log.Warn("drift detected", attrs...)
	}
	for id, decl := range c.recon.reported {
		if !current[id] && !settling[decl] {
			delete(c.recon.reported, id)
		}
	}
}

// logAttrs are the log attributes of d besides its kind and detail.
func logAttrs(d compliance.Decision) []any {
	var a []any
	if d.Lock != "" {
		a = append(a, "lock", d.Lock)
	}
	if d.Key != "" {
		a = append(a, "key", d.Key)
	}
	if d.Policy != "" {
		a = append(a, "policy", d.Policy)
	}
	if d.Session != "" {
		a = append(a, "session", d.Session)
	}
	if len(d.Reasons) > 0 {
		a = append(a, "reason", strings.Join(d.Reasons, ","))
	} else {
		a = append(a, "reason", string(d.Kind))
	}
	if d.Before != "" {
		a = append(a, "before", d.Before)
	}
	if d.After != "" {
		a = append(a, "after", d.After)
	}
	return a
}

// setDeclarations replaces the declarations from one registry listing
// (versions: the ModifyIndex of each record by compliance.SettlingKey), notes which
// declarations changed (at now), and regroups the lock key watches.
func (c *Controller) setDeclarations(locks map[string]lockmodel.Lock, profiles map[string]lockmodel.Profile,
	policies map[string]record.ACLPolicySpec, versions map[string]uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switched := map[string]uint64{}
	for name, l := range locks {
		switch old, ok := c.cache.locks[name]; {
		case ok && old.SessionDefaults != l.SessionDefaults && c.cache.registrySync:
			switched[name] = versions[compliance.SettlingKey(lockmodel.KindLock, name)]
		case ok && c.cache.profileSwitched[name] != 0:
			switched[name] = c.cache.profileSwitched[name]
		}
	}
	c.cache.profileSwitched = switched
	oldLocks, oldSeen := c.cache.locks, c.cache.declSeen
	c.cache.locks, c.cache.profiles, c.cache.policies = locks, profiles, policies
	seen := make(map[string]declVersion, len(versions))
	for id, index := range versions {
		v, ok := c.cache.declSeen[id]
		if !ok || v.index != index {
			v = declVersion{index: index}
			if c.cache.registrySync {
				// Written while this controller watched: an apply may
				// be between its declaration write and its live write.
				v.changed = now
				c.startGrace(id, now.Add(c.cfg.ApplyGrace))
			}
		}
		seen[id] = v
	}
	c.cache.declSeen = seen
	c.cache.registrySync = true
	c.noteDeclarationChanges(oldLocks, oldSeen)
	c.regroup(locks)
}

// assignWatches maps each declared lock key (a semaphore's directory and
// its key alike) to the prefix of its watch, under the cap it returns.
func (c *Controller) assignWatches(locks map[string]lockmodel.Lock) (map[string]string, int) {
	keys := make([]string, 0, len(locks))
	var semaphores []lockmodel.Lock
	for _, l := range locks {
		if n, err := l.Normalize(); err == nil {
			if n.IsSemaphore() {
				// Watched by its directory <prefix>/: the holder table
				// and the contender keys <prefix>/<session>, whose
				// ModifyIndex is each holder's fencing token.
				keys = append(keys, semaphoreDir(n))
				semaphores = append(semaphores, n)
			} else {
				keys = append(keys, n.Key)
			}
		}
	}
	maxWatches := c.cfg.MaxLockWatches
	if maxWatches == 0 {
		maxWatches = compliance.AutoLockWatches(len(keys))
	}
	assign := compliance.GroupKeys(keys, maxWatches)
	for _, n := range semaphores {
		assign[n.Key] = assign[semaphoreDir(n)]
	}
	return assign, maxWatches
}

// regroup assigns the keys of locks to lock key watches, stops the watches
// no longer wanted and starts the new ones (c.mu held).
func (c *Controller) regroup(locks map[string]lockmodel.Lock) {
	assign, maxWatches := c.assignWatches(locks)
	if n, over := compliance.WatchCapExceeded(assign, maxWatches); over && n != len(c.cache.groups) {
		c.log.Warn("more lock watches than -max-lock-watches",
			"lock_watches", n, "max_lock_watches", maxWatches,
			"detail", "the declared lock keys begin with more different characters than -max-lock-watches, and merging them would watch the whole KV store",
			"hint", "raise -max-lock-watches or put the lock keys under fewer top-level prefixes")
	}
	want := map[string]map[string]bool{}
	for key, prefix := range assign {
		if want[prefix] == nil {
			want[prefix] = map[string]bool{}
		}
		want[prefix][key] = true
	}
	for prefix, g := range c.cache.groups {
		if ks, ok := want[prefix]; !ok || !sameSet(ks, g.keys) {
			g.cancel()
			delete(c.cache.groups, prefix)
			c.diffKeys(g, g.live, g.synced, nil, false)
		}
	}
	for prefix, ks := range want {
		if _, ok := c.cache.groups[prefix]; ok {
			continue
		}
		gctx, cancel := context.WithCancel(c.groupCtx)
		g := &group{prefix: prefix, keys: ks, gen: groupGen.Add(1), cancel: cancel}
		c.cache.groups[prefix] = g
		c.groupWG.Add(1)
		go func() {
			defer c.groupWG.Done()
			c.watch(gctx, watchLockKeys, func(ctx context.Context, f *consul.Follower) (uint64, error) {
				return c.pollGroup(ctx, g, f)
			})
		}()
	}
	c.cache.keyGroup = assign
	c.refreshUnknown()
	c.metrics.lockWatches.Set(float64(len(c.cache.groups)))
}

// noteDeclarationChanges marks dirty the locks whose declaration, or the
// profile they name, changed since oldLocks and oldSeen, forgets the locks
// no longer declared, and derives the lock indexes again.
func (c *Controller) noteDeclarationChanges(oldLocks map[string]lockmodel.Lock, oldSeen map[string]declVersion) {
	v := &c.recon.view
	for name, l := range c.cache.locks {
		old, ok := oldLocks[name]
		if !ok {
			c.metrics.declareLock(name)
		}
		if !ok || old != l {
			v.dirty[name] = true
		}
	}
	for name := range oldLocks {
		if _, ok := c.cache.locks[name]; !ok {
			v.dirty[name] = true
			c.forgetLock(name)
			c.metrics.forgetLock(name)
		}
	}
	for id := range oldSeen {
		if _, ok := c.cache.declSeen[id]; !ok {
			delete(v.graceEnds, id)
			if kind, _, _ := strings.Cut(id, "/"); kind == lockmodel.KindSessionDefaults {
				c.touchProfile(id)
			}
		}
	}
	c.indexDeclarations()
	for id, now := range c.cache.declSeen {
		if kind, _, _ := strings.Cut(id, "/"); kind == lockmodel.KindSessionDefaults && oldSeen[id].index != now.index {
			c.touchProfile(id)
		}
	}
	// Policies are few and decided as a whole.
	v.policiesDirty = true
}

// touchProfile marks dirty the locks that name the profile of the
// declaration id (a compliance.SettlingKey).
func (c *Controller) touchProfile(id string) {
	_, name, _ := strings.Cut(id, "/")
	for _, lock := range c.recon.view.profileLocks[name] {
		c.recon.view.dirty[lock] = true
	}
}

// semaphoreDir is the directory of a semaphore's keys, <prefix>/: a group
// key that stands for the holder table and every contender key in it.
func semaphoreDir(l lockmodel.Lock) string {
	return l.Prefix + "/"
}

// holderKey returns the key whose ModifyIndex is the fencing token of
// session's hold on l, as the last watch answer saw it: the lock key of a
// mutex, the contender key <prefix>/<session> of a semaphore. false when
// it is not known or not held by session (c.mu held).
func (c *Controller) holderKey(l lockmodel.Lock, session string) (lockmodel.KeyEntry, bool) {
	n, err := l.Normalize()
	if err != nil {
		return lockmodel.KeyEntry{}, false
	}
	key := n.Key
	if n.IsSemaphore() {
		key = semaphoreDir(n) + session
	}
	lk, ok := c.recon.view.keys[key]
	return lk, ok && lk.Session == session
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// declarationSettled reports whether the declaration id is at index and
// older than the apply grace: a record the watch has not listed yet, or
// listed within the grace, belongs to an apply that may still be writing.
func (c *Controller) declarationSettled(id string, index uint64, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.cache.declSeen[id]
	return ok && !compliance.Pending(v.index, index, v.changed, now, c.cfg.ApplyGrace)
}

// LockWatches returns the number of lock key watches now open.
func (c *Controller) LockWatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cache.groups)
}

// String describes the controller for logs.
func (c *Controller) String() string {
	return fmt.Sprintf("controller(mode=%s, registry=%s)", c.cfg.Mode, c.cfg.RegistryPrefix)
}
