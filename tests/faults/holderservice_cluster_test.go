package faults

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Holder service on the cluster (issue 23): `consullock run` holders of a
// lock with holder_service, real DNS queries for <name>.service.consul SRV
// sent every 50 ms to the DNS interface of a member that is not the
// holder's (a server, or the other client), through a hand-over, a holder's
// runner killed, the holder's client agent frozen, a semaphore of 3, and
// agentless holders (the instance in the catalog on the runners' node) whose
// link to their server is cut or whose server is killed. The assertions are
// on ordering: no answer to a query sent after the next holder's command
// started names a former holder, and a semaphore is never answered with
// more holders than its limit. The figures are logged. Every case runs on
// the shared cluster, one after the other.
//
// The cluster's DNS runs with dns_config.allow_stale = false
// (testenv.ClusterOptions.DNS): a query is answered from the leader's
// state. With Consul's default (true) a follower answers from its own copy,
// which trails the leader by its replication lag: in one run of the
// agentless cut, the third server named the old holder to a query sent
// 11 ms after the next holder's command started, although the next holder
// had deregistered it (an acknowledged write) before starting. No holder
// can wait for every follower; the guides say so.

// hsProfile is the agent profile of the runner's holder service tests: the
// holder check's TTL is 2s, a take-over needs ttl + lock_delay = 15s after
// a holder's runner dies while its node lives (lock_delay after a destroy).
var hsProfile = lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 5 * time.Second, RenewEvery: 500 * time.Millisecond}

// hsAgentlessProfile is TTL only, as the agentless guide's, with a shorter
// ttl and lock_delay to keep the test short.
var hsAgentlessProfile = lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: 5 * time.Second, NodeChecks: []string{}}

var hsDNSOnce sync.Once

// hsSetUp lets DNS answer (the anonymous token, which DNS queries use, gets
// service and node read, as every DNS user sets up) and registers the
// agentless runners' node.
func hsSetUp(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	hsDNSOnce.Do(func() {
		admin := clusterAdmin(c)
		p, _, err := admin.ACL().PolicyCreate(&api.ACLPolicy{Name: "faults-dns-read", Rules: `service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`}, nil)
		if err != nil {
			t.Fatal(err)
		}
		anon, _, err := admin.ACL().TokenRead("00000000-0000-0000-0000-000000000002", nil)
		if err != nil {
			t.Fatal(err)
		}
		anon.Policies = append(anon.Policies, &api.ACLTokenPolicyLink{ID: p.ID})
		if _, _, err := admin.ACL().TokenUpdate(anon, nil); err != nil {
			t.Fatal(err)
		}
	})
	setUpAgentless(t, c)
}

// hsLock is a declared lock with holder_service on the cluster, and a
// token with the worker rules for it.
type hsLock struct {
	lock    lockmodel.Lock
	service string
	token   string
}

var hsCounter struct {
	sync.Mutex
	n int
}

// hsDeclare declares a lock of limit holders with holder_service and its
// profile, and mints the worker rules: the lock's key (prefix), session
// write on the client nodes and the runners' node, service write on the
// name, node read on the runners' node (to find former holders' instances
// there), and read on the registry.
func hsDeclare(t *testing.T, c *testenv.Cluster, limit int, p lockmodel.SessionProfile) hsLock {
	t.Helper()
	hsCounter.Lock()
	hsCounter.n++
	n := hsCounter.n
	hsCounter.Unlock()
	name := fmt.Sprintf("hs-%d-%d", n, time.Now().UnixNano()%1e6)
	admin := clusterAdmin(c)
	p.Name = name
	l := lockmodel.Lock{Name: name, Prefix: "faults/" + name, Limit: limit, SessionDefaults: name,
		HolderService: &holdersvc.Service{Name: name}}
	prec, err := record.EncodeSessionProfileRecord(p)
	if err != nil {
		t.Fatal(err)
	}
	lrec, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	norm, err := l.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	var value []byte
	if norm.IsSemaphore() {
		value = lockmodel.NewSemaphoreValue(norm.Limit)
	}
	for _, kv := range []*api.KVPair{
		{Key: lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindSessionDefaults, name), Value: prec},
		{Key: lockmodel.RegistryKey(lockmodel.DefaultRegistryPrefix, lockmodel.KindLock, name), Value: lrec},
		{Key: norm.Key, Value: value, Flags: norm.Flags()},
	} {
		if _, err := admin.KV().Put(kv, nil); err != nil {
			t.Fatal(err)
		}
	}
	in := aclrules.RulesInput{HolderServices: []string{name}, SessionNodePrefixes: []string{agentlessRunnersNode}}
	for _, n := range c.Clients {
		in.SessionNodePrefixes = append(in.SessionNodePrefixes, n.Name)
	}
	if norm.IsSemaphore() {
		in.SemaphorePrefixes = []string{norm.Prefix}
	} else {
		in.LockKeys = []string{norm.Key}
	}
	rules := aclrules.RenderRules(in) + fmt.Sprintf("key_prefix %q { policy = \"read\" }\nnode %q { policy = \"read\" }\n",
		lockmodel.DefaultRegistryPrefix+"/", agentlessRunnersNode)
	pol, _, err := admin.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := admin.ACL().TokenCreate(&api.ACLToken{Description: name, Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hsLock{lock: norm, service: name, token: tok.SecretID}
}

// hsRunner is one `consullock run` process; its log is kept in memory.
type hsRunner struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (r *hsRunner) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.Write(p)
}

