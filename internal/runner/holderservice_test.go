package runner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
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
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Holder service tests: real DNS queries to the dev agent's DNS interface
// (`<name>.service.consul` SRV, so that each holder is told apart by its
// -service-port), sampled continuously; the assertions are on ordering
// (never a former holder in an answer to a query sent after the next
// holder's command started), the figures are logged.

// holderProfile: TTL 10s, lock_delay 5s, renewals every 500ms: the
// holder check's TTL is 2s (lockmodel.NewHolderCheck: below lock_delay -
// 2 x renewal timeout - margin = 3s, above renew_every + 2 x renewal
// timeout = 1.5s) while a waiter needs at least lock_delay = 5s after a
// holder's session is destroyed, ttl + lock_delay = 15s after its runner
// dies.
func holderProfile(t testing.TB) *lockmodel.SessionProfile {
	return &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: 5 * time.Second, RenewEvery: 500 * time.Millisecond}
}

var dnsReadOnce sync.Once

// dnsResolver queries the agent's DNS interface. DNS answers with the
// agent's default token (here the anonymous token), which needs service
// and node read, as every DNS user sets up.
func dnsResolver(t testing.TB) *net.Resolver {
	t.Helper()
	dnsReadOnce.Do(func() {
		c := agent.Client()
		p, _, err := c.ACL().PolicyCreate(&api.ACLPolicy{Name: "dns-read", Rules: `service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`}, nil)
		if err != nil {
			t.Fatal(err)
		}
		anon, _, err := c.ACL().TokenRead("00000000-0000-0000-0000-000000000002", nil)
		if err != nil {
			t.Fatal(err)
		}
		anon.Policies = append(anon.Policies, &api.ACLTokenPolicyLink{ID: p.ID})
		if _, _, err := c.ACL().TokenUpdate(anon, nil); err != nil {
			t.Fatal(err)
		}
	})
	return testenv.DNSResolver(agent.DNSAddr)
}

// lookupPorts asks for <name>.service.consul SRV: the ports answered,
// sorted, none for NXDOMAIN (testenv.LookupPorts).
var lookupPorts = testenv.LookupPorts

// sampleDNS queries name on the agent's DNS interface every 50ms until
// stop (testenv.SampleDNS), which reports each failed query as a test
// error and returns the answers.
func sampleDNS(t testing.TB, name string) (stop func() testenv.DNSSamples) {
	sample := testenv.SampleDNS(dnsResolver(t), name)
	return func() testenv.DNSSamples {
		samples, failed := sample()
		for _, err := range failed {
			t.Errorf("DNS query %s.service.consul: %v", name, err)
		}
		return samples
	}
}

// lastRun is the last execution recorded under tag (nil when none).
func lastRun(t testing.TB, record, tag string) *childRun {
	t.Helper()
	var run *childRun
	for _, r := range readRuns(t, record) {
		if r.tag == tag {
			run = r
		}
	}
	return run
}

