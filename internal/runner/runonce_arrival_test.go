package runner

import (
	"fmt"
	"net/http"
	"path/filepath"
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
		if wait != nil {
			select {
			case <-wait:
			case <-r.Context().Done():
				return
			}
		}
		forward.ServeHTTP(w, r)
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
