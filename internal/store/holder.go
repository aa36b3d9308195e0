package store

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// LockView is what a lock key says about its holders, read with as few
// requests as the key needs: one KV read, one session read when a session
// holds the key, and for a semaphore one KV list of the contender keys and
// one session list for their nodes.
type LockView struct {
	// Key is the key as read (normalised by the caller).
	Key string
	// Pair is the key; nil when it does not exist.
	Pair *api.KVPair
	// Session is the holding session; nil when the key is not held, and
	// when the session ended between the two reads (then SessionGone).
	Session *api.SessionEntry
	// SessionGone is set when the key named a session that no longer
	// existed when it was read a moment later.
	SessionGone bool
	// Semaphore is set when the key is an api.Semaphore holder table.
	Semaphore *SemaphoreView
	// KnownLeader and LastContact are from the KV read's response headers.
	KnownLeader bool
	LastContact time.Duration
}

// SemaphoreView is the live state of an api.Semaphore (`consul lock -n`).
type SemaphoreView struct {
	// Prefix is the semaphore prefix; contender keys are <Prefix>/<session>.
	Prefix string
	// Limit is the limit recorded in <Prefix>/.lock; 0 when no holder has
	// written one yet.
	Limit int
	// Holders are the sessions the table lists that also hold their
	// contender key, sorted by session ID.
	Holders []SemaphoreHolder
}

// SemaphoreHolder is one holder of a semaphore slot.
type SemaphoreHolder struct {
	Session string
	// Node is the holder session's node; "" when the session ended
	// between the reads (SessionGone).
	Node        string
	SessionGone bool
	// Key is the contender key <prefix>/<session>.
	Key   string
	Value []byte
	// LockIndex is the contender key's LockIndex.
	LockIndex uint64
	// ModifyIndex is the contender key's ModifyIndex, the holder's fencing
	// token: for a consullock holder the Raft index of its admission, whose
	// transaction unlocks and locks the key again so that it changes even
	// when the value does not (lockproto's semaphore join). A `consul lock
	// -n` holder's is its key's creation, which precedes its admission.
	ModifyIndex uint64
}

// ReadLock reads the lock key and its holders. consistent selects
// ?consistent reads, which fail when there is no leader rather than answer
// with stale data; otherwise any server answers (?stale) and KnownLeader and
// LastContact tell how fresh the answer is.
//
// Consul filters what a token may not read instead of refusing it: a hidden
// holder session or contender key is reported as consul.KindPermissionDenied naming
// the permission, never as "not held".
func (c Store) ReadLock(ctx context.Context, key string, consistent bool) (*LockView, error) {
	query := func() *api.QueryOptions {
		return (&api.QueryOptions{RequireConsistent: consistent, AllowStale: !consistent}).WithContext(ctx)
	}
	pair, meta, err := c.KV().Get(key, query())
	if err != nil {
		return nil, c.Wrap("read lock key "+key, err)
	}
	view := &LockView{Key: key, Pair: pair, KnownLeader: meta.KnownLeader, LastContact: meta.LastContact}
	if pair == nil {
		return view, nil
	}

	if state, ok, err := semaphoreState(key, pair); err != nil {
		return nil, err
	} else if ok {
		view.Semaphore, err = c.readSemaphore(key, pair, state, query)
		if err != nil {
			return nil, err
		}
		return view, nil
	}

	// The key's session holds it (lockmodel.Holders); the session read
	// comes after, so a holder that ended in between is still reported,
	// with SessionGone.
	lockKey := KeyEntry(pair)
	held := lockmodel.Holders(lockmodel.LockState{Key: key, Entry: &lockKey})
	if len(held) == 0 {
		return view, nil
	}
	session := held[0].Session
	entry, smeta, err := c.Session().Info(session, query())
	if err != nil {
		return nil, c.Wrap(fmt.Sprintf("read session %s holding %s", session, key), err)
	}
	if entry == nil {
		if smeta.ResultsFilteredByACLs {
			return nil, hiddenSession(key, session)
		}
		view.SessionGone = true
		return view, nil
	}
	view.Session = entry
	return view, nil
}

// semaphoreState decides whether pair is an api.Semaphore holder table: the
// key is <prefix>/.lock and carries SemaphoreFlagValue, or carries no lock
// flags, no session and a {"Limit":N,"Holders":{...}} value. A contender key
// (<prefix>/<session>, also with SemaphoreFlagValue) is not a table.
func semaphoreState(key string, pair *api.KVPair) (lockmodel.SemaphoreState, bool, error) {
	if path.Base(key) != lockmodel.LockKeyName || !strings.Contains(key, "/") || pair.Session != "" {
		return lockmodel.SemaphoreState{}, false, nil
	}
	switch pair.Flags {
	case lockmodel.SemaphoreFlagValue:
		state, err := lockmodel.DecodeSemaphoreState(pair.Value)
		if err != nil {
			return lockmodel.SemaphoreState{}, false, fmt.Errorf("read lock key %s: it has api.Semaphore's flags %s but %w",
				key, lockmodel.FormatFlags(pair.Flags), err)
		}
		return state, true, nil
	case lockmodel.LockFlagValue:
		return lockmodel.SemaphoreState{}, false, nil
	default:
		// No lock flags: a table only if the value says so.
		if state, err := lockmodel.DecodeSemaphoreState(pair.Value); err == nil && state.Limit >= 1 {
			return state, true, nil
		}
		return lockmodel.SemaphoreState{}, false, nil
	}
}

