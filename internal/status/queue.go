package status

import (
	"encoding/json"
	"path"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// QueueWaiter is one entry of a queued mutex's waiter queue
// (<prefix>/.queue/<session>, waiters = "queue" or "handoff"), in the
// order the waiters stand in (lockmodel.QueueOrder).
type QueueWaiter struct {
	// Position counts the live entries ahead (0: first in line, the next
	// to try for the lock; the runner logs it as queue_position); null for
	// a stale entry, which no waiter waits behind.
	Position *int   `json:"position"`
	Session  string `json:"session"`
	// Node and PID are from the entry's value, the holder value the waiter
	// would write (the node of its session when the value names none).
	Node string `json:"node"`
	PID  int    `json:"pid"`
	// Stale is true when the entry's session is gone: Consul cleared the
	// entry (or the session ended after the entry was read); the next
	// waiter to list the queue deletes it.
	Stale bool   `json:"stale"`
	Key   string `json:"key"`
}

// queueOf is lock l's waiter queue as w listed it: the live entries in
// line, then the stale ones. The entry of holder (the mutex's holding
// session, "" for none) is not waiting and is left out.
func queueOf(w *world, l lockmodel.Lock, byKey map[string]*api.KVPair, holder string) []QueueWaiter {
	prefix := lockmodel.WaiterQueuePrefix(l)
	var entries []lockmodel.QueueEntry
	pairs := map[string]*api.KVPair{}
	for key, p := range byKey {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		pairs[key] = p
		e := lockmodel.QueueEntry{Key: key, Session: p.Session, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex}
		if _, ok := w.raw[p.Session]; !ok {
			e.Session = "" // the session ended after the listing: gone all the same
		}
		entries = append(entries, e)
	}
	line, stale := lockmodel.QueueOrder(entries, holder)
	out := make([]QueueWaiter, 0, len(line)+len(stale))
	for i, e := range line {
		out = append(out, queueWaiter(w, pairs[e.Key], &i))
	}
	for _, e := range stale {
		out = append(out, queueWaiter(w, pairs[e.Key], nil))
	}
	return out
}

// queueWaiter describes the queue entry p; position nil marks it stale.
func queueWaiter(w *world, p *api.KVPair, position *int) QueueWaiter {
	q := QueueWaiter{Session: path.Base(p.Key), Key: p.Key, Stale: position == nil}
	if position != nil {
		at := *position
		q.Position = &at
	}
	var hv lockmodel.HolderValue
	if json.Unmarshal(p.Value, &hv) == nil {
		q.Node, q.PID = hv.Node, hv.PID
	}
	if e := w.raw[p.Session]; q.Node == "" && e != nil {
		q.Node = e.Node
	}
	return q
}

// waitingInQueue counts the live entries of a queue.
func waitingInQueue(q []QueueWaiter) int {
	n := 0
	for _, e := range q {
		if !e.Stale {
			n++
		}
	}
	return n
}

// queueFolders are the declared locks' queue folders, whatever their
// waiters (entries left from before a switch to race are entries still).
func (d declarations) queueFolders() map[string]bool {
	out := make(map[string]bool, len(d.locks))
	for _, l := range d.locks {
		out[lockmodel.WaiterQueuePrefix(l)] = true
	}
	return out
}

// inQueueFolder is true for a key in one of folders: a waiter's queue
// entry, held by its session, but not a lock.
func inQueueFolder(key string, folders map[string]bool) bool {
	i := strings.LastIndex(key, "/"+lockmodel.QueueKeyName+"/")
	return i >= 0 && folders[key[:i+len(lockmodel.QueueKeyName)+2]]
}