// holderToken is runnerToken plus service "<service>" write, as
// consullock_acl_policy's holder_services renders it.
func holderToken(t testing.TB, prefix, service string) string {
	t.Helper()
	rules := aclrules.RenderRules(aclrules.RulesInput{
		SemaphorePrefixes:   []string{prefix},
		SessionNodePrefixes: []string{agent.NodeName}, HolderServices: []string{service},
	})
	rules += fmt.Sprintf("key_prefix %q { policy = \"read\" }\n", lockmodel.DefaultRegistryPrefix+"/")
	tok, err := agent.MintToken(uniqueName(t, "policy"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

func declareHolderService(t *testing.T, limit int) (lockmodel.Lock, string, string) {
	t.Helper()
	service := fmt.Sprintf("hs%d-%d", nameCounter.Add(1), time.Now().UnixNano()%1e6)
	prefix := "t/" + uniqueName(t, "lock")
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: limit,
		HolderService: &holdersvc.Service{Name: service, Tags: []string{"leader"}, Meta: map[string]string{"team": "test"}}}, holderProfile(t))
	return l, service, holderToken(t, prefix, service)
}

func holderArgs(l lockmodel.Lock, port int) []string {
	return []string{"-lock", l.Name, "-grace", "1s", "-service-port", strconv.Itoa(port)}
}

// TestHolderService_dnsNamesOnlyTheHolderAcrossACleanHandOver: while A
// holds, <name>.service.consul answers A (with its fencing token in the
// catalog meta); A exits cleanly, B takes over: every request of A's that
// can free the lock finds A's instance already gone from the catalog
// (deregistered before released), no DNS query sent after B's command
// started answers A, and the catalog keeps no instance of A.
func TestHolderService_dnsNamesOnlyTheHolderAcrossACleanHandOver(t *testing.T) {
	l, service, token := declareHolderService(t, 1)
	record := filepath.Join(t.TempDir(), "record")
	stop := sampleDNS(t, service)
	probe := newReleaseProbe(t, service)
	a := startRunAt(t, "A", probe.addr, token, holderArgs(l, 20001), childArgs(record, "A", "-wait-stdin")...)
	waitStarted(t, record, "A")
	waitOutput(t, a, "holder service registered")
	registered := time.Now()
	b := startRun(t, "B", token, holderArgs(l, 20002), childArgs(record, "B", "-wait-stdin")...)
	waitOutput(t, b, "waiting for the lock")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ports, err := lookupPorts(ctx, dnsResolver(t), service)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ports, 20001) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("DNS never answered holder A: %v", ports)
		case <-time.After(50 * time.Millisecond):
		}
	}
	entries, _, err := agent.Client().Health().Service(service, "leader", true, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	runA := readRuns(t, record)[0]
	if len(entries) != 1 || entries[0].Service.Meta[holdersvc.MetaFencingToken] != strconv.FormatUint(runA.token, 10) ||
		entries[0].Service.Meta[holdersvc.MetaSession] != runA.session || entries[0].Service.Meta["team"] != "test" ||
		entries[0].Service.ID != holdersvc.ServiceID(service, runA.session) {
		t.Fatalf("catalog while A holds: %+v, want A's instance with fencing token %d", entries, runA.token)
	}

	time.Sleep(300 * time.Millisecond) // let the sampler see A
	idA := holdersvc.ServiceID(service, runA.session)
	a.closeStdin()
	if code := a.wait(30 * time.Second); code != 0 {
		t.Fatalf("A exit code %d", code)
	}
	waitStarted(t, record, "B")
	waitOutput(t, b, "holder service registered")
	time.Sleep(500 * time.Millisecond) // let the sampler see B
	samples := stop()
	b.closeStdin()
	if code := b.wait(30 * time.Second); code != 0 {
		t.Fatalf("B exit code %d", code)
	}
	runA, runB := lastRun(t, record, "A"), lastRun(t, record, "B")
	// The catalog (which DNS answers from) had dropped A when A sent the
	// requests that free the lock: deregistered before released. Each was
	// held at the proxy until a consistent read of the catalog was done.
	releases := probe.after(registered)
	if len(releases) == 0 {
		t.Fatalf("A sent no request that frees the lock after it registered (saw %v): the check proved nothing", probe.after(time.Time{}))
	}
	for _, r := range releases {
		if slices.Contains(r.instances, idA) {
			t.Fatalf("A sent %s while its instance %s was still in the catalog: released before deregistered", r.request, idA)
		}
	}
	lastA, firstB := samples.LastWith(20001), samples.FirstWith(20002)
	if lastA.IsZero() || firstB.IsZero() {
		t.Fatalf("DNS never answered A (%v) or B (%v) in %d samples", lastA, firstB, len(samples))
	}
	if !lastA.Before(runB.start) {
		t.Fatalf("DNS answered former holder A to a query sent %s after B's command started", lastA.Sub(runB.start))
	}
	for _, s := range samples {
		if len(s.Ports) > 1 {
			t.Fatalf("DNS answered two holders of a mutex at %s: %v", s.Sent.Format(time.RFC3339Nano), s.Ports)
		}
	}
	t.Logf("clean hand-over: A's instance was gone from the catalog at each of its %d requests that free the lock (%s); "+
		"the last DNS answer naming A was to a query sent %s after A's command ended (queries every 50ms); "+
		"B's command started %s after A's ended (hand-over gap); the first answer naming B was sent %s after B's command started; %d samples",
		len(releases), releases[0].request, lastA.Sub(runA.end).Round(time.Millisecond), runB.start.Sub(runA.end).Round(time.Millisecond),
		firstB.Sub(runB.start).Round(time.Millisecond), len(samples))
	left, _, err := agent.Client().Health().Service(service, "", false, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("instances left after both runners exited: %d (%s)", len(left), left[0].Service.ID)
	}
}

