package runner

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Runners of a lock declared with waiters = "queue" (lockmodel.WaitersQueue,
// lockproto/queue.go): each waiter keeps an entry under <prefix>/.queue/, and
// only the first in line tries for the lock.

// declareQueued declares a queued mutex (a run-once job with ro) with the
// 10s minimum TTL and a 1s lock-delay, and mints the worker token as
// consullock_acl_policy renders it (queue_prefixes unless withoutGrant).
func declareQueued(t testing.TB, ro *ledger.RunOnce, withoutGrant bool) (lockmodel.Lock, string) {
	t.Helper()
	return declareWithWaiters(t, lockmodel.WaitersQueue, ro, fastProfile(t, time.Second), withoutGrant)
}

// declareWithWaiters declares a mutex whose waiters are waiters (a
// run-once job with ro) with profile p, and mints its worker token
// (queueToken).
func declareWithWaiters(t testing.TB, waiters string, ro *ledger.RunOnce, p *lockmodel.SessionProfile, withoutGrant bool) (lockmodel.Lock, string) {
	t.Helper()
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: testenv.UniquePrefix(t.Name()), Waiters: waiters, RunOnce: ro}, p)
	return l, queueToken(t, l, withoutGrant)
}

// queueToken is the worker token of l rendered by aclrules.RenderRules:
// the lock key, the queue prefix (unless withoutGrant), the run ledger of a
// run-once lock, sessions on the agent's node, and read on the registry.
func queueToken(t testing.TB, l lockmodel.Lock, withoutGrant bool) string {
	t.Helper()
	in := aclrules.RulesInput{LockKeys: []string{l.Key}, SessionNodePrefixes: []string{agent.NodeName}}
	if !withoutGrant {
		in.QueuePrefixes = []string{l.Prefix}
	}
	if l.RunOnce != nil {
		in.RunLedgerKeys = []string{ledgerKey(l)}
	}
	rules := aclrules.RenderRules(in) + fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix+"/")
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

