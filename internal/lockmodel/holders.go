package lockmodel

import (
	"slices"
	"strings"

	"github.com/consullock/terraform-provider-consullock/internal/holder"
)

// KeyEntry is a KV entry as Consul returned it: the fields a lock is
// decided from.
type KeyEntry struct {
	Flags       uint64
	Value       []byte
	Session     string
	LockIndex   uint64
	ModifyIndex uint64
}

// LockState is a plain description of what an observer read of one lock.
type LockState struct {
	// Key is the lock key: a mutex's key, or a semaphore's holder table
	// <prefix>/.lock.
	Key string
	// Entry is the lock key's entry; nil when the key does not exist.
	Entry *KeyEntry
	// Semaphore selects api.Semaphore's rule: Entry is the holder table.
	Semaphore bool
	// Keys are the other keys read, by key; a semaphore's contender keys
	// <prefix>/<session> are looked up here, nothing else is.
	Keys map[string]KeyEntry
	// Sessions are the sessions the observer's own session read lists, by
	// ID; nil when it made none.
	Sessions map[string]ObservedSession
}

// LockHolder is one session holding a lock, with the key it holds. Its
// FencingToken is the key's ModifyIndex; its Node is known when the
// observer read the sessions (LockState.Sessions).
type LockHolder struct {
	holder.Holder
	// Key is the key the session holds: the mutex's key, or the
	// semaphore holder's contender key <prefix>/<session>.
	Key string
	// Entry is that key as read: Value is the holder value and
	// ModifyIndex the holder's fencing token.
	Entry KeyEntry
}

// Holders is the one rule for who holds a lock, shared by the data source
// (consul.ReadLock), status, the controller and lockproto; the holders
// come sorted by session ID. A mutex is held by the session its key names;
// a semaphore slot by a session that the holder table lists and that holds
// its own contender key <prefix>/<session>. With st.Sessions set, a holder
// whose session that read does not list is left out. Why both conditions,
// and the error between two reads: the package doc, "Who holds a lock".
func Holders(st LockState) []LockHolder {
	var candidates []string
	switch {
	case st.Entry == nil:
	case !st.Semaphore:
		candidates = []string{st.Entry.Session}
	default:
		if table, err := DecodeSemaphoreState(st.Entry.Value); err == nil {
			for id, listed := range table.Holders {
				if listed {
					candidates = append(candidates, id)
				}
			}
			slices.Sort(candidates)
		}
	}
	var out []LockHolder
	for _, id := range candidates {
		if h, why := holderOf(st, id); why == "" {
			out = append(out, h)
		}
	}
	return out
}

// NotHolding says why session does not hold the lock by Holders' rule, or
// "" when it does.
func NotHolding(st LockState, session string) string {
	_, why := holderOf(st, session)
	return why
}

// Waiters are a semaphore's contenders waiting for a slot, sorted: the
// sessions that hold their own contender key <prefix>/<session> while the
// holder table does not list them (all of them when the table does not
// decode). A mutex has none.
func Waiters(st LockState) []string {
	if !st.Semaphore {
		return nil
	}
	var table SemaphoreState
	if st.Entry != nil {
		table, _ = DecodeSemaphoreState(st.Entry.Value)
	}
	prefix := SemaphorePrefix(st.Key) + "/"
	var out []string
	for key, e := range st.Keys {
		if e.Session != "" && key == prefix+e.Session && !table.Holders[e.Session] {
			out = append(out, e.Session)
		}
	}
	slices.Sort(out)
	return out
}

// SemaphorePrefix is the prefix of the semaphore whose holder table is key
// <prefix>/.lock: its contender keys are <prefix>/<session>.
func SemaphorePrefix(key string) string {
	return strings.TrimSuffix(key, "/"+LockKeyName)
}

// holderOf applies Holders' rule to one session.
func holderOf(st LockState, session string) (LockHolder, string) {
	if session == "" {
		return LockHolder{}, "no session"
	}
	var h LockHolder
	if !st.Semaphore {
		switch {
		case st.Entry == nil:
			return LockHolder{}, "key " + st.Key + " does not exist"
		case st.Entry.Session == "":
			return LockHolder{}, "key " + st.Key + " is not held"
		case st.Entry.Session != session:
			return LockHolder{}, "key " + st.Key + " is held by session " + st.Entry.Session
		}
		h = LockHolder{Holder: holder.Holder{Session: session, FencingToken: st.Entry.ModifyIndex}, Key: st.Key, Entry: *st.Entry}
	} else {
		contender := SemaphorePrefix(st.Key) + "/" + session
		e, ok := st.Keys[contender]
		if !ok || e.Session != session {
			return LockHolder{}, "contender key " + contender + " is not held by session " + session
		}
		if st.Entry == nil {
			return LockHolder{}, "holder table " + st.Key + " does not exist"
		}
		table, err := DecodeSemaphoreState(st.Entry.Value)
		if err != nil {
			return LockHolder{}, "holder table " + st.Key + " is unusable: " + err.Error()
		}
		if !table.Holders[session] {
			return LockHolder{}, "holder table " + st.Key + " does not list session " + session
		}
		h = LockHolder{Holder: holder.Holder{Session: session, FencingToken: e.ModifyIndex}, Key: contender, Entry: e}
	}
	if st.Sessions != nil {
		s, alive := st.Sessions[session]
		if !alive {
			return LockHolder{}, "session " + session + " no longer exists"
		}
		h.Node = s.Node
	}
	return h, ""
}