// releaseProbe is a proxy between one runner and the agent. Each request
// of the runner's that can free its lock (a transaction, a KV write, a
// session destroy) waits at the proxy until a consistent read of the
// catalog's instances of service is done, and is kept with that read:
// what the catalog, and so DNS, held when the runner let the lock go.
type releaseProbe struct {
	addr string // host:port for CONSUL_HTTP_ADDR

	mu   sync.Mutex
	seen []releaseSeen
}

// releaseSeen is one request that can free the lock, when it arrived and
// the instance IDs the catalog held then.
type releaseSeen struct {
	request   string
	arrived   time.Time
	instances []string
}

func newReleaseProbe(t testing.TB, service string) *releaseProbe {
	t.Helper()
	p := &releaseProbe{}
	p.addr = agentProxy(t, agent.Addr, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if frees := r.Method == http.MethodPut && (r.URL.Path == "/v1/txn" || strings.HasPrefix(r.URL.Path, "/v1/kv/") ||
			strings.HasPrefix(r.URL.Path, "/v1/session/destroy/")); frees {
			arrived := time.Now()
			entries, _, err := agent.Client().Health().Service(service, "", false, &api.QueryOptions{RequireConsistent: true})
			if err != nil {
				http.Error(w, "release probe: read the catalog: "+err.Error(), http.StatusBadGateway)
				return
			}
			seen := releaseSeen{request: r.Method + " " + r.URL.Path, arrived: arrived}
			for _, e := range entries {
				seen.instances = append(seen.instances, e.Service.ID)
			}
			p.mu.Lock()
			p.seen = append(p.seen, seen)
			p.mu.Unlock()
		}
		forward.ServeHTTP(w, r)
	})
	return p
}

// after is what the probe saw of the requests that arrived after t.
func (p *releaseProbe) after(t time.Time) []releaseSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []releaseSeen
	for _, s := range p.seen {
		if s.arrived.After(t) {
			out = append(out, s)
		}
	}
	return out
}

// watchInstanceGone follows the catalog's instances of service with
// blocking queries, and returns a function that waits for (at most 30s) and
// returns the Raft index at which instance id left the catalog, and when
// the watch saw it.
func watchInstanceGone(service, id string) func() (uint64, time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	type gone struct {
		index uint64
		at    time.Time
	}
	result := make(chan gone, 1)
	go func() {
		defer close(result)
		var index uint64
		for ctx.Err() == nil {
			entries, meta, err := agent.Client().Health().Service(service, "", false,
				(&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second, RequireConsistent: true}).WithContext(ctx))
			if err != nil {
				continue
			}
			present := false
			for _, e := range entries {
				present = present || e.Service.ID == id
			}
			if !present {
				result <- gone{meta.LastIndex, time.Now()}
				return
			}
			index = meta.LastIndex
		}
	}()
	return func() (uint64, time.Time) {
		defer cancel()
		g := <-result
		return g.index, g.at
	}
}