// queueEntries lists l's waiter queue consistently.
func queueEntries(t testing.TB, l lockmodel.Lock) api.KVPairs {
	t.Helper()
	pairs, _, err := agent.Client().KV().List(lockmodel.WaiterQueuePrefix(l), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	return pairs
}

// waitQueued waits until runner p stands in the queue: first in line, or
// behind another waiter.
func waitQueued(t testing.TB, p *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.out.String(), "waiting in the queue") && !strings.Contains(p.out.String(), "first in the waiter queue") {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not queue:\n%s", p.name, p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var sessionCreated = regexp.MustCompile(`msg="session created"[^\n]* session=([0-9a-f-]+)`)

// sessionOf is the session runner p created first.
func sessionOf(t testing.TB, p *proc) string {
	t.Helper()
	m := sessionCreated.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("%s logged no session:\n%s", p.name, p.out.String())
	}
	return m[1]
}

// Four runners started one after another while a holder holds run in
// their arrival order, one at a time, and leave the queue empty.
func TestQueue_runnersRunInArrivalOrder(t *testing.T) {
	t.Parallel()
	l, token := declareQueued(t, nil, false)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	var ws []*proc
	for i := range 4 {
		tag := fmt.Sprintf("w%d", i+1)
		p := startRun(t, tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-sleep", "200ms")...)
		waitQueued(t, p)
		ws = append(ws, p)
	}
	holder.closeStdin()
	for _, p := range append([]*proc{holder}, ws...) {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	runs := readRuns(t, record)
	var order []string
	for _, r := range runs {
		order = append(order, r.tag)
	}
	if got := strings.Join(order, ","); got != "holder,w1,w2,w3,w4" {
		t.Fatalf("commands ran in the order %s; want holder,w1,w2,w3,w4", got)
	}
	if n := maxConcurrent(runs); n != 1 {
		t.Fatalf("%d commands ran at once", n)
	}
	if left := queueEntries(t, l); len(left) != 0 {
		t.Fatalf("queue entries left: %+v", left)
	}
}

// Without the queue grant the runner says which grant is missing (and no
// token), races for the lock as without a queue, and runs its command.
func TestQueue_withoutTheGrantWarnsAndRaces(t *testing.T) {
	t.Parallel()
	l, token := declareQueued(t, nil, true)
	record := filepath.Join(t.TempDir(), "record")
	p := startRun(t, "runner", token, []string{"-lock", l.Name}, childArgs(record, "r", "-sleep", "10ms")...)
	if code := p.wait(time.Minute); code != 0 {
		t.Fatalf("runner exited %d:\n%s", code, p.out.String())
	}
	out := p.out.String()
	grant := `key_prefix \"` + l.Prefix + `/.queue/\" write (consullock_acl_policy queue_prefixes)`
	if !strings.Contains(out, "cannot queue for the lock") || !strings.Contains(out, grant) {
		t.Fatalf("the runner does not name the missing grant %s:\n%s", grant, out)
	}
	if strings.Contains(out, token) {
		t.Fatal("the token is in the log")
	}
	if runs := readRuns(t, record); len(runs) != 1 {
		t.Fatalf("runs = %+v; want the command run once", runs)
	}
}

// A queued runner whose -timeout passes exits 124 and leaves no entry.
func TestQueue_timeoutWhileQueuedLeavesNoEntry(t *testing.T) {
	t.Parallel()
	l, token := declareQueued(t, nil, false)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	first := startRun(t, "first", token, []string{"-lock", l.Name}, childArgs(record, "first", "-sleep", "10ms")...)
	waitQueued(t, first)
	late := startRun(t, "late", token, []string{"-lock", l.Name, "-timeout", "2s"}, childArgs(record, "late", "-sleep", "10ms")...)
	waitQueued(t, late)
	lateSession := sessionOf(t, late)
	if code := late.wait(time.Minute); code != ExitTimeout {
		t.Fatalf("late exited %d, want %d:\n%s", code, ExitTimeout, late.out.String())
	}
	for _, e := range queueEntries(t, l) {
		if strings.HasSuffix(e.Key, "/"+lateSession) {
			t.Fatalf("the timed-out runner's entry is left: %+v", e)
		}
	}
	holder.closeStdin()
	for _, p := range []*proc{holder, first} {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
}

// A runner first in line that is SIGKILLed (or SIGSTOPped) keeps its
// session, and its entry, until Consul ends the session by TTL: the
// runner behind it acquires after that, never while another command
// runs. The stopped one, once thawed, finds its session gone, queues
// again and runs after.
func TestQueue_firstInLineKilledOrStopped(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			l, token := declareQueued(t, nil, false)
			record := filepath.Join(t.TempDir(), "record")
			holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
			waitStarted(t, record, "holder")
			first := startRun(t, "first", token, []string{"-lock", l.Name}, childArgs(record, "first", "-sleep", "100ms")...)
			waitOutput(t, first, "first in the waiter queue")
			firstSession := sessionOf(t, first)
			next := startRun(t, "next", token, []string{"-lock", l.Name}, childArgs(record, "next", "-sleep", "100ms")...)
			waitOutput(t, next, "waiting in the queue")
			signalled := time.Now()
			if err := first.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			holder.closeStdin()
			if code := holder.wait(time.Minute); code != 0 {
				t.Fatalf("holder exited %d", code)
			}
			waitStarted(t, record, "next")
			if info, _, err := agent.Client().Session().Info(firstSession, &api.QueryOptions{RequireConsistent: true}); err != nil || info != nil {
				t.Fatalf("next started while the first in line's session lives (%v, %v)", info, err)
			}
			if code := next.wait(time.Minute); code != 0 {
				t.Fatalf("next exited %d:\n%s", code, next.out.String())
			}
			for _, r := range readRuns(t, record) {
				if r.tag == "next" {
					t.Logf("MEASURED %s first in line (ttl 10s): next started %.1fs after the signal, %.1fs after the holder exited",
						sig, r.start.Sub(signalled).Seconds(), r.start.Sub(holder.exited).Seconds())
				}
			}
			if sig == syscall.SIGSTOP {
				if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				if code := first.wait(time.Minute); code != 0 {
					t.Fatalf("first exited %d after the thaw:\n%s", code, first.out.String())
				}
			}
			if n := maxConcurrent(readRuns(t, record)); n != 1 {
				t.Fatalf("%d commands ran at once", n)
			}
			// The entry Consul cleared at the session's end was deleted by
			// the runner behind it.
			if left := queueEntries(t, l); len(left) != 0 {
				t.Fatalf("queue entries left: %+v", left)
			}
		})
	}
}

// `consul lock` racers (which do not queue) and queued runners on the same
// prefix: never two commands at once, and everyone runs. Only the lock
// transaction decides who holds; the queue only decides which runner tries.
func TestQueue_consulLockRacersAndQueuedRunnersNeverOverlap(t *testing.T) {
	t.Parallel()
	l, token := declareQueued(t, nil, false)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	var ps []*proc
	for i := range 3 {
		tag := fmt.Sprintf("q%d", i+1)
		p := startRun(t, tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-sleep", "300ms")...)
		waitQueued(t, p)
		ps = append(ps, p)
		tag = fmt.Sprintf("c%d", i+1)
		ps = append(ps, startConsulLock(t, tag, 1, l.Prefix, childArgs(record, tag, "-sleep", "300ms")...))
	}
	waitForSessionsMatching(t, isConsulLockSession(l.Prefix), 3)
	holder.closeStdin()
	for _, p := range append([]*proc{holder}, ps...) {
		if code := p.wait(2 * time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	runs := readRuns(t, record)
	if len(runs) != 7 {
		t.Fatalf("%d commands ran, want 7", len(runs))
	}
	if n := maxConcurrent(runs); n != 1 {
		t.Fatalf("%d commands ran at once", n)
	}
}

// A run-once job on a queued lock: queued waiters of a run leave when the
// ledger shows it succeeded (their entries with them), and a waiter of
// another run takes the lock at the hand-over.
func TestQueue_runOnceWaitersLeaveTheQueue(t *testing.T) {
	t.Parallel()
	l, token := declareQueued(t, &ledger.RunOnce{Period: time.Hour}, false)
	record := filepath.Join(t.TempDir(), "record")
	holder := startRun(t, "holder", token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "holder", "-wait-stdin")...)
	waitStarted(t, record, "holder")
	same := startRun(t, "same run", token, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "same")...)
	waitQueued(t, same)
	other := startRun(t, "other run", token, []string{"-lock", l.Name, "-run-id", "r2"}, childArgs(record, "other", "-sleep", "10ms")...)
	waitQueued(t, other)
	holder.closeStdin()
	for _, p := range []*proc{holder, same, other} {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	if !strings.Contains(same.out.String(), "run already succeeded") {
		t.Fatalf("the waiter of the same run did not see it succeed:\n%s", same.out.String())
	}
	var tags []string
	for _, r := range readRuns(t, record) {
		tags = append(tags, r.tag)
	}
	if got := strings.Join(tags, ","); got != "holder,other" {
		t.Fatalf("commands ran: %s; want holder,other", got)
	}
	if left := queueEntries(t, l); len(left) != 0 {
		t.Fatalf("queue entries left: %+v", left)
	}
}

// handoverCost counts, through the counting proxy, the Consul requests
// (renewals left out) and refused lock transactions of one clean hand-over
// with n waiters of a lock declared with waiters (queue or race), from the
// end of the holder's command until the herd is quiet again.
func handoverCost(t *testing.T, waiters string, n int) (requests, refused int) {
	t.Helper()
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: testenv.UniquePrefix(t.Name()), Waiters: waiters}, fastProfile(t, time.Second))
	token := queueToken(t, l, false)
	proxy := newRecordingProxy(t)
	record := filepath.Join(t.TempDir(), "record")
	start := func(tag string) *proc {
		return startRunAt(t, tag, proxy.addr, token, []string{"-lock", l.Name}, childArgs(record, tag, "-wait-stdin")...)
	}
	holder := start("holder")
	waitStarted(t, record, "holder")
	ps := []*proc{holder}
	for i := range n {
		p := start(fmt.Sprintf("w%d", i+1))
		waitHerdReady(t, p, record)
		ps = append(ps, p)
	}
	waitQuiet(t, proxy, 500*time.Millisecond)
	from := time.Now()
	holder.closeStdin()
	waitNextStart(t, record, "holder")
	if code := holder.wait(time.Minute); code != 0 {
		t.Fatalf("holder exited %d:\n%s", code, holder.out.String())
	}
	c := proxy.count(from, waitQuiet(t, proxy, 500*time.Millisecond))
	t.Logf("MEASURED waiters=%s n=%d: %d requests (renewals left out), %d refused lock transactions in one hand-over:\n%s",
		waiters, n, c.total-c.renewals, c.refusedLocks, proxy.timeline(from))
	for _, p := range ps[1:] {
		p.closeStdin()
	}
	for _, p := range ps {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, p.out.String())
		}
	}
	if m := maxConcurrent(readRuns(t, record)); m != 1 {
		t.Fatalf("%d commands ran at once", m)
	}
	return c.total - c.renewals, c.refusedLocks
}

