package lockmodel

import (
	"strings"
	"testing"
	"time"
)

func TestPlaceInQueue(t *testing.T) {
	l := Lock{Prefix: "svc/job"}
	e := func(session string, create uint64) QueueEntry {
		return QueueEntry{Key: WaiterQueueEntryKey(l, session), Session: session, CreateIndex: create, ModifyIndex: create}
	}
	stale := QueueEntry{Key: WaiterQueueEntryKey(l, "gone"), CreateIndex: 5, ModifyIndex: 9}
	cases := []struct {
		name                  string
		entries               []QueueEntry
		session, holder       string
		wantFirst, wantListed bool
		wantAhead             string
		wantPosition          int
		wantStale             int
	}{
		{name: "alone", entries: []QueueEntry{e("a", 10)}, session: "a", wantFirst: true, wantListed: true},
		{name: "second waits on the first", entries: []QueueEntry{e("b", 20), e("a", 10)}, session: "b", wantListed: true, wantAhead: "a", wantPosition: 1},
		{name: "third waits on the second, not the first", entries: []QueueEntry{e("a", 10), e("c", 30), e("b", 20)}, session: "c", wantListed: true, wantAhead: "b", wantPosition: 2},
		{name: "the holder's entry is not ahead", entries: []QueueEntry{e("h", 1), e("a", 10)}, session: "a", holder: "h", wantFirst: true, wantListed: true},
		{name: "a cleared entry is stale, not ahead", entries: []QueueEntry{stale, e("a", 10)}, session: "a", wantFirst: true, wantListed: true, wantStale: 1},
		{name: "own entry missing: behind the last", entries: []QueueEntry{e("a", 10), e("b", 20)}, session: "c", wantAhead: "b", wantPosition: 2},
		{name: "own entry missing, empty queue", session: "c", wantFirst: true},
		{name: "equal create index: key order", entries: []QueueEntry{e("b", 10), e("a", 10)}, session: "b", wantListed: true, wantAhead: "a", wantPosition: 1},
		{name: "another session's entry under our name is not ours", entries: []QueueEntry{{Key: WaiterQueueEntryKey(l, "x"), Session: "a", CreateIndex: 3}, e("a", 10)}, session: "a", wantListed: true, wantAhead: "a", wantPosition: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := PlaceInQueue(tc.entries, tc.session, tc.holder)
			if p.First != tc.wantFirst || p.Listed != tc.wantListed || p.Position != tc.wantPosition || len(p.Stale) != tc.wantStale {
				t.Fatalf("PlaceInQueue = %+v; want first %v listed %v position %d stale %d", p, tc.wantFirst, tc.wantListed, tc.wantPosition, tc.wantStale)
			}
			if !p.First && p.Ahead.Session != tc.wantAhead {
				t.Fatalf("ahead = %q; want %q", p.Ahead.Session, tc.wantAhead)
			}
			// Invariant: exactly one of First and an entry ahead.
			if p.First == (p.Ahead.Key != "") {
				t.Fatalf("first %v with ahead %+v", p.First, p.Ahead)
			}
		})
	}
}

// TestQueueOrder: the line an operator sees is the order waiters stand
// in: each live entry's index in the line is its PlaceInQueue position.
func TestQueueOrder(t *testing.T) {
	l := Lock{Prefix: "svc/job"}
	e := func(session string, create uint64) QueueEntry {
		return QueueEntry{Key: WaiterQueueEntryKey(l, session), Session: session, CreateIndex: create, ModifyIndex: create}
	}
	stale := QueueEntry{Key: WaiterQueueEntryKey(l, "gone"), CreateIndex: 5}
	entries := []QueueEntry{e("c", 30), stale, e("h", 1), e("b", 20), e("a", 20)}
	line, gone := QueueOrder(entries, "h")
	var got []string
	for _, x := range line {
		got = append(got, x.Session)
	}
	if strings.Join(got, ",") != "a,b,c" || len(gone) != 1 || gone[0].Key != stale.Key {
		t.Fatalf("QueueOrder = %q, stale %+v; want a,b,c (the holder h left out) and the cleared entry stale", got, gone)
	}
	for i, x := range line {
		if p := PlaceInQueue(entries, x.Session, "h"); p.Position != i || !p.Listed {
			t.Errorf("%s: PlaceInQueue position %d (listed %v), QueueOrder index %d", x.Session, p.Position, p.Listed, i)
		}
	}
}

