package runner

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// arrivalBarrier is a proxy in front of the agent for n runners of one
// run. It holds every runner's first look at the lock key (a read
// without an index or a wait) until all n are waiting, then lets them all
// through at once: n runners that arrive in the same instant, each having
// read the ledger, answered together that the key is free. Of the looks
// after that, it passes the first and holds the others until the key is
// held: the runner that woke first has acquired before the others look
// again, whatever the machine's load (the order the random wait makes
// likely, made certain). It counts the session creates.
type arrivalBarrier struct {
	addr     string
	open     chan struct{} // closed when all n first looks are in
	acquired chan struct{} // closed when the key is held

	mu      sync.Mutex
	looks   int
	creates int
}

func newArrivalBarrier(t *testing.T, key string, n int) *arrivalBarrier {
	t.Helper()
	p := &arrivalBarrier{open: make(chan struct{}), acquired: make(chan struct{})}
	p.addr = agentProxy(t, agent.Addr, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		q := r.URL.Query()
		look := r.Method == http.MethodGet && r.URL.Path == "/v1/kv/"+key && !q.Has("index") && !q.Has("wait")
		p.mu.Lock()
		if r.Method == http.MethodPut && r.URL.Path == "/v1/session/create" {
			p.creates++
		}
		var wait chan struct{}
		if look {
			switch p.looks++; {
			case p.looks < n:
				wait = p.open
			case p.looks == n:
				close(p.open)
			case p.looks > n+1:
				wait = p.acquired
			}
		}
		p.mu.Unlock()
		holdThenForward(w, r, forward, wait)
	})
	go func() {
		select {
		case <-p.open:
		case <-t.Context().Done():
			return
		}
		for {
			pair, _, err := agent.Client().KV().Get(key, (&api.QueryOptions{}).WithContext(t.Context()))
			if err == nil && pair != nil && pair.Session != "" {
				close(p.acquired)
				return
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-t.Context().Done():
				return
			}
		}
	}()
	return p
}

// arrivalRequest tells a runner's look at the lock key (a read without an
// index or a wait), its session create and its session list apart.
func arrivalRequest(r *http.Request, key string) (look, create, list bool) {
	q := r.URL.Query()
	look = r.Method == http.MethodGet && r.URL.Path == "/v1/kv/"+key && !q.Has("index") && !q.Has("wait")
	create = r.Method == http.MethodPut && r.URL.Path == "/v1/session/create"
	list = r.Method == http.MethodGet && r.URL.Path == "/v1/session/list"
	return look, create, list
}

// holdThenForward waits until wait is closed (nil: not at all), then
// forwards r: false when the request ended first (nothing was sent).
func holdThenForward(w http.ResponseWriter, r *http.Request, forward http.Handler, wait chan struct{}) bool {
	if wait != nil {
		select {
		case <-wait:
		case <-r.Context().Done():
			return false
		}
	}
	forward.ServeHTTP(w, r)
	return true
}

func (p *arrivalBarrier) counts() (looks, creates int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.looks, p.creates
}

// TestRunOnce_runnersArrivingTogetherCreateOneSession: five runners of
// one run, answered "key free" in the same instant (the barrier), create
// one session between them: each waits at random, looks again, and only
// the first to look acquires; the others find the key held and wait
// without a session until the run succeeds. The command runs once.
// Before the random wait every runner created a session on its first
// look (5 creates, 13 Raft writes or more where 5 is the floor).
func TestRunOnce_runnersArrivingTogetherCreateOneSession(t *testing.T) {
	t.Parallel()
	const n = 5
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	record := filepath.Join(t.TempDir(), "record")
	p := newArrivalBarrier(t, l.Key, n)
	procs := startMany(n, func(i int) *proc {
		return startRunAt(t, fmt.Sprintf("runner %d", i), p.addr, token, []string{"-lock", l.Name, "-run-id", "r1"},
			childArgs(record, fmt.Sprint(i), "-sleep", "300ms")...)
	})
	for _, pr := range procs {
		if code := pr.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", pr.name, code, pr.out.String())
		}
	}
	if runs := readRuns(t, record); len(runs) != 1 {
		t.Fatalf("the command ran %d times, want once: %+v", len(runs), runs)
	}
	looks, creates := p.counts()
	t.Logf("MEASURED %d runners answered \"key free\" together: %d looks at the key, %d session(s) created", n, looks, creates)
	if creates != 1 {
		t.Fatalf("%d runners arriving together created %d sessions, want 1 (%d looks at the key, want %d: each looks again after its wait)",
			n, creates, looks, 2*n)
	}
}