// With waiters = "queue" a hand-over wakes one waiter: no refused lock
// transaction, and the same requests with 10 waiters as with 2. Racing
// waiters, on the same path, cost more with more waiters.
func TestQueue_handoverCostIsFlat(t *testing.T) {
	t.Parallel()
	cost := map[string][2]int{}
	for _, n := range []int{2, 10} {
		reqs, refused := handoverCost(t, lockmodel.WaitersQueue, n)
		if refused != 0 {
			t.Errorf("%d refused lock transactions in a hand-over to %d queued waiters; want 0", refused, n)
		}
		cost[lockmodel.WaitersQueue] = [2]int{cost[lockmodel.WaitersQueue][1], reqs}
	}
	if q := cost[lockmodel.WaitersQueue]; q[0] != q[1] {
		t.Errorf("requests per hand-over: %d with 2 queued waiters, %d with 10; want the same", q[0], q[1])
	}
	for _, n := range []int{2, 10} {
		reqs, _ := handoverCost(t, lockmodel.WaitersRace, n)
		cost[lockmodel.WaitersRace] = [2]int{cost[lockmodel.WaitersRace][1], reqs}
	}
	if r := cost[lockmodel.WaitersRace]; r[1] <= r[0] {
		t.Errorf("racing waiters: %d requests per hand-over with 2, %d with 10; want more with more", r[0], r[1])
	}
	t.Logf("MEASURED requests per hand-over, 2 and 10 waiters: queue %v, race %v", cost[lockmodel.WaitersQueue], cost[lockmodel.WaitersRace])
}

