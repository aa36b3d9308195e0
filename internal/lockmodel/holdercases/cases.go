// Package holdercases holds the Consul states on which every reader of a
// lock's holders must agree with lockmodel.Holders: the data source
// (consul.ReadLock), status, the controller and the protocol (lockproto)
// each feed them to their own code in a test. Only tests import it.
//
// Sessions are named by letters ("A", "B"); each test maps a letter to a
// session ID of its own (a real one against an agent).
package holdercases

import (
	"maps"
	"slices"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// Case is one state of a lock whose key is <prefix>/.lock.
type Case struct {
	Name string
	// Semaphore: the key is api.Semaphore's holder table (limit 2) listing
	// Table; otherwise an api.Lock key held by MutexHolder ("" = unheld).
	Semaphore   bool
	Table       []string
	MutexHolder string
	// Contenders are the semaphore's keys <prefix>/<name>, each with the
	// session holding it ("" = the key exists, not held).
	Contenders map[string]string
	// Alive are the sessions that exist.
	Alive []string
	// Torn is not one Consul state: the observer's session read, made
	// after its key read, no longer lists a session the keys show holding
	// (it ended between the two reads). Only observers with a session read
	// (status, the controller) take it.
	Torn bool
	// Want are the holders, sorted.
	Want []string
}

// Cases are the states, including those on which the copies of the rule
// disagreed before lockmodel.Holders: the controller took the holder table
// and a live session as proof (no contender-key check), and status judged
// a mutex holder by its key alone and a semaphore holder by its session
// too.
var Cases = []Case{
	{Name: "mutex held", MutexHolder: "A", Alive: []string{"A", "B"}, Want: []string{"A"}},
	{Name: "mutex unheld", Alive: []string{"A"}},
	{Name: "semaphore holder and a waiter", Semaphore: true, Table: []string{"A"},
		Contenders: map[string]string{"A": "A", "B": "B"}, Alive: []string{"A", "B"}, Want: []string{"A"}},
	{Name: "semaphore two holders", Semaphore: true, Table: []string{"A", "B"},
		Contenders: map[string]string{"A": "A", "B": "B"}, Alive: []string{"A", "B"}, Want: []string{"A", "B"}},
	{Name: "semaphore listed holder released its contender key", Semaphore: true, Table: []string{"A", "B"},
		Contenders: map[string]string{"A": "", "B": "B"}, Alive: []string{"A", "B"}, Want: []string{"B"}},
	{Name: "semaphore listed holder without a contender key", Semaphore: true, Table: []string{"A"},
		Alive: []string{"A"}},
	{Name: "semaphore listed holder's contender key held by another session", Semaphore: true, Table: []string{"A"},
		Contenders: map[string]string{"A": "B"}, Alive: []string{"A", "B"}},
	{Name: "semaphore listed holder whose session ended", Semaphore: true, Table: []string{"A", "B"},
		Contenders: map[string]string{"A": "A"}, Alive: []string{"A"}, Want: []string{"A"}},
	{Name: "torn read: mutex holder ended after the key read", MutexHolder: "A", Alive: []string{"B"}, Torn: true},
	{Name: "torn read: semaphore holder ended after the key read", Semaphore: true, Table: []string{"A", "B"},
		Contenders: map[string]string{"A": "A", "B": "B"}, Alive: []string{"B"}, Torn: true, Want: []string{"B"}},
}

// Entry is one key of a case as a KV read returns it.
type Entry struct {
	Key string
	lockmodel.KeyEntry
}

// LockKey is the case's lock key under prefix.
func LockKey(prefix string) string { return prefix + "/" + lockmodel.LockKeyName }

// Entries are the case's keys under prefix, the lock key first, with each
// session named by id(letter). ModifyIndex counts up from 10 in that order.
func (c Case) Entries(prefix string, id func(string) string) []Entry {
	lock := Entry{Key: LockKey(prefix), KeyEntry: lockmodel.KeyEntry{Flags: lockmodel.LockFlagValue, LockIndex: 1, ModifyIndex: 10}}
	if c.Semaphore {
		table := lockmodel.SemaphoreState{Limit: 2, Holders: map[string]bool{}}
		for _, s := range c.Table {
			table.Holders[id(s)] = true
		}
		value, err := lockmodel.EncodeSemaphoreState(table)
		if err != nil {
			panic(err)
		}
		lock.Flags, lock.Value, lock.LockIndex = lockmodel.SemaphoreFlagValue, value, 0
	} else if c.MutexHolder != "" {
		lock.Session = id(c.MutexHolder)
		lock.Value = []byte("holder " + c.MutexHolder)
	}
	out := []Entry{lock}
	for _, name := range slices.Sorted(maps.Keys(c.Contenders)) {
		e := Entry{Key: prefix + "/" + id(name), KeyEntry: lockmodel.KeyEntry{Flags: lockmodel.SemaphoreFlagValue,
			Value: []byte("contender " + name), LockIndex: 1, ModifyIndex: uint64(10 + len(out))}}
		if h := c.Contenders[name]; h != "" {
			e.Session = id(h)
		}
		out = append(out, e)
	}
	return out
}

// Sessions are the sessions a case's observer lists: Alive, named by id.
func (c Case) Sessions(id func(string) string) map[string]lockmodel.ObservedSession {
	out := map[string]lockmodel.ObservedSession{}
	for _, s := range c.Alive {
		out[id(s)] = lockmodel.ObservedSession{ID: id(s), Name: "session " + s, Node: "node-" + s}
	}
	return out
}

// Everyone is every session a case names, sorted: alive, listed, holding.
func (c Case) Everyone() []string {
	all := slices.Concat(c.Alive, c.Table, []string{c.MutexHolder}, slices.Collect(maps.Keys(c.Contenders)), slices.Collect(maps.Values(c.Contenders)))
	slices.Sort(all)
	return slices.DeleteFunc(slices.Compact(all), func(s string) bool { return s == "" })
}

// ID is the session ID a letter stands for in tests without an agent.
func ID(letter string) string { return "session-" + letter }

// Lock is the declared lock of a case: "job" on prefix jobs/job, limit 2
// for a semaphore.
func (c Case) Lock() lockmodel.Lock {
	l := lockmodel.Lock{Name: "job", Prefix: "jobs/job", Limit: 1}
	if c.Semaphore {
		l.Limit = 2
	}
	l, err := l.Normalize()
	if err != nil {
		panic(err)
	}
	return l
}

// WantIDs are the case's holders named by id, never nil.
func (c Case) WantIDs(id func(string) string) []string {
	out := []string{}
	for _, s := range c.Want {
		out = append(out, id(s))
	}
	slices.Sort(out)
	return out
}
