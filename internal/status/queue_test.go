package status

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// enqueue writes session's waiter queue entry as a queued `consullock run`
// does (acquired with its session, the holder value it would write).
func (f *fixture) enqueue(l lockmodel.Lock, session, node string, pid int) {
	f.t.Helper()
	v, _ := json.Marshal(lockmodel.HolderValue{Node: node, PID: pid, Started: time.Now().UTC()})
	key := lockmodel.WaiterQueueEntryKey(l, session)
	if ok, _, err := f.api.KV().Acquire(&api.KVPair{Key: key, Session: session, Value: v}, nil); err != nil || !ok {
		f.t.Fatalf("queue entry %s: ok=%v err=%v", key, ok, err)
	}
}

// TestStatusShowsTheWaiterQueue: for a mutex declared waiters = "queue"
// with a holder and two waiting runners, -lock NAME lists both waiters in
// line (CreateIndex order, not key order), with node and pid from their
// entries' values, and marks an entry whose session is gone as stale; -json
// has them in "queue"; the table's WAITING counts the live ones; the
// holder's own entry is not a waiter; none is an undeclared lock-like key.
// The queue comes with its lock key's listing (no request more), and the
// token of -print-rules reads it. A lock whose waiters race has no queue.
func TestStatusShowsTheWaiterQueue(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	l := f.lock(lockmodel.Lock{Name: "job", SessionDefaults: "strict", Waiters: lockmodel.WaitersQueue}, false)
	holder := f.session("15s", "15s", "release")
	f.acquire(l, holder, time.Now())
	f.enqueue(l, holder, "node-h", 100) // a holder that acquired without deleting its entry
	// The first in line has the greater session ID: the line is the
	// entries' CreateIndex order, not their keys'.
	ids := []string{f.session("15s", "15s", "release"), f.session("15s", "15s", "release")}
	sort.Strings(ids)
	first, second := ids[1], ids[0]
	f.enqueue(l, first, "node-a", 101)
	f.enqueue(l, second, "node-b", 102)
	gone := f.session("15s", "0s", "release")
	f.enqueue(l, gone, "node-c", 103)
	if _, err := f.api.Session().Destroy(gone, nil); err != nil {
		t.Fatal(err)
	}

	_, rules, _ := f.run("-print-rules")
	ro, err := agent.MintToken(policyName("queue-ro"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", ro.SecretID)

	code, rep := f.report()
	if code != ExitOK {
		t.Fatalf("exit %d with the token of -print-rules:\n%s", code, rules)
	}
	j := lockByName(t, rep, "job")
	type row struct {
		position *int
		session  string
		node     string
		pid      int
		stale    bool
	}
	zero, one := 0, 1
	want := []row{{&zero, first, "node-a", 101, false}, {&one, second, "node-b", 102, false}, {nil, gone, "node-c", 103, true}}
	if j.Waiters != lockmodel.WaitersQueue || len(j.Queue) != len(want) {
		t.Fatalf("job: waiters %q, queue %+v; want queue with %d entries (the holder's left out)", j.Waiters, j.Queue, len(want))
	}
	for i, w := range want {
		g := j.Queue[i]
		if (g.Position == nil) != (w.position == nil) || (g.Position != nil && *g.Position != *w.position) ||
			g.Session != w.session || g.Node != w.node || g.PID != w.pid || g.Stale != w.stale {
			t.Errorf("queue[%d] = %+v (position %v), want %+v (position %v)", i, g, g.Position, w, w.position)
		}
	}
	if len(rep.Undeclared) != 0 {
		t.Errorf("undeclared keys %+v: queue entries are not locks", rep.Undeclared)
	}
	if rep.ConsulRequests != 3 {
		t.Errorf("%d Consul requests, want 3 (registry, the lock key with its queue, sessions)", rep.ConsulRequests)
	}

	_, out, _ := f.run("-lock", "job")
	for _, re := range []string{
		`Waiters:\s+queue \(2 waiting\)`,
		`Waiting \(queue`,
		`(?m)^\s+0\s+` + first + `\s+node-a\s+101$`,
		`(?m)^\s+1\s+` + second + `\s+node-b\s+102$`,
		`(?m)^\s+stale\s+` + gone + `\s+node-c\s+103\s+\(session gone`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status -lock job lacks %s:\n%s", re, out)
		}
	}
	t.Logf("status -lock job:\n%s", out)
	if strings.Index(out, first) > strings.Index(out, second) {
		t.Errorf("status -lock job lists %s before %s:\n%s", second, first, out)
	}
	_, out, _ = f.run("-lock", "job", "-json")
	var detail Lock
	if err := json.Unmarshal([]byte(out), &detail); err != nil || len(detail.Queue) != 3 || detail.Queue[0].Session != first {
		t.Errorf("status -lock job -json: %v, queue %+v", err, detail.Queue)
	}
	_, out, _ = f.run()
	if !regexp.MustCompile(`(?m)^job\s.*\s1\s+2\s+strict\s`).MatchString(out) {
		t.Errorf("table: job's WAITING is not 2 after its LOCKINDEX 1:\n%s", out)
	}

	// A lock whose waiters race: no queue in -json, "-" waiting, and the
	// queued lock's entries (now in the shared listing) still not undeclared.
	t.Setenv("CONSUL_HTTP_TOKEN", agent.ManagementToken)
	f.lock(lockmodel.Lock{Name: "plain", SessionDefaults: "strict"}, false)
	_, out, _ = f.run("-json")
	var raw struct {
		Locks      []map[string]any `json:"locks"`
		Undeclared []Undeclared     `json:"undeclared_keys"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, lk := range raw.Locks {
		_, has := lk["queue"]
		if has != (lk["name"] == "job") {
			t.Errorf("lock %v: queue present %v (waiters %v)", lk["name"], has, lk["waiters"])
		}
	}
	if len(raw.Undeclared) != 0 {
		t.Errorf("undeclared keys %+v with both locks listed under one prefix", raw.Undeclared)
	}
	_, out, _ = f.run("-lock", "plain")
	if strings.Contains(out, "Waiting (queue") || strings.Contains(out, "Waiters:") {
		t.Errorf("status -lock plain shows a queue:\n%s", out)
	}
}

// TestStatusWatchRedrawsTheWaiterQueue: -watch redraws when a waiter
// queues or leaves, with nothing else changing (its session already
// existed): the queue folder is listed, and so watched, with its lock key.
func TestStatusWatchRedrawsTheWaiterQueue(t *testing.T) {
	f := newFixture(t)
	l := f.lock(lockmodel.Lock{Name: "job", Waiters: lockmodel.WaitersQueue}, false)
	f.acquire(l, f.session("15s", "15s", "release"), time.Now())
	waiter := f.session("15s", "15s", "release")
	pr := f.watch(nil)
	queue := func() []QueueWaiter {
		line := pr.next(t)
		var rep Report
		if err := json.Unmarshal([]byte(line), &rep); err != nil || len(rep.Locks) != 1 {
			t.Fatalf("frame %q: %v", line, err)
		}
		return rep.Locks[0].Queue
	}
	if q := queue(); q == nil || len(q) != 0 {
		t.Fatalf("first frame: queue %+v, want empty", q)
	}
	f.enqueue(l, waiter, "node-a", 101)
	if q := queue(); len(q) != 1 || q[0].Session != waiter || q[0].Stale {
		t.Fatalf("frame after the waiter queued: %+v, want %s in line", q, waiter)
	}
	if _, err := f.api.KV().Delete(lockmodel.WaiterQueueEntryKey(l, waiter), nil); err != nil {
		t.Fatal(err)
	}
	if q := queue(); len(q) != 0 {
		t.Fatalf("frame after the waiter left: %+v, want empty", q)
	}
}

// TestStatusShowsTheDeclaredWaitersOfAQueuedMutex: a mutex declared
// waiters = "handoff" queues as one declared "queue" does, and status shows
// each lock's declared value: -json "waiters" is "handoff" and "queue",
// each with its queue in line; -lock NAME says "Waiters: handoff" and that
// position 0 is next, handed the lock by a releasing runner (with "queue",
// that it tries for the lock next).
func TestStatusShowsTheDeclaredWaitersOfAQueuedMutex(t *testing.T) {
	f := newFixture(t)
	waiting := map[string]string{}
	for _, w := range []string{lockmodel.WaitersHandOff, lockmodel.WaitersQueue} {
		l := f.lock(lockmodel.Lock{Name: w, Waiters: w}, false)
		f.acquire(l, f.session("15s", "15s", "release"), time.Now())
		waiting[w] = f.session("15s", "15s", "release")
		f.enqueue(l, waiting[w], "node-"+w, 101)
	}

	_, out, _ := f.run("-json")
	var raw struct {
		Locks []map[string]any `json:"locks"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, lk := range raw.Locks {
		if lk["waiters"] != lk["name"] {
			t.Errorf("status -json: lock %v has waiters %v; want %v, as declared", lk["name"], lk["waiters"], lk["name"])
		}
	}
	_, rep := f.report()
	for w, session := range waiting {
		j := lockByName(t, rep, w)
		if j.Waiters != w || len(j.Queue) != 1 || j.Queue[0].Session != session || j.Queue[0].Position == nil || *j.Queue[0].Position != 0 {
			t.Errorf("%s: waiters %q, queue %+v; want waiters %q and %s first in line", w, j.Waiters, j.Queue, w, session)
		}
	}

	for w, res := range map[string][]string{
		lockmodel.WaitersHandOff: {`Waiters:\s+handoff \(1 waiting\)`, `Waiting \(handoff, in line; position 0 is next, handed the lock by a releasing runner\)`,
			`(?m)^\s+0\s+` + waiting[lockmodel.WaitersHandOff] + `\s+node-handoff\s+101$`},
		lockmodel.WaitersQueue: {`Waiters:\s+queue \(1 waiting\)`, `Waiting \(queue, in line; position 0 tries for the lock next\)`,
			`(?m)^\s+0\s+` + waiting[lockmodel.WaitersQueue] + `\s+node-queue\s+101$`},
	} {
		_, out, _ := f.run("-lock", w)
		for _, re := range res {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("status -lock %s lacks %s:\n%s", w, re, out)
			}
		}
		if w == lockmodel.WaitersHandOff {
			t.Logf("status -lock %s:\n%s", w, out)
		}
	}
}
