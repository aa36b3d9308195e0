package status

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// maxKeyLists caps the key listings of one read: lock keys are grouped by
// prefix exactly as the controller groups its watches, so one read costs at
// most 2 + maxKeyLists requests whatever the number of locks.
const maxKeyLists = compliance.DefaultMaxLockWatches

// declarations are the registry's records, as the controller reads them.
type declarations struct {
	locks    map[string]lockmodel.Lock
	profiles map[string]lockmodel.Profile
	// profileIndex is each profile record's ModifyIndex (see
	// compliance.State.ProfileIndex).
	profileIndex map[string]uint64
	// lockIndex is each lock record's ModifyIndex: the version judged
	// (compliance.Pending).
	lockIndex map[string]uint64
	// bad are records that do not decode: reported, never judged.
	bad map[string]string
	// ledgers are the locks' run ledgers (<registry>/runs/<lock>), by
	// lock name; they are in the same registry listing.
	ledgers map[string]ledger.Ledger
	// pauses are the locks' pause records (<registry>/pauses/<lock>), by
	// lock name, from the same listing.
	pauses map[string]record.Pause
}

// world is what one read saw: declarations, the key listings by prefix and
// the sessions.
type world struct {
	registry string
	decl     declarations
	groups   map[string]string // lock key or queue folder -> list prefix
	pairs    map[string][]*api.KVPair
	sessions map[string]lockmodel.ObservedSession
	raw      map[string]*api.SessionEntry
	// pending are the locks whose declaration is pending
	// (compliance.Pending): not judged, reported as pending.
	pending map[string]bool
	// services are the instances of the declared holder services, by
	// service name (readHolderServices).
	services map[string][]store.ServiceView
}

// holderServiceNames are the declared locks' holder service names, sorted.
func (d declarations) holderServiceNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, l := range d.locks {
		if h := l.HolderService; h != nil && !seen[h.Name] {
			seen[h.Name] = true
			names = append(names, h.Name)
		}
	}
	sort.Strings(names)
	return names
}

// readHolderServices reads the instances of every declared holder service
// that the sessions in w registered: one health query per service name,
// none without holder services.
func (r *reader) readHolderServices(ctx context.Context, w *world) error {
	w.services = map[string][]store.ServiceView{}
	names := w.decl.holderServiceNames()
	if len(names) == 0 {
		return nil
	}
	sessions := make([]string, 0, len(w.raw))
	for id := range w.raw {
		sessions = append(sessions, id)
	}
	for _, n := range names {
		views, err := store.New(r.c).ReadHolderServices(ctx, n, sessions, false)
		if err != nil {
			return err
		}
		w.services[n] = views
	}
	return nil
}

// holderService is session's instance of service name; nil when it has
// none.
func (w *world) holderService(name, session string) *holderInstance {
	for _, v := range w.services[name] {
		if v.Session == session {
			return &holderInstance{ID: v.ID, Name: name, Address: v.Address, Port: v.Port, Status: v.Status}
		}
	}
	return nil
}

func decodeRegistry(prefix string, pairs api.KVPairs) declarations {
	d := declarations{locks: map[string]lockmodel.Lock{}, profiles: map[string]lockmodel.Profile{},
		profileIndex: map[string]uint64{}, lockIndex: map[string]uint64{}, bad: map[string]string{}, ledgers: map[string]ledger.Ledger{},
		pauses: map[string]record.Pause{}}
	for _, p := range pairs {
		kind, name, ok := strings.Cut(strings.TrimPrefix(p.Key, prefix+"/"), "/")
		if !ok || name == "" || strings.Contains(name, "/") {
			continue
		}
		switch kind {
		case lockmodel.KindLock:
			l, err := record.DecodeLockRecord(p.Value)
			if err != nil {
				d.bad[p.Key] = err.Error()
				continue
			}
			d.locks[l.Name] = l
			d.lockIndex[l.Name] = p.ModifyIndex
		case lockmodel.KindSessionDefaults:
			s, err := record.DecodeSessionProfileRecord(p.Value)
			if err != nil {
				d.bad[p.Key] = err.Error()
				continue
			}
			d.profiles[s.Name] = s
			d.profileIndex[s.Name] = p.ModifyIndex
		case lockmodel.KindRuns:
			l, err := record.DecodeLedger(p.Value)
			if err == nil && l.Lock != name {
				err = fmt.Errorf("run ledger of lock %q stored under the name %q", l.Lock, name)
			}
			if err != nil {
				d.bad[p.Key] = err.Error()
				continue
			}
			d.ledgers[name] = l
		case lockmodel.KindPauses:
			ps, err := record.DecodePauseRecord(p.Value)
			if err == nil && ps.Lock != name {
				err = fmt.Errorf("pause record of lock %q stored under the name %q", ps.Lock, name)
			}
			if err != nil {
				d.bad[p.Key] = err.Error()
				continue
			}
			d.pauses[name] = ps
		}
	}
	return d
}

// listKeys returns what status lists, sorted: the declared lock keys and,
// for each lock whose waiters queue, its queue folder
// (lockmodel.WaiterQueuePrefix).
func (d declarations) listKeys() []string {
	keys := make([]string, 0, len(d.locks))
	for _, l := range d.locks {
		keys = append(keys, l.Key)
		if l.Queued() {
			keys = append(keys, lockmodel.WaiterQueuePrefix(l))
		}
	}
	sort.Strings(keys)
	return keys
}