// readSemaphore reads the holders of the semaphore whose holder table is
// pair: by lockmodel.Holders, the rule status, the controller and the
// protocol apply too, from one list of the keys under its prefix. The
// session list comes after it: a holder whose session ended in between is
// still reported, with SessionGone.
func (c Store) readSemaphore(key string, pair *api.KVPair, state lockmodel.SemaphoreState, query func() *api.QueryOptions) (*SemaphoreView, error) {
	prefix := lockmodel.SemaphorePrefix(key)
	view := &SemaphoreView{Prefix: prefix, Limit: state.Limit, Holders: []SemaphoreHolder{}}
	if len(state.Holders) == 0 {
		return view, nil
	}
	pairs, meta, err := c.KV().List(prefix+"/", query())
	if err != nil {
		return nil, c.Wrap("list semaphore contenders under "+prefix+"/", err)
	}
	if meta.ResultsFilteredByACLs {
		return nil, &consul.Error{
			Kind: consul.KindPermissionDenied,
			Op:   "list semaphore contenders under " + prefix + "/",
			Message: fmt.Sprintf("Consul hid some keys under %q from the token (results filtered by ACLs); "+
				"reading a semaphore's holders needs permission 'key:read' on the prefix: key_prefix %q { policy = \"read\" }",
				prefix+"/", prefix+"/"),
		}
	}
	table := KeyEntry(pair)
	st := lockmodel.LockState{Key: key, Entry: &table, Semaphore: true, Keys: make(map[string]lockmodel.KeyEntry, len(pairs))}
	for _, p := range pairs {
		st.Keys[p.Key] = KeyEntry(p)
	}
	for _, h := range lockmodel.Holders(st) {
		view.Holders = append(view.Holders, SemaphoreHolder{Session: h.Session, Key: h.Key, Value: h.Entry.Value, LockIndex: h.Entry.LockIndex, ModifyIndex: h.Entry.ModifyIndex})
	}
	if len(view.Holders) == 0 {
		return view, nil
	}

	// One list for all holders' nodes rather than one read per holder.
	sessions, smeta, err := c.Session().List(query())
	if err != nil {
		return nil, c.Wrap("list sessions for the holders of "+key, err)
	}
	nodes := make(map[string]string, len(sessions))
	for _, s := range sessions {
		nodes[s.ID] = s.Node
	}
	for i := range view.Holders {
		h := &view.Holders[i]
		node, ok := nodes[h.Session]
		switch {
		case ok:
			h.Node = node
		case smeta.ResultsFilteredByACLs:
			return nil, hiddenSession(h.Key, h.Session)
		default:
			h.SessionGone = true
		}
	}
	return view, nil
}

// KeyEntry is a KV pair as lockmodel decides locks from it.
func KeyEntry(p *api.KVPair) lockmodel.KeyEntry {
	return lockmodel.KeyEntry{Flags: p.Flags, Value: p.Value, Session: p.Session, LockIndex: p.LockIndex, ModifyIndex: p.ModifyIndex}
}

// hiddenSession is the error for a holder session that Consul filtered out
// of a read because the token may not read sessions on its node.
func hiddenSession(key, session string) *consul.Error {
	return &consul.Error{
		Kind: consul.KindPermissionDenied,
		Op:   fmt.Sprintf("read session %s holding %s", session, key),
		Message: "Consul hid the holder's session from the token (results filtered by ACLs); " +
			"reading it needs permission 'session:read' on the holder's node, e.g. session_prefix \"\" { policy = \"read\" } " +
			"or session \"<node name>\" { policy = \"read\" }",
	}
}

// SessionChecks returns the node checks of a session entry: NodeChecks plus
// the legacy Checks field (which a create request with "Checks" fills), in
// order and without repeats; and the IDs of its service checks.
func SessionChecks(e *api.SessionEntry) (nodeChecks, serviceChecks []string) {
	nodeChecks = []string{}
	for _, c := range append(slices.Clone(e.NodeChecks), e.Checks...) {
		if !slices.Contains(nodeChecks, c) {
			nodeChecks = append(nodeChecks, c)
		}
	}
	serviceChecks = []string{}
	for _, c := range e.ServiceChecks {
		if !slices.Contains(serviceChecks, c.ID) {
			serviceChecks = append(serviceChecks, c.ID)
		}
	}
	return nodeChecks, serviceChecks
}

// ObservedSession is a session entry as the controller and `consullock
// status` judge it (compliance.Decide, lockmodel.Profile.Violations):
// one conversion, so both judge the same values.
func ObservedSession(e *api.SessionEntry) lockmodel.ObservedSession {
	ttl, _ := lockmodel.ParseConsulTTL(e.TTL)
	node, svc := SessionChecks(e)
	return lockmodel.ObservedSession{
		ID: e.ID, Name: e.Name, Node: e.Node, TTL: ttl, LockDelay: e.LockDelay,
		Behavior: lockmodel.Behavior(e.Behavior), NodeChecks: node, ServiceChecks: svc, CreateIndex: e.CreateIndex,
	}
}