func TestLock_validatesWaiters(t *testing.T) {
	for _, tc := range []struct {
		lock Lock
		want string // "" for valid
	}{
		{Lock{Name: "a", Prefix: "p"}, ""},
		{Lock{Name: "a", Prefix: "p", Waiters: WaitersRace}, ""},
		{Lock{Name: "a", Prefix: "p", Waiters: WaitersQueue}, ""},
		{Lock{Name: "a", Prefix: "p", Waiters: "fifo"}, `waiters: "fifo"`},
		{Lock{Name: "a", Prefix: "p", Waiters: WaitersQueue, Limit: 3}, `waiters: "queue (limit 3)"`},
		{Lock{Name: "a", Prefix: "p", Waiters: WaitersHandOff}, ""},
		{Lock{Name: "a", Prefix: "p", Waiters: WaitersHandOff, Limit: 2}, `waiters: "handoff (limit 2)" is not allowed; "handoff" only on a mutex`},
		{Lock{Name: "a", Prefix: "p", Key: "p/.queue/x"}, `key: "p/.queue/x"`},
		{Lock{Name: "a", Prefix: "p", Key: "p/.queued"}, ""},
	} {
		err := tc.lock.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.lock, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v; want one containing %q", tc.lock, err, tc.want)
		}
	}
}

func TestNextHolder_firstLiveWaiterWithStartedAtTheHandOff(t *testing.T) {
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	value := func(node string) []byte {
		return []byte(`{"node":"` + node + `","pid":7,"started":"2026-12-02T06:00:00Z","lock_delay":"15s"}`)
	}
	entries := []QueueEntry{
		{Key: "p/.queue/stale", Session: "", CreateIndex: 1},
		{Key: "p/.queue/holder", Session: "holder", CreateIndex: 2},
		{Key: "p/.queue/b", Session: "b", CreateIndex: 9},
		{Key: "p/.queue/a", Session: "a", CreateIndex: 5},
	}
	values := map[string][]byte{"p/.queue/a": value("node-a"), "p/.queue/b": value("node-b"), "p/.queue/holder": value("h")}
	got, ok := NextHolder(entries, values, "holder", at)
	if !ok || got.Session != "a" || got.Entry.Key != "p/.queue/a" {
		t.Fatalf("NextHolder = %+v, %v; want waiter a (the oldest live entry that is not the holder's)", got, ok)
	}
	want := `{"node":"node-a","pid":7,"started":"2026-12-02T07:00:00Z","lock_delay":"15s"}`
	if string(got.Value) != want {
		t.Errorf("value = %s; want %s (started at the hand-off, the rest kept)", got.Value, want)
	}

	for name, tc := range map[string]struct {
		entries []QueueEntry
		values  map[string][]byte
	}{
		"nobody waits":        {entries[:2], values},
		"not a holder value":  {entries[3:], map[string][]byte{"p/.queue/a": []byte("node-a")}},
		"unknown field in it": {entries[3:], map[string][]byte{"p/.queue/a": []byte(`{"node":"a","pid":1,"started":"2026-12-02T06:00:00Z","x":1}`)}},
		"entry without value": {entries[3:], map[string][]byte{}},
	} {
		if got, ok := NextHolder(tc.entries, tc.values, "holder", at); ok {
			t.Errorf("%s: NextHolder = %+v; want no hand-off (the holder releases)", name, got)
		}
	}
}