// TestRunOnce_aRunnerThatLostTheArrivalTakesOverFromACrashedHolder: two
// runners answered "key free" together (the barrier); the one that looks
// again first acquires and runs the command, the other waits without a
// session. The holder's runner is SIGKILLed (its command dies with it)
// and its session ends (as the servers end a dead node's); the waiter
// takes over after the lock-delay, within worst_case_gap (2 x ttl +
// lock_delay), recording attempt 1 crashed and running attempt 2. Before
// the arrival wait such a waiter had lost a race with its own session;
// now it never had one.
func TestRunOnce_aRunnerThatLostTheArrivalTakesOverFromACrashedHolder(t *testing.T) {
	t.Parallel()
	profile := fastProfile(t, time.Second)
	l, token := declareRunOnceWith(t, ledger.RunOnce{Period: time.Hour}, profile)
	record := filepath.Join(t.TempDir(), "record")
	p := newArrivalBarrier(t, l.Key, 2)
	procs := startMany(2, func(i int) *proc {
		return startRunAt(t, fmt.Sprintf("runner %d", i), p.addr, token, []string{"-lock", l.Name, "-run-id", "r1"},
			childArgs(record, fmt.Sprint(i), "-sleep", "5m")...)
	})
	var first *childRun
	for deadline := time.Now().Add(30 * time.Second); first == nil; time.Sleep(10 * time.Millisecond) {
		if runs := readRuns(t, record); len(runs) > 0 {
			first = runs[0]
		} else if time.Now().After(deadline) {
			t.Fatal("no command started within 30s")
		}
	}
	holder, waiter := procs[0], procs[1]
	if first.tag == "1" {
		holder, waiter = procs[1], procs[0]
	}
	waitOutput(t, waiter, "holder_session=") // waiting, without a session
	if _, creates := p.counts(); creates != 1 {
		t.Fatalf("%d sessions created, want 1 (the holder's)", creates)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	holder.wait(10 * time.Second)
	// The servers invalidate a dead node's session (or a lapsed TTL's);
	// destroying it is the same end without waiting for it.
	ended := time.Now()
	if _, err := agent.Client().Session().Destroy(first.session, nil); err != nil {
		t.Fatal(err)
	}
	var runs []*childRun
	for deadline := time.Now().Add(time.Minute); len(runs) < 2; time.Sleep(20 * time.Millisecond) {
		if runs = readRuns(t, record); time.Now().After(deadline) {
			t.Fatalf("the waiter did not take over within a minute: executions %+v\n%s", runs, waiter.out.String())
		}
	}
	takeOver := runs[1].start.Sub(ended)
	bound := 2*profile.TTL + profile.LockDelay // worst_case_gap, from the session's end here
	t.Logf("MEASURED take-over by the runner that lost the arrival, from the end of the SIGKILLed holder's session: %s (lock_delay %s; worst_case_gap %s)",
		takeOver.Round(time.Millisecond), profile.LockDelay, bound)
	if takeOver > bound {
		t.Fatalf("take-over took %s, more than %s", takeOver, bound)
	}
	if err := waiter.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waiter.wait(time.Minute)
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) < 2 || run.Attempts[0].Outcome != ledger.RunCrashed || runs[1].attempt != "2" {
		t.Fatalf("ledger run %+v, executions %+v; want attempt 1 crashed and the waiter's attempt 2", run, runs)
	}
}

// windowProxies are two proxies in front of the agent, one per runner of
// one run, that put the second runner's second look inside the first
// one's window: both first looks are held until both are in (answered
// "key free" together); the runner whose second look comes first is the
// winner, and the other's second look is held until the winner's session
// create was answered; the winner's transactions after that (its lock op)
// are held until the other has listed the sessions or created a session
// of its own. The loser thus reads the key free while the winner's
// session exists, whatever the machine's load. It counts session creates.
type windowProxies struct {
	addrs [2]string

	mu       sync.Mutex
	looks    [2]int
	winner   int // -1 until a second look arrives
	bothIn   chan struct{}
	created  chan struct{} // the winner's session create was answered
	loserSaw chan struct{} // the loser listed the sessions or created one
	creates  int
}

