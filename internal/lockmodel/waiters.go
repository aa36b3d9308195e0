package lockmodel

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Waiters modes of a mutex (consullock_lock's waiters): with WaitersRace
// (the default, as api.Lock) every waiter tries at each release; with
// WaitersQueue waiters line up in <prefix>/.queue/<session> by CreateIndex
// and only the first tries; with WaitersHandOff the releasing runner locks
// the key for the first in line in its release transaction. Their costs
// and what a crash does: the package doc, "How a mutex's waiters take the
// lock".
const (
	WaitersRace    = "race"
	WaitersQueue   = "queue"
	WaitersHandOff = "handoff"
	FieldWaiters   = "waiters"
	// QueueKeyName is the folder under a lock's prefix that holds its
	// waiter queue.
	QueueKeyName = ".queue"
)

// WaiterModes lists the values of waiters, the default first.
var WaiterModes = []string{WaitersRace, WaitersQueue, WaitersHandOff}

// WaiterQueuePrefix is the folder of lock l's waiter queue, with its
// trailing slash: <prefix>/.queue/. l must be normalised.
func WaiterQueuePrefix(l Lock) string {
	return l.Prefix + "/" + QueueKeyName + "/"
}

// WaiterQueueEntryKey is the queue entry of the waiter with session id.
func WaiterQueueEntryKey(l Lock, session string) string {
	return WaiterQueuePrefix(l) + session
}

// QueueEntry is one waiter queue entry as read from Consul.
type QueueEntry struct {
	Key         string
	Session     string // "" once Consul cleared it: its waiter is gone
	CreateIndex uint64
	ModifyIndex uint64
}

// QueuePlace is where a waiter stands in its lock's queue.
type QueuePlace struct {
	// First is true when no live entry is ahead: the waiter watches the
	// lock key and tries to acquire it when it is free.
	First bool
	// Ahead is the live entry just before the waiter's (when not First): the
	// waiter blocks on that key until it changes.
	Ahead QueueEntry
	// Position counts the live entries ahead of the waiter.
	Position int
	// Stale are the entries whose session is gone (Consul released them):
	// any waiter may delete them.
	Stale []QueueEntry
	// Listed is false when the waiter's own entry is not among entries (it
	// was deleted or cleared: the waiter writes it again).
	Listed bool
}

// PlaceInQueue decides where the waiter holding session stands among
// entries: live entries (Session set) are ordered by CreateIndex, then key;
// the entry of the lock's current holder (holder, "" for none) is not
// waiting and is left out, so a holder that queued and acquired without
// deleting its entry never blocks the others.
func PlaceInQueue(entries []QueueEntry, session, holder string) QueuePlace {
	if holder == session {
		holder = "" // a waiter that holds still finds its own entry
	}
	var place QueuePlace
	live, stale := QueueOrder(entries, holder)
	place.Stale = stale
	for i, e := range live {
		if e.Session == session && strings.HasSuffix(e.Key, "/"+session) {
			place.Listed = true
			place.Position = i
			place.First = i == 0
			if i > 0 {
				place.Ahead = live[i-1]
			}
			return place
		}
	}
	place.First = len(live) == 0
	place.Position = len(live)
	if len(live) > 0 {
		place.Ahead = live[len(live)-1]
	}
	return place
}

// QueueOrder is the line of waiters in entries, the one order every reader
// of a queue uses (PlaceInQueue for a waiter, `consullock status` for an
// operator): live entries (Session set) by CreateIndex, then key, without
// the entry of the lock's current holder (holder, "" for none), which is
// not waiting; stale are the entries whose session is gone, in the order
// given.
func QueueOrder(entries []QueueEntry, holder string) (line, stale []QueueEntry) {
	for _, e := range entries {
		switch e.Session {
		case "":
			stale = append(stale, e)
		case holder:
			// The holder is not waiting.
		default:
			line = append(line, e)
		}
	}
	sort.Slice(line, func(i, j int) bool {
		if line[i].CreateIndex != line[j].CreateIndex {
			return line[i].CreateIndex < line[j].CreateIndex
		}
		return line[i].Key < line[j].Key
	})
	return line, stale
}

// Queued reports whether l's waiters queue (waiters = "queue" or
// "handoff").
func (l Lock) Queued() bool {
	return l.Waiters == WaitersQueue || l.Waiters == WaitersHandOff
}

// HandsOff reports whether a releasing holder of l hands the lock to the
// first in its queue (waiters = "handoff").
func (l Lock) HandsOff() bool {
	return l.Waiters == WaitersHandOff
}

// validateWaiters judges l's waiters: "" or one of WaiterModes, and queue
// only on a mutex.
func (l Lock) validateWaiters() validation.FieldErrors {
	switch l.Waiters {
	case "", WaitersRace:
		return nil
	case WaitersQueue, WaitersHandOff:
		if l.Limit > 1 {
			return validation.FieldErrors{&validation.FieldError{Field: FieldWaiters, Value: fmt.Sprintf("%s (limit %d)", l.Waiters, l.Limit), Allowed: fmt.Sprintf(
				"%q only on a mutex (limit 1): a semaphore's waiters already keep a contender key each", l.Waiters)}}
		}
		return nil
	default:
		return validation.FieldErrors{&validation.FieldError{Field: FieldWaiters, Value: l.Waiters, Allowed: `"race" (default), "queue" or "handoff"`}}
	}
}

// validateKeyOutsideQueue refuses a lock key inside the waiter queue folder
// (l normalised): waiters would take it for an entry.
func (l Lock) validateKeyOutsideQueue() validation.FieldErrors {
	if strings.HasPrefix(l.Key, WaiterQueuePrefix(l)) {
		return validation.FieldErrors{&validation.FieldError{Field: "key", Value: l.Key, Allowed: fmt.Sprintf(
			"a key outside %q, the folder where queued waiters keep their entries", WaiterQueuePrefix(l))}}
	}
	return nil
}

// HandOff is the lock a releasing holder hands to the first waiter in its
// queue (waiters = "handoff"): the waiter's session and the value to write
// for it.
type HandOff struct {
	Entry   QueueEntry
	Session string
	Value   []byte
}

// NextHolder picks whom a releasing holder (session holder) of a lock
// whose waiters hand off gives the lock to: the first live waiter of the
// queue listing entries, whose entry value must be a runner's holder value
// (the value it would write itself); its started becomes at, the time of
// the hand-off, since max_hold counts from it. ok is false when nobody
// waits or the first waiter's value is not a holder value: the holder then
// releases and the waiters acquire as with "queue".
func NextHolder(entries []QueueEntry, values map[string][]byte, holder string, at time.Time) (HandOff, bool) {
	line, _ := QueueOrder(entries, holder)
	if len(line) == 0 {
		return HandOff{}, false
	}
	first := line[0]
	hv, ok := decodeHolderValue(values[first.Key])
	if !ok {
		return HandOff{}, false
	}
	hv.Started = at.UTC()
	value, err := json.Marshal(hv)
	if err != nil {
		return HandOff{}, false
	}
	return HandOff{Entry: first, Session: first.Session, Value: value}, true
}