// A holder service on a queued lock: the waiter that takes over registers
// its instance, and the catalog then names it alone.
func TestQueue_holderServiceNamesTheQueuedWaiterThatTookOver(t *testing.T) {
	t.Parallel()
	service := fmt.Sprintf("hq%d-%d", nameCounter.Add(1), time.Now().UnixNano()%1e6)
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: testenv.UniquePrefix(t.Name()), Waiters: lockmodel.WaitersQueue,
		HolderService: &holdersvc.Service{Name: service}}, holderProfile(t))
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{l.Key}, QueuePrefixes: []string{l.Prefix},
		SessionNodePrefixes: []string{agent.NodeName}, HolderServices: []string{service}})
	rules += fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix+"/")
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "record")
	args := func(port int) []string {
		return []string{"-lock", l.Name, "-grace", "1s", "-service-port", fmt.Sprint(port)}
	}
	a := startRun(t, "A", tok.SecretID, args(20101), childArgs(record, "A", "-wait-stdin")...)
	waitStarted(t, record, "A")
	waitOutput(t, a, "holder service registered")
	b := startRun(t, "B", tok.SecretID, args(20102), childArgs(record, "B", "-wait-stdin")...)
	waitQueued(t, b)
	a.closeStdin()
	if code := a.wait(time.Minute); code != 0 {
		t.Fatalf("A exited %d:\n%s", code, a.out.String())
	}
	waitStarted(t, record, "B")
	waitOutput(t, b, "holder service registered")
	entries, _, err := agent.Client().Health().Service(service, "", false, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Service.Meta[holdersvc.MetaSession] != sessionOf(t, b) {
		t.Fatalf("instances of %s after the hand-over: %d; want B's alone", service, len(entries))
	}
	b.closeStdin()
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("B exited %d:\n%s", code, b.out.String())
	}
}