// listPrefixes returns the prefixes to list for the declared keys and
// queue folders (the controller's grouping, so a queue is listed with its
// lock key, in the same request when they share a prefix, and no request
// is added per queued lock) and the sorted distinct prefixes.
func listPrefixes(d declarations) (map[string]string, []string) {
	groups := compliance.GroupKeys(d.listKeys(), maxKeyLists)
	seen := map[string]bool{}
	var prefixes []string
	for _, p := range groups {
		if !seen[p] {
			seen[p] = true
			prefixes = append(prefixes, p)
		}
	}
	sort.Strings(prefixes)
	return groups, prefixes
}

// reader does the reads; each method is one Consul request.
type reader struct {
	c        *consul.Client
	registry string
}

// once is the options of a single read; a watch's come from its
// consul.Follower.
func once(ctx context.Context) *api.QueryOptions { return (&api.QueryOptions{}).WithContext(ctx) }

func filteredErr(op, permission, resource string) error {
	return &consul.Error{Kind: consul.KindPermissionDenied, Op: op, StatusCode: 200, Permission: permission, Resource: resource,
		Message: "Consul filtered the results by ACLs"}
}

func (r *reader) registryList(o *api.QueryOptions) (declarations, *api.QueryMeta, error) {
	ctx, prefix := o.Context(), r.registry+"/"
	pairs, meta, err := r.c.KV().List(prefix, o)
	if err != nil {
		return declarations{}, nil, r.c.Classify(ctx, "list the declarations under "+prefix, err)
	}
	d := decodeRegistry(r.registry, pairs)
	if meta.ResultsFilteredByACLs || len(d.locks)+len(d.profiles) == 0 {
		// Nothing visible may be a denial: Consul filters a listing, and
		// tells only some tokens (none to a request without a token).
		if err := r.c.CheckListable(ctx, prefix); err != nil {
			return declarations{}, nil, err
		}
	}
	if meta.ResultsFilteredByACLs {
		return declarations{}, nil, filteredErr("list the declarations under "+prefix, "key:read", prefix)
	}
	return d, meta, nil
}

func (r *reader) keyList(prefix string, o *api.QueryOptions) ([]*api.KVPair, *api.QueryMeta, error) {
	op := fmt.Sprintf("list the lock keys under %q", prefix)
	pairs, meta, err := r.c.KV().List(prefix, o)
	if err != nil {
		return nil, nil, r.c.Classify(o.Context(), op, err)
	}
	if meta.ResultsFilteredByACLs {
		return nil, nil, filteredErr(op, "key:read", prefix)
	}
	return pairs, meta, nil
}

func (r *reader) sessionList(o *api.QueryOptions) (map[string]*api.SessionEntry, *api.QueryMeta, error) {
	entries, meta, err := r.c.Session().List(o)
	if err != nil {
		return nil, nil, r.c.Classify(o.Context(), "list the sessions", err)
	}
	if meta.ResultsFilteredByACLs {
		// A holder hidden from the token would look like no holder.
		return nil, nil, filteredErr("list the sessions", "session:read", `"" (session_prefix)`)
	}
	out := make(map[string]*api.SessionEntry, len(entries))
	for _, e := range entries {
		out[e.ID] = e
	}
	return out, meta, nil
}

// readOnce reads everything: 1 registry list, at most maxKeyLists key
// lists, 1 session list.
func (r *reader) readOnce(ctx context.Context) (*world, error) {
	d, _, err := r.registryList(once(ctx))
	if err != nil {
		return nil, err
	}
	w := &world{registry: r.registry, decl: d, pairs: map[string][]*api.KVPair{}}
	var prefixes []string
	w.groups, prefixes = listPrefixes(d)
	for _, p := range prefixes {
		pairs, _, err := r.keyList(p, once(ctx))
		if err != nil {
			return nil, err
		}
		w.pairs[p] = pairs
	}
	raw, _, err := r.sessionList(once(ctx))
	if err != nil {
		return nil, err
	}
	w.setSessions(raw)
	if err := r.readHolderServices(ctx, w); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *world) setSessions(raw map[string]*api.SessionEntry) {
	w.raw = raw
	w.sessions = make(map[string]lockmodel.ObservedSession, len(raw))
	for id, e := range raw {
		w.sessions[id] = store.ObservedSession(e)
	}
}

// applyGrace is how long after a declaration changes status leaves its
// lock key to the apply that changed it: the controller's default.
const applyGrace = compliance.DefaultApplyGrace

// pendingLocks applies compliance.Pending, the controller's rule, to the
// locks of rep (built from w): a lock whose declaration this program saw
// change within the apply grace (changed, by lock name; nil for a single
// read) is pending; and a lock that shows drift is pending when its
// declaration, read again now, is not the version w judged (the apply
// wrote it and then the key between this program's reads). The second
// read (one request) happens only when some lock shows drift.
func (r *reader) pendingLocks(ctx context.Context, w *world, rep *Report, changed map[string]time.Time, now time.Time) (map[string]bool, error) {
	pending := map[string]bool{}
	for name, idx := range w.decl.lockIndex {
		if compliance.Pending(idx, idx, changed[name], now, applyGrace) {
			pending[name] = true
		}
	}
	var drifted []string
	for _, l := range rep.Locks {
		for _, f := range l.Findings {
			if compliance.Kind(f.Kind).IsDrift() && !pending[l.Name] {
				drifted = append(drifted, l.Name)
				break
			}
		}
	}
	if len(drifted) == 0 {
		return pending, nil
	}
	again, _, err := r.registryList(once(ctx))
	if err != nil {
		return nil, err
	}
	for _, name := range drifted {
		if compliance.Pending(w.decl.lockIndex[name], again.lockIndex[name], time.Time{}, now, applyGrace) {
			pending[name] = true
		}
	}
	return pending, nil
}