// TestHolderService_killedHolderOutOfDNSBeforeTheNextStarts: A holds and
// its runner is SIGKILLed (no deregistration); B, waiting, acquires when
// A's session has expired and the lock-delay has passed. No DNS answer to
// a query sent after B's command started names A, in either registration
// mode of the holders' instances:
//   - agent: A's instance is on the agent, whose check of it (TTL 2s with
//     holderProfile) goes critical, so DNS is empty before B can acquire
//     (ttl + lock_delay = 15s).
//   - catalog (agentless: -node, a TTL-only profile): A's instance is in
//     the catalog on the runners' node, passing (no agent runs a check),
//     so nothing takes it out of DNS until B deregisters it before it
//     starts its command; B exits cleanly and deregisters its own.
func TestHolderService_killedHolderOutOfDNSBeforeTheNextStarts(t *testing.T) {
	for _, tc := range []struct {
		via string // the mode -service-registration auto picks for the holders' args
		// holder declares the lock and mints its worker token; node is the
		// runners' -node (none on the agent).
		holder func(t *testing.T) (l lockmodel.Lock, service, node, token string)
		ports  [2]int // A's and B's -service-port
	}{
		{holdersvc.ViaAgent, func(t *testing.T) (lockmodel.Lock, string, string, string) {
			l, service, token := declareHolderService(t, 1)
			return l, service, "", token
		}, [2]int{20001, 20002}},
		{holdersvc.ViaCatalog, agentlessHolder, [2]int{20011, 20012}},
	} {
		t.Run(tc.via, func(t *testing.T) {
			l, service, node, token := tc.holder(t)
			args := func(port int) []string {
				if node == "" {
					return holderArgs(l, port)
				}
				return append(holderArgs(l, port), "-node", node)
			}
			record := filepath.Join(t.TempDir(), "record")
			a := startRun(t, "A", token, args(tc.ports[0]), childArgs(record, "A", "-sleep", "2m")...)
			waitStarted(t, record, "A")
			waitOutput(t, a, "holder service registered")
			runA := readRuns(t, record)[0]
			if tc.via == holdersvc.ViaCatalog {
				if out := a.out.String(); !strings.Contains(out, `via=catalog`) {
					t.Fatalf("A did not log the catalog registration:\n%s", out)
				}
				entries, _, err := agent.Client().Health().Service(service, "", true, &api.QueryOptions{RequireConsistent: true})
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 1 || entries[0].Node.Node != node || entries[0].Service.ID != holdersvc.ServiceID(service, runA.session) {
					t.Fatalf("catalog while A holds: %d passing instances (%+v), want A's on node %s", len(entries), entries, node)
				}
			}
			b := startRun(t, "B", token, args(tc.ports[1]), childArgs(record, "B", "-sleep", "1s")...)
			waitOutput(t, b, "waiting for the lock")
			stop := sampleDNS(t, service)
			time.Sleep(500 * time.Millisecond)
			killed := time.Now()
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = syscall.Kill(runA.pid, syscall.SIGKILL) // the orphaned command
			a.wait(10 * time.Second)
			if code := b.wait(90 * time.Second); code != 0 {
				t.Fatalf("B exit code %d", code)
			}
			samples := stop()
			runB := lastRun(t, record, "B")
			lastA := samples.LastWith(tc.ports[0])
			if lastA.IsZero() {
				t.Fatalf("DNS never answered A in %d samples", len(samples))
			}
			if !lastA.Before(runB.start) {
				t.Fatalf("DNS answered killed holder A to a query sent %s after B's command started", lastA.Sub(runB.start))
			}
			switch tc.via {
			case holdersvc.ViaAgent:
				var emptyAt time.Time
				for _, s := range samples {
					if s.Sent.After(lastA) && len(s.Ports) == 0 {
						emptyAt = s.Sent
						break
					}
				}
				if emptyAt.IsZero() || !emptyAt.Before(runB.start) {
					t.Fatalf("DNS was never empty between A's last answer and B's start (empty at %v, B started %v)", emptyAt, runB.start)
				}
				t.Logf("runner SIGKILLed: DNS named A until %s after the kill (check TTL %s), empty from %s; B's command started %s after the kill "+
					"(empty answers for %s before it); %d samples",
					lastA.Sub(killed).Round(time.Millisecond), lockmodel.FormatDuration(lockmodel.NewHolderCheck(holderProfile(t).Resolve()).TTL),
					emptyAt.Sub(killed).Round(time.Millisecond), runB.start.Sub(killed).Round(time.Millisecond),
					runB.start.Sub(emptyAt).Round(time.Millisecond), len(samples))
			case holdersvc.ViaCatalog:
				out := b.out.String()
				reaped, started := strings.Index(out, "former holder's instance deregistered"), strings.Index(out, "command started")
				if reaped < 0 || reaped > started {
					t.Fatalf("B did not deregister A's instance before its command started:\n%s", out)
				}
				left, _, err := agent.Client().Health().Service(service, "", false, &api.QueryOptions{RequireConsistent: true})
				if err != nil {
					t.Fatal(err)
				}
				if len(left) != 0 {
					t.Fatalf("instances left after B exited: %d (%s)", len(left), left[0].Service.ID)
				}
				t.Logf("agentless runner SIGKILLed: DNS named A until %s after the kill (nobody runs a catalog check); B's command started %s after the kill "+
					"(the TTL-only session expired, then lock_delay), %s after the last answer naming A; %d samples",
					lastA.Sub(killed).Round(time.Millisecond), runB.start.Sub(killed).Round(time.Millisecond),
					runB.start.Sub(lastA).Round(time.Millisecond), len(samples))
			}
		})
	}
}