func (r *hsRunner) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// hsStart starts `consullock run -lock L -service-port port [extra] --
// sleep work` against addr.
func hsStart(t *testing.T, name string, l hsLock, addr string, port int, work time.Duration, extra ...string) *hsRunner {
	t.Helper()
	args := append([]string{"run", "-lock", l.lock.Name, "-grace", "1s", "-service-port", strconv.Itoa(port)}, extra...)
	args = append(args, "--", "sleep", strconv.FormatFloat(work.Seconds(), 'f', 3, 64))
	r := &hsRunner{t: t, name: name, done: make(chan struct{})}
	r.cmd = exec.Command(runnerBin, args...)
	r.cmd.Env = append(cleanEnv(), "CONSUL_HTTP_ADDR="+addr, "CONSUL_HTTP_TOKEN="+l.token)
	r.cmd.Stdout, r.cmd.Stderr = r, r
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(10 * time.Second):
				_ = r.cmd.Process.Kill()
				<-r.done
			}
		}
		if t.Failed() {
			t.Logf("--- runner %s:\n%s", r.name, r.log())
		}
	})
	return r
}

var hsLogTime = regexp.MustCompile(`^time=(\S+) `)

// at waits (up to within) for the runner to log msg and returns the
// line's time and text.
func (r *hsRunner) at(msg string, within time.Duration) (time.Time, string) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, line := range strings.Split(r.log(), "\n") {
			if strings.Contains(line, `msg="`+msg+`"`) || strings.Contains(line, "msg="+msg+" ") {
				m := hsLogTime.FindStringSubmatch(line)
				if m == nil {
					r.t.Fatalf("runner %s: no time in %q", r.name, line)
				}
				at, err := time.Parse(time.RFC3339Nano, m[1])
				if err != nil {
					r.t.Fatal(err)
				}
				return at, line
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("runner %s did not log %q within %s:\n%s", r.name, msg, within, r.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childPID is the command's PID from the runner's "command started" line.
func (r *hsRunner) childPID() int {
	_, line := r.at("command started", time.Second)
	m := regexp.MustCompile(` pid=(\d+)`).FindStringSubmatch(line)
	if m == nil {
		r.t.Fatalf("no pid in %q", line)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// wait waits (up to 30s) for the runner to exit and returns its exit code.
func (r *hsRunner) wait() int {
	r.t.Helper()
	const within = 30 * time.Second
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		r.t.Fatalf("runner %s did not exit within %s:\n%s", r.name, within, r.log())
		return -1
	}
}

// hsFormer is the -service-port of the holder that each case replaces.
const hsFormer = 21001

// hsNeverAfter fails when an answer to a query sent after next names the
// former holder (port hsFormer).
func hsNeverAfter(t *testing.T, what string, samples testenv.DNSSamples, next time.Time) time.Time {
	t.Helper()
	p := hsFormer
	last := samples.LastWith(p)
	if last.IsZero() {
		t.Fatalf("%s: DNS never named the former holder (port %d) in %d answers", what, p, len(samples))
	}
	if !last.Before(next) {
		t.Fatalf("%s: DNS named the former holder (port %d) in an answer to a query sent %s after the next holder's command started",
			what, p, last.Sub(next).Round(time.Millisecond))
	}
	return last
}

// hsWaitNamed waits until DNS at dnsAddr names the holder at port
// hsFormer.
func hsWaitNamed(t *testing.T, service, dnsAddr string) {
	t.Helper()
	p := hsFormer
	res := testenv.DNSResolver(dnsAddr)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ports, err := testenv.LookupPorts(ctx, res, service)
		cancel()
		if slices.Contains(ports, p) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("DNS at %s never named port %d: %v %v", dnsAddr, p, ports, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterHolderService runs the cases one after the other on the
// shared cluster; each logs its figures.
func TestClusterHolderService(t *testing.T) {
	c := sharedCluster(t)
	hsSetUp(t, c)
	dns := c.Servers[1].DNSAddr // a server (allow_stale = false: it answers from the leader), whatever happens to a client
	if dns == "" {
		t.Fatal("the shared cluster has no DNS interface")
	}
	t.Run("cleanHandOver", func(t *testing.T) { hsCleanHandOver(t, c, dns) })
	t.Run("runnerKilled", func(t *testing.T) { hsRunnerKilled(t, c, dns) })
	t.Run("agentFrozen", func(t *testing.T) { hsAgentFrozen(t, c, dns) })
	t.Run("semaphoreOfThree", func(t *testing.T) { hsSemaphore(t, c, dns) })
	t.Run("agentlessLinkCut", func(t *testing.T) { hsAgentless(t, c, agentlessCut) })
	t.Run("agentlessServerKilled", func(t *testing.T) { hsAgentless(t, c, agentlessServerKill) })
}

// hsCleanHandOver: A (client-1) exits, B (client-2) takes over.
func hsCleanHandOver(t *testing.T, c *testenv.Cluster, dns string) {
	l := hsDeclare(t, c, 1, hsProfile)
	a := hsStart(t, "A", l, c.Clients[0].Addr, hsFormer, 6*time.Second)
	a.at("holder service registered", 30*time.Second)
	hsWaitNamed(t, l.service, dns)
	b := hsStart(t, "B", l, c.Clients[1].Addr, 21002, time.Second)
	b.at("waiting for the lock", 30*time.Second)
	stop := testenv.SampleDNS(testenv.DNSResolver(dns), l.service)
	if code := a.wait(); code != 0 {
		t.Fatalf("A exit code %d", code)
	}
	bStart, _ := b.at("command started", 30*time.Second)
	if code := b.wait(); code != 0 {
		t.Fatalf("B exit code %d", code)
	}
	samples, failed := stop()
	aEnd, _ := a.at("command exited", time.Second)
	lastA := hsNeverAfter(t, "clean hand-over", samples, bStart)
	for _, s := range samples {
		if len(s.Ports) > 1 {
			t.Fatalf("clean hand-over: DNS answered two holders of a mutex: %v", s.Ports)
		}
	}
	t.Logf("cluster, clean hand-over (client-1 to client-2, DNS of %s): the last answer naming A was to a query sent %s after A's command ended; "+
		"B's command started %s after A's ended; %d answers, %d failed queries",
		c.Servers[1].Name, lastA.Sub(aEnd).Round(time.Millisecond), bStart.Sub(aEnd).Round(time.Millisecond), len(samples), len(failed))
}

// hsRunnerKilled: A's runner (client-1) is SIGKILLed; its check goes
// critical on its agent before B (client-2) can acquire.
func hsRunnerKilled(t *testing.T, c *testenv.Cluster, dns string) {
	l := hsDeclare(t, c, 1, hsProfile)
	a := hsStart(t, "A", l, c.Clients[0].Addr, hsFormer, 2*time.Minute)
	a.at("holder service registered", 30*time.Second)
	hsWaitNamed(t, l.service, dns)
	b := hsStart(t, "B", l, c.Clients[1].Addr, 21002, time.Second)
	b.at("waiting for the lock", 30*time.Second)
	stop := testenv.SampleDNS(testenv.DNSResolver(dns), l.service)
	time.Sleep(300 * time.Millisecond)
	child := a.childPID()
	killed := time.Now()
	_ = a.cmd.Process.Kill()
	_ = syscall.Kill(child, syscall.SIGKILL)
	bStart, _ := b.at("command started", 90*time.Second)
	if code := b.wait(); code != 0 {
		t.Fatalf("B exit code %d", code)
	}
	samples, failed := stop()
	lastA := hsNeverAfter(t, "runner killed", samples, bStart)
	t.Logf("cluster, A's runner SIGKILLed (client-1; DNS of %s): DNS named A until %s after the kill (check TTL %s); B's command started %s after the kill; "+
		"%d answers, %d failed queries", c.Servers[1].Name, lastA.Sub(killed).Round(time.Millisecond),
		lockmodel.FormatDuration(lockmodel.NewHolderCheck(hsProfile.Resolve()).TTL), bStart.Sub(killed).Round(time.Millisecond), len(samples), len(failed))
}

// hsAgentFrozen: A's client agent (client-1) is frozen (SIGSTOP) until B
// (client-2) has started, then thawed: A's node fails its serfHealth, and
// neither before B started nor after the thaw does DNS name A.
func hsAgentFrozen(t *testing.T, c *testenv.Cluster, dns string) {
	l := hsDeclare(t, c, 1, hsProfile)
	frozen := c.Clients[0]
	a := hsStart(t, "A", l, frozen.Addr, hsFormer, 2*time.Minute)
	a.at("holder service registered", 30*time.Second)
	hsWaitNamed(t, l.service, dns)
	b := hsStart(t, "B", l, c.Clients[1].Addr, 21002, 3*time.Second)
	b.at("waiting for the lock", 30*time.Second)
	stop := testenv.SampleDNS(testenv.DNSResolver(dns), l.service)
	time.Sleep(300 * time.Millisecond)
	froze := time.Now()
	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := frozen.Thaw(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw)
	bStart, _ := b.at("command started", 90*time.Second)
	thaw()
	thawAt := time.Now()
	if code := b.wait(); code != 0 {
		t.Fatalf("B exit code %d", code)
	}
	time.Sleep(2 * time.Second) // after the thaw: the agent syncs again
	samples, failed := stop()
	sampled := time.Since(thawAt)
	// While the agent is frozen its node fails serfHealth, so no answer
	// names A once B has started. When the agent resumes, its node passes
	// again a moment before the agent publishes A's expired check: DNS
	// may name A in that moment (the holder DNS guide says so), and no
	// longer by the time B's command ends.
	frozenSamples, resumed := splitAt(samples, thawAt)
	lastA := hsNeverAfter(t, "agent frozen", frozenSamples, bStart)
	bEnd, _ := b.at("command exited", time.Second)
	afterThaw := "not at all"
	if last := resumed.LastWith(hsFormer); !last.IsZero() {
		afterThaw = "until " + last.Sub(thawAt).Round(time.Millisecond).String() + " after the thaw"
		if !last.Before(bEnd) {
			t.Errorf("agent frozen: DNS still named A %s after the thaw, after B's command ended", last.Sub(thawAt))
		}
	}
	aDead := "still running"
	if at, ok := hsExited(a); ok {
		aDead = at.Sub(froze).Round(time.Millisecond).String() + " after the freeze"
		if !at.Before(bStart) {
			t.Errorf("agent frozen: A's command ended %s after B's started", at.Sub(bStart))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("the cluster did not recover: %v", err)
	}
	t.Logf("cluster, A's client agent frozen (%s; DNS of %s): DNS named A until %s after the freeze; B's command started %s after the freeze "+
		"(thawed then); after the thaw DNS named A %s; A's command ended %s; answers sampled %s after the thaw; %d answers, %d failed queries",
		frozen.Name, c.Servers[1].Name, lastA.Sub(froze).Round(time.Millisecond), bStart.Sub(froze).Round(time.Millisecond),
		afterThaw, aDead, sampled.Round(time.Millisecond), len(samples), len(failed))
}

// splitAt splits samples into those sent before t and the rest.
func splitAt(samples testenv.DNSSamples, t time.Time) (before, after testenv.DNSSamples) {
	i := 0
	for i < len(samples) && samples[i].Sent.Before(t) {
		i++
	}
	return samples[:i], samples[i:]
}

// hsExited is when A's runner logged its command's end, if it did.
func hsExited(r *hsRunner) (time.Time, bool) {
	for _, msg := range []string{"command exited", "lock lost: the command was stopped"} {
		if strings.Contains(r.log(), `msg="`+msg+`"`) {
			at, _ := r.at(msg, 0)
			return at, true
		}
	}
	return time.Time{}, false
}

// hsSemaphore: three holders on two client nodes and a fourth waiting;
// DNS answers the three, never more; one exits and the waiter takes its
// slot: no answer to a query sent after the waiter's command started names
// the one that left.
func hsSemaphore(t *testing.T, c *testenv.Cluster, dns string) {
	l := hsDeclare(t, c, 3, hsProfile)
	var hs []*hsRunner
	for i := range 3 {
		work := 2 * time.Minute
		if i == 0 {
			work = 8 * time.Second
		}
		hs = append(hs, hsStart(t, fmt.Sprintf("H%d", i+1), l, c.Clients[i%2].Addr, hsFormer+i, work))
	}
	for _, h := range hs {
		h.at("holder service registered", 30*time.Second)
	}
	stop := testenv.SampleDNS(testenv.DNSResolver(dns), l.service)
	w := hsStart(t, "W", l, c.Clients[1].Addr, 21004, time.Second)
	w.at("waiting for the lock", 30*time.Second)
	if code := hs[0].wait(); code != 0 {
		t.Fatalf("H1 exit code %d", code)
	}
	wStart, _ := w.at("command started", 30*time.Second)
	if code := w.wait(); code != 0 {
		t.Fatalf("W exit code %d", code)
	}
	samples, failed := stop()
	three := 0
	for _, s := range samples {
		if len(s.Ports) > 3 {
			t.Fatalf("semaphore of 3: DNS answered %d holders: %v", len(s.Ports), s.Ports)
		}
		if len(s.Ports) == 3 {
			three++
		}
	}
	if three == 0 {
		t.Fatalf("semaphore of 3: DNS never answered 3 holders in %d answers", len(samples))
	}
	h1End, _ := hs[0].at("command exited", time.Second)
	last := hsNeverAfter(t, "semaphore", samples, wStart)
	t.Logf("cluster, semaphore of 3 (client-1 and client-2; DNS of %s): 3 SRV answers in %d of %d answers, never more; H1's last answer was to a "+
		"query sent %s after its command ended; W took its slot %s after it; %d failed queries",
		c.Servers[1].Name, three, len(samples), last.Sub(h1End).Round(time.Millisecond), wStart.Sub(h1End).Round(time.Millisecond), len(failed))
	for _, h := range hs[1:] {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		h.wait()
	}
}

// hsAgentless: agentless runners (no client agent, each pointed at a
// server through a link, -node consul-lock-runners, TTL only); the
// holder's instance is in the catalog on the runners' node. Its link is
// cut, or its server killed: nobody runs a catalog check, so DNS names it
// until the next holder, on another server, deregisters it before its
// command starts.
func hsAgentless(t *testing.T, c *testenv.Cluster, fault agentlessFault) {
	l := hsDeclare(t, c, 1, hsAgentlessProfile)
	var links [2]*testenv.Link
	for i := range links {
		lk, err := testenv.NewLink("127.0.0.1:0", c.Servers[i].Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(lk.Close)
		links[i] = lk
	}
	dns := c.Servers[2].DNSAddr // neither runner's server
	args := []string{"-node", agentlessRunnersNode}
	a := hsStart(t, "A", l, links[0].Addr(), hsFormer, 2*time.Minute, args...)
	_, line := a.at("holder service registered", 30*time.Second)
	if !strings.Contains(line, "via=catalog") {
		t.Fatalf("A registered its instance %q, want via=catalog", line)
	}
	hsWaitNamed(t, l.service, dns)
	b := hsStart(t, "B", l, links[1].Addr(), 21002, time.Second, args...)
	b.at("waiting for the lock", 30*time.Second)
	stop := testenv.SampleDNS(testenv.DNSResolver(dns), l.service)
	time.Sleep(300 * time.Millisecond)
	child := a.childPID()
	exit := watchExit(t, child)
	at := time.Now()
	server := c.Servers[0]
	switch fault {
	case agentlessCut:
		links[0].Cut()
		t.Cleanup(links[0].Heal)
	case agentlessServerKill:
		server.Kill()
		t.Cleanup(func() {
			if !server.Running() {
				_ = server.Start(context.Background())
			}
		})
	}
	bStart, _ := b.at("command started", 2*time.Minute)
	if _, line := b.at("former holder's instance deregistered", time.Second); line == "" {
		t.Fatal("B did not deregister A's instance")
	}
	if code := b.wait(); code != 0 {
		t.Fatalf("B exit code %d", code)
	}
	samples, failed := stop()
	lastA := hsNeverAfter(t, "agentless, "+string(fault), samples, bStart)
	aDead := "still running"
	if when, ok := exit.at(); ok {
		aDead = when.Sub(at).Round(time.Millisecond).String()
		if !when.Before(bStart) {
			t.Errorf("A's command died %s after B's started", when.Sub(bStart))
		}
	}
	if fault == agentlessServerKill {
		if err := server.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("the cluster did not recover: %v", err)
	}
	t.Logf("cluster, agentless, %s (A via %s, B via %s, DNS of %s): A's command dead %s after the fault; DNS named A until %s after the fault "+
		"(no agent runs a catalog check); B's command started %s after it, %s after the last answer naming A; %d answers, %d failed queries",
		fault, c.Servers[0].Name, c.Servers[1].Name, c.Servers[2].Name, aDead, lastA.Sub(at).Round(time.Millisecond),
		bStart.Sub(at).Round(time.Millisecond), bStart.Sub(lastA).Round(time.Millisecond), len(samples), len(failed))
}