func newWindowProxies(t *testing.T, key string) *windowProxies {
	t.Helper()
	p := &windowProxies{winner: -1, bothIn: make(chan struct{}), created: make(chan struct{}), loserSaw: make(chan struct{})}
	closeOnce := func(c chan struct{}) {
		select {
		case <-c:
		default:
			close(c)
		}
	}
	for i := range p.addrs {
		p.addrs[i] = agentProxy(t, agent.Addr, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
			look, create, list := arrivalRequest(r, key)
			var wait chan struct{}
			p.mu.Lock()
			if create {
				p.creates++
			}
			if look {
				p.looks[i]++
				switch {
				case p.looks[i] == 1 && p.looks[1-i] < 1:
					wait = p.bothIn
				case p.looks[i] == 1:
					closeOnce(p.bothIn)
				case p.looks[i] == 2 && p.winner < 0:
					p.winner = i
				case p.looks[i] == 2:
					wait = p.created
				}
			}
			if r.Method == http.MethodPut && r.URL.Path == "/v1/txn" && p.winner == i {
				select {
				case <-p.created:
					wait = p.loserSaw
				default:
				}
			}
			loser := p.winner >= 0 && p.winner != i
			winner := p.winner == i
			p.mu.Unlock()
			if loser && create {
				closeOnce(p.loserSaw)
			}
			if !holdThenForward(w, r, forward, wait) {
				return
			}
			switch {
			case winner && create:
				closeOnce(p.created)
			case loser && list:
				closeOnce(p.loserSaw)
			}
		})
	}
	return p
}

// runOnceThrough runs two runners of run r1 of lock, each through its own
// proxy (addrs), a 300 ms command each, and returns them once both exited
// 0 and the command's one execution; it fails the test unless the command
// ran exactly once.
func runOnceThrough(t *testing.T, lock, token string, addrs [2]string) ([]*proc, *childRun) {
	t.Helper()
	record := filepath.Join(t.TempDir(), "record")
	procs := startMany(2, func(i int) *proc {
		return startRunAt(t, fmt.Sprintf("runner %d", i), addrs[i], token, []string{"-lock", lock, "-run-id", "r1"},
			childArgs(record, fmt.Sprint(i), "-sleep", "300ms")...)
	})
	for _, pr := range procs {
		if code := pr.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", pr.name, code, pr.out.String())
		}
	}
	runs := readRuns(t, record)
	if len(runs) != 1 {
		t.Fatalf("the command ran %d times, want once: %+v", len(runs), runs)
	}
	return procs, runs[0]
}

// TestRunOnce_aRunnerThatLooksInTheWinnersWindowWaitsWithoutASession: two
// runners of one run answered "key free" together; the second to look
// again finds the key still free, but the winner's session already made
// (the proxies put its look between the winner's session create and its
// lock op). It waits without a session for the winner's lock op and then
// for the success, and leaves without a write: one session created in
// all. Before the contender look it created a session of its own, raced
// with it, lost and destroyed it: 2 to 3 Raft writes more.
func TestRunOnce_aRunnerThatLooksInTheWinnersWindowWaitsWithoutASession(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	p := newWindowProxies(t, l.Key)
	procs, _ := runOnceThrough(t, l.Name, token, p.addrs)
	p.mu.Lock()
	creates, winner := p.creates, p.winner
	p.mu.Unlock()
	t.Logf("MEASURED a runner that looked again inside the winner's window: %d session(s) created by the two", creates)
	if creates != 1 {
		t.Fatalf("%d sessions created, want 1: the runner that looked inside the winner's window made one of its own\n%s",
			creates, procs[1-winner].out.String())
	}
	if out := procs[1-winner].out.String(); !strings.Contains(out, "contender_session=") {
		t.Fatalf("the loser did not wait for the winner's session:\n%s", out)
	}
}

// TestRunOnce_aContenderThatNeverTakesTheKeyIsWaitedOutInContenderWait: a
// session of the runners' name that never takes the key (a contender that
// crashed between its session's create and its lock op; another
// registry's lock of the same name) holds a runner that finds the key
// free for at most contenderWait: it then creates its own session and
// runs the command, once.
func TestRunOnce_aContenderThatNeverTakesTheKeyIsWaitedOutInContenderWait(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	id, _, err := agent.Client().Session().Create(&api.SessionEntry{Name: "consullock run " + l.Name, Node: agent.NodeName, Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = agent.Client().Session().Destroy(id, nil) })
	record := filepath.Join(t.TempDir(), "record")
	started := time.Now()
	pr := startRunAt(t, "runner", agent.Addr, token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "only")...)
	if code := pr.wait(time.Minute); code != 0 {
		t.Fatalf("runner exited %d:\n%s", code, pr.out.String())
	}
	runs := readRuns(t, record)
	if len(runs) != 1 {
		t.Fatalf("the command ran %d times, want once: %+v", len(runs), runs)
	}
	t.Logf("MEASURED a runner held by a contender that never took the key started its command %s after its start (contenderWait %s)",
		runs[0].start.Sub(started).Round(time.Millisecond), contenderWait)
	if out := pr.out.String(); !strings.Contains(out, "contender_session="+id) {
		t.Fatalf("the runner did not wait for the same-named session %s:\n%s", id, out)
	}
}