// TestHolderService_semaphoreOfThreeAnswersThreeHolders: each holder of a
// semaphore registers its own instance.
func TestHolderService_semaphoreOfThreeAnswersThreeHolders(t *testing.T) {
	l, service, token := declareHolderService(t, 3)
	record := filepath.Join(t.TempDir(), "record")
	var procs []*proc
	for i, port := range []int{20001, 20002, 20003} {
		tag := fmt.Sprintf("H%d", i)
		procs = append(procs, startRun(t, tag, token, holderArgs(l, port), childArgs(record, tag, "-wait-stdin")...))
	}
	for _, p := range procs {
		waitOutput(t, p, "holder service registered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ports []int
	for {
		var err error
		if ports, err = lookupPorts(ctx, dnsResolver(t), service); err != nil {
			t.Fatal(err)
		}
		if len(ports) == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("DNS answered %v, want 3 holders", ports)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if ports[0] != 20001 || ports[1] != 20002 || ports[2] != 20003 {
		t.Fatalf("DNS answered %v, want [20001 20002 20003]", ports)
	}
	for _, p := range procs {
		p.closeStdin()
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("%s exit code %d", p.name, code)
		}
	}
	left, err := lookupPorts(ctx, dnsResolver(t), service)
	if err != nil || len(left) != 0 {
		t.Fatalf("DNS after every holder exited: %v, %v", left, err)
	}
}

// TestHolderService_withdrawnAtOnceWhenTheLockIsLost: an operator destroys
// the holder's session; the runner withdraws its instance as soon as it
// counts the lock lost, while its command (which ignores SIGTERM) still
// runs out its grace: the instance is gone from the catalog before the
// runner exits and below the next holder's acquisition.
func TestHolderService_withdrawnAtOnceWhenTheLockIsLost(t *testing.T) {
	l, service, token := declareHolderService(t, 1)
	record := filepath.Join(t.TempDir(), "record")
	args := append(holderArgs(l, 20001), "-grace", "3s")
	a := startRun(t, "A", token, args, childArgs(record, "A", "-sleep", "2m", "-on-term", "ignore")...)
	waitStarted(t, record, "A")
	waitOutput(t, a, "holder service registered")
	b := startRun(t, "B", token, holderArgs(l, 20002), childArgs(record, "B", "-sleep", "1s")...)
	waitOutput(t, b, "waiting for the lock")
	runA := readRuns(t, record)[0]
	goneAt := watchInstanceGone(service, holdersvc.ServiceID(service, runA.session))
	destroyed := time.Now()
	if _, err := agent.Client().Session().Destroy(runA.session, nil); err != nil {
		t.Fatal(err)
	}
	index, seen := goneAt()
	if code := a.wait(30 * time.Second); code != ExitLockLost {
		t.Fatalf("A exit code %d, want %d", code, ExitLockLost)
	}
	if code := b.wait(60 * time.Second); code != 0 {
		t.Fatalf("B exit code %d", code)
	}
	runB := lastRun(t, record, "B")
	if index == 0 || index >= runB.token {
		t.Fatalf("A's instance left the catalog at index %d, not before B acquired at %d", index, runB.token)
	}
	if !seen.Before(a.exited) {
		t.Fatalf("A's instance was still in the catalog when its runner exited (%s after the exit)", seen.Sub(a.exited))
	}
	// Withdrawn on the loss, not at the exit: before the grace ran out.
	out := a.out.String()
	dereg, killed := strings.Index(out, "holder service deregistered"), strings.Index(out, "did not exit within the grace period")
	if dereg < 0 || killed < 0 || dereg > killed {
		t.Fatalf("A deregistered its instance (at byte %d of its log) after its command's grace ran out (byte %d):\n%s", dereg, killed, out)
	}
	t.Logf("session destroyed: A's instance left the catalog within %s; A's runner exited %s after the destroy (grace 3s)",
		seen.Sub(destroyed).Round(time.Millisecond), a.exited.Sub(destroyed).Round(time.Millisecond))
}

// TestHolderService_withoutServiceWriteTheLockIsHeldWithoutAnInstance: a
// worker token without service "<name>" write gets 403 for the
// registration; the runner says so and runs its command under the lock
// all the same (the lock is what serialises; the service only names it).
func TestHolderService_withoutServiceWriteTheLockIsHeldWithoutAnInstance(t *testing.T) {
	l, service, _ := declareHolderService(t, 1)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "A", runnerToken(t, l.Prefix), holderArgs(l, 20001), childArgs(record, "A", "-sleep", "500ms")...)
	if code := a.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	out := a.out.String()
	if !strings.Contains(out, "cannot register the holder service; the lock is held without it") || !strings.Contains(out, `lacks \"service:write\" on \"`+service+`\" (HTTP 403)`) {
		t.Fatalf("no 403 reported for the registration:\n%s", out)
	}
	if runs := readRuns(t, record); len(runs) != 1 || !runs[0].ended {
		t.Fatalf("the command did not run under the lock: %+v", runs)
	}
	if entries, _, err := agent.Client().Health().Service(service, "", false, nil); err != nil || len(entries) != 0 {
		t.Fatalf("instances of %s: %d, %v", service, len(entries), err)
	}
}

// TestHolderService_frozenRunnerNeverReappearsAfterTheTakeOver: A's runner
// is frozen (SIGSTOP) while it holds; its check expires, B takes over,
// then A is thawed while B holds: A finds the lock lost and exits 123
// without passing its check again, so no DNS answer to a query sent after
// B started names A (a renewal sent before the freeze is too old to pass
// on, holdersvc.Check.PassAllowed).
func TestHolderService_frozenRunnerNeverReappearsAfterTheTakeOver(t *testing.T) {
	l, service, token := declareHolderService(t, 1)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "A", token, holderArgs(l, 20001), childArgs(record, "A", "-sleep", "2m")...)
	waitStarted(t, record, "A")
	waitOutput(t, a, "holder service registered")
	b := startRun(t, "B", token, holderArgs(l, 20002), childArgs(record, "B", "-sleep", "6s")...)
	waitOutput(t, b, "waiting for the lock")
	stop := sampleDNS(t, service)
	time.Sleep(500 * time.Millisecond)
	frozen := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStarted(t, record, "B")
	thawed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(30 * time.Second); code != ExitLockLost {
		t.Fatalf("A exit code %d, want %d", code, ExitLockLost)
	}
	if code := b.wait(60 * time.Second); code != 0 {
		t.Fatalf("B exit code %d", code)
	}
	samples := stop()
	runB := lastRun(t, record, "B")
	lastA := samples.LastWith(20001)
	if lastA.IsZero() || !lastA.Before(runB.start) {
		t.Fatalf("DNS answered A (frozen, then thawed) to a query sent %s after B's command started", lastA.Sub(runB.start))
	}
	if n := strings.Count(a.out.String(), "holder service registered"); n != 1 {
		t.Fatalf("A registered %d times, want once:\n%s", n, a.out.String())
	}
	t.Logf("runner frozen: DNS named A until %s after the freeze; B's command started %s after the freeze; A thawed %s after B started, "+
		"exited 123 and never reappeared; %d samples", lastA.Sub(frozen).Round(time.Millisecond), runB.start.Sub(frozen).Round(time.Millisecond),
		thawed.Sub(runB.start).Round(time.Millisecond), len(samples))
}

// TestHolderService_destroyedSessionOutOfDNSBeforeTheNextStarts: with the
// quickstart's profile (ttl 10s, lock_delay 5s), A holds and its instance
// is in DNS; A's runner is frozen (SIGSTOP, so it cannot withdraw) and an
// operator destroys A's session, which frees the key lock_delay later, not
// ttl + lock_delay. A's check must be critical by then: no DNS answer to a
// query sent after B's command started names A (lockmodel.NewHolderCheck
// bounds the check by lock_delay). A stays frozen while B holds; thawed,
// it exits 123.
func TestHolderService_destroyedSessionOutOfDNSBeforeTheNextStarts(t *testing.T) {
	service := fmt.Sprintf("hs%d-%d", nameCounter.Add(1), time.Now().UnixNano()%1e6)
	prefix := "t/" + uniqueName(t, "lock")
	quickstart := &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 10 * time.Second, LockDelay: 5 * time.Second}
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, HolderService: &holdersvc.Service{Name: service}}, quickstart)
	token := holderToken(t, prefix, service)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "A", token, holderArgs(l, 20001), childArgs(record, "A", "-sleep", "2m")...)
	waitStarted(t, record, "A")
	waitOutput(t, a, "holder service registered")
	b := startRun(t, "B", token, holderArgs(l, 20002), childArgs(record, "B", "-sleep", "2s")...)
	waitOutput(t, b, "waiting for the lock")
	runA := readRuns(t, record)[0]
	stop := sampleDNS(t, service)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for { // freeze A while DNS names it: its check was just passed
		ports, err := lookupPorts(ctx, dnsResolver(t), service)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ports, 20001) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	destroyed := time.Now()
	if _, err := agent.Client().Session().Destroy(runA.session, nil); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(60 * time.Second); code != 0 { // A stays frozen while B holds
		t.Fatalf("B exit code %d", code)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(30 * time.Second); code != ExitLockLost {
		t.Fatalf("A exit code %d, want %d", code, ExitLockLost)
	}
	samples := stop()
	runB := lastRun(t, record, "B")
	lastA := samples.LastWith(20001)
	check := lockmodel.NewHolderCheck(quickstart.Resolve())
	if lastA.IsZero() || !lastA.Before(runB.start) {
		t.Fatalf("DNS answered A (session destroyed, runner frozen) to a query sent %s after B's command started (check TTL %s, lock_delay %s)",
			lastA.Sub(runB.start).Round(time.Millisecond), lockmodel.FormatDuration(check.TTL), lockmodel.FormatDuration(quickstart.LockDelay))
	}
	t.Logf("session destroyed, runner frozen: DNS named A until %s after the destroy (check TTL %s); B's command started %s after the destroy; %d samples",
		lastA.Sub(destroyed).Round(time.Millisecond), lockmodel.FormatDuration(check.TTL), runB.start.Sub(destroyed).Round(time.Millisecond), len(samples))
}