// tieProxies are two proxies in front of the agent, one per runner of one
// run, that make both runners' looks fall in the same instant: each
// runner's first and second looks at the key are held until the other's
// is in, and each session create until both have listed the sessions
// after their second looks. Both then find the key free and no
// contender, and both create a session. It counts, per runner, the
// transactions sent after its session create was answered (its lock op
// and, for the holder, its ledger writes).
type tieProxies struct {
	addrs [2]string

	mu      sync.Mutex
	looks   [2]int
	lists   [2]int
	gates   [3]chan struct{} // both first looks in, both second looks in, both listed
	created [2]bool
	txns    [2]int
	creates int
}

func newTieProxies(t *testing.T, key string) *tieProxies {
	t.Helper()
	p := &tieProxies{}
	for i := range p.gates {
		p.gates[i] = make(chan struct{})
	}
	for i := range p.addrs {
		p.addrs[i] = agentProxy(t, agent.Addr, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
			look, create, list := arrivalRequest(r, key)
			var wait chan struct{}
			p.mu.Lock()
			// gate g opens when both runners reached step g.
			reach := func(g int, mine, theirs int) {
				if theirs < mine {
					wait = p.gates[g]
				} else {
					close(p.gates[g])
				}
			}
			switch {
			case look && p.looks[i] < 2:
				p.looks[i]++
				reach(p.looks[i]-1, p.looks[i], p.looks[1-i])
			case create:
				p.creates++
				if p.lists[i] == 0 {
					t.Errorf("runner %d created a session before it listed the sessions", i)
				}
				wait = p.gates[2]
			case r.Method == http.MethodPut && r.URL.Path == "/v1/txn" && p.created[i]:
				p.txns[i]++
			}
			p.mu.Unlock()
			if !holdThenForward(w, r, forward, wait) {
				return
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			switch {
			case create:
				p.created[i] = true
			case list && p.looks[i] == 2 && p.lists[i] == 0:
				p.lists[i]++
				if p.lists[1-i] > 0 {
					close(p.gates[2])
				}
			}
		})
	}
	return p
}

// TestRunOnce_ofTwoRunnersThatLookInTheSameInstantTheLaterSessionYields:
// two runners of one run look again in the same instant, find the key
// free and no contender, and each creates a session (the proxies make it
// so). The one whose session Raft created later sees the earlier one in
// its list, destroys its own before any lock op and waits without a
// session for the success: it sends no transaction. Before the tie-break
// both sent their lock ops, and the loser's was refused: a Raft write
// more.
func TestRunOnce_ofTwoRunnersThatLookInTheSameInstantTheLaterSessionYields(t *testing.T) {
	t.Parallel()
	l, token := declareRunOnce(t, ledger.RunOnce{Period: time.Hour})
	p := newTieProxies(t, l.Key)
	procs, run := runOnceThrough(t, l.Name, token, p.addrs)
	p.mu.Lock()
	creates, txns := p.creates, p.txns
	p.mu.Unlock()
	t.Logf("MEASURED two runners that looked in the same instant: %d sessions created; transactions after each one's create: %v", creates, txns)
	if creates != 2 {
		t.Fatalf("%d sessions created, want 2 (the proxies let both create one)", creates)
	}
	holder := 0
	if run.tag == "1" {
		holder = 1
	}
	if txns[1-holder] != 0 {
		t.Fatalf("the runner that did not run sent %d transactions after its session create, want 0 (it yields before any lock op)\n%s",
			txns[1-holder], procs[1-holder].out.String())
	}
	if out := procs[1-holder].out.String(); !strings.Contains(out, "destroyed its own before any lock op") {
		t.Fatalf("the runner that did not run did not yield:\n%s", out)
	}
}
