package status

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agent is the real Consul agent (ACLs on, default deny) these tests share.
var agent *testenv.Agent

func TestMain(m *testing.M) {
	code := testenv.RunWithAgent(m, &agent)
	os.Exit(code)
}

// world is a registry and a lock prefix of one test on the shared agent.
type fixture struct {
	t        *testing.T
	api      *api.Client
	registry string
	prefix   string
}

func newFixture(t *testing.T) *fixture {
	p := testenv.UniquePrefix(t.Name())
	f := &fixture{t: t, api: agent.Client(), registry: p + "/registry", prefix: p + "/locks"}
	t.Cleanup(func() { _, _ = f.api.KV().DeleteTree(p+"/", nil) })
	t.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
	t.Setenv("CONSUL_HTTP_TOKEN", agent.ManagementToken)
	return f
}

func (f *fixture) put(key string, value []byte) {
	f.t.Helper()
	if _, err := f.api.KV().Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) profile(p lockmodel.SessionProfile) {
	f.t.Helper()
	rec, err := record.EncodeSessionProfileRecord(p)
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(lockmodel.RegistryKey(f.registry, lockmodel.KindSessionDefaults, p.Name), rec)
}

// lock declares l under the fixture's prefix and creates its key as the
// provider does (create-only, with the lock client's flags), unless noKey.
func (f *fixture) lock(l lockmodel.Lock, noKey bool) lockmodel.Lock {
	f.t.Helper()
	l.Prefix = f.prefix + "/" + l.Name
	rec, err := record.EncodeLockRecord(l)
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(lockmodel.RegistryKey(f.registry, lockmodel.KindLock, l.Name), rec)
	n, _ := l.Normalize()
	if !noKey {
		var v []byte
		if n.IsSemaphore() {
			v = lockmodel.NewSemaphoreValue(n.Limit)
		}
		if _, _, err := f.api.KV().CAS(&api.KVPair{Key: n.Key, Flags: n.Flags(), Value: v}, nil); err != nil {
			f.t.Fatal(err)
		}
	}
	return n
}

// session creates a session on the agent's node with serfHealth.
func (f *fixture) session(ttl, lockDelay string, behavior string) string {
	f.t.Helper()
	d, _ := time.ParseDuration(lockDelay)
	id, _, err := f.api.Session().Create(&api.SessionEntry{Name: "holder", TTL: ttl, LockDelay: d, Behavior: behavior}, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _, _ = f.api.Session().Destroy(id, nil) })
	return id
}

func holderValue(started time.Time) []byte {
	b, _ := json.Marshal(lockmodel.HolderValue{Node: agent.NodeName, PID: 42, Started: started})
	return b
}

// acquire takes a mutex key and returns its ModifyIndex right after.
func (f *fixture) acquire(l lockmodel.Lock, session string, started time.Time) uint64 {
	f.t.Helper()
	ok, _, err := f.api.KV().Acquire(&api.KVPair{Key: l.Key, Session: session, Flags: l.Flags(), Value: holderValue(started)}, nil)
	if err != nil || !ok {
		f.t.Fatalf("acquire %s: ok=%v err=%v", l.Key, ok, err)
	}
	p, _, err := f.api.KV().Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return p.ModifyIndex
}

// semaphoreHold takes a slot as api.Semaphore does: contender key
// <prefix>/<session>, then the session in the table's Holders.
func (f *fixture) semaphoreHold(l lockmodel.Lock, session string, holds bool) uint64 {
	f.t.Helper()
	ck := l.Prefix + "/" + session
	ok, _, err := f.api.KV().Acquire(&api.KVPair{Key: ck, Session: session, Flags: lockmodel.SemaphoreFlagValue, Value: holderValue(time.Now())}, nil)
	if err != nil || !ok {
		f.t.Fatalf("contender %s: ok=%v err=%v", ck, ok, err)
	}
	p, _, _ := f.api.KV().Get(ck, &api.QueryOptions{RequireConsistent: true})
	if !holds {
		return p.ModifyIndex
	}
	tp, _, _ := f.api.KV().Get(l.Key, nil)
	st, err := lockmodel.DecodeSemaphoreState(tp.Value)
	if err != nil {
		f.t.Fatal(err)
	}
	st.Holders[session] = true
	v, _ := lockmodel.EncodeSemaphoreState(st)
	if ok, _, err := f.api.KV().CAS(&api.KVPair{Key: l.Key, Flags: tp.Flags, Value: v, ModifyIndex: tp.ModifyIndex}, nil); err != nil || !ok {
		f.t.Fatalf("semaphore table: ok=%v err=%v", ok, err)
	}
	return p.ModifyIndex
}

// run runs the status program and returns exit code, stdout, stderr.
func (f *fixture) run(args ...string) (int, string, string) {
	f.t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"-registry-prefix", f.registry}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func (f *fixture) report(args ...string) (int, Report) {
	f.t.Helper()
	code, out, errs := f.run(append([]string{"-json"}, args...)...)
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		f.t.Fatalf("status -json: %v\nstdout: %s\nstderr: %s", err, out, errs)
	}
	return code, rep
}

func lockByName(t *testing.T, rep Report, name string) Lock {
	t.Helper()
	for _, l := range rep.Locks {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("lock %q not in report", name)
	return Lock{}
}

var strict = lockmodel.SessionProfile{Name: "strict", TTL: 15 * time.Second, LockDelay: 15 * time.Second}

// TestStatusHeldUnheldSemaphore: a held mutex, an unheld one and a
// semaphore with holders and a waiting contender, all compliant.
func TestStatusHeldUnheldSemaphore(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	held := f.lock(lockmodel.Lock{Name: "held", SessionDefaults: "strict", MaxHold: time.Hour}, false)
	f.lock(lockmodel.Lock{Name: "idle", SessionDefaults: "strict"}, false)
	pool := f.lock(lockmodel.Lock{Name: "pool", Limit: 3, SessionDefaults: "strict"}, false)

	s1 := f.session("15s", "15s", "release")
	token := f.acquire(held, s1, time.Now().Add(-90*time.Second))
	a, b, c := f.session("15s", "15s", "release"), f.session("15s", "15s", "release"), f.session("15s", "15s", "release")
	ta := f.semaphoreHold(pool, a, true)
	tb := f.semaphoreHold(pool, b, true)
	f.semaphoreHold(pool, c, false)

	code, rep := f.report()
	if code != ExitOK || !rep.Summary.Compliant || rep.Summary.Held != 2 {
		t.Fatalf("exit %d, summary %+v, want 0 and compliant with 2 held", code, rep.Summary)
	}
	h := lockByName(t, rep, "held")
	if h.State != "held" || len(h.Holders) != 1 || h.Holders[0].Session != s1 || h.Holders[0].Node != agent.NodeName {
		t.Fatalf("held: %+v", h)
	}
	if h.FencingToken == nil || *h.FencingToken != token || h.Holders[0].FencingToken != token || h.LockIndex != 1 {
		t.Errorf("held: fencing token %v / lock index %d, want %d / 1", h.FencingToken, h.LockIndex, token)
	}
	if h.WorstCaseGap != "45s" || h.MaxHold != "1h0m0s" || h.Holders[0].HeldFor == "" || !h.Compliant {
		t.Errorf("held: gap %q max_hold %q held_for %q compliant %v", h.WorstCaseGap, h.MaxHold, h.Holders[0].HeldFor, h.Compliant)
	}
	if i := lockByName(t, rep, "idle"); i.State != "unheld" || i.FencingToken != nil || len(i.Holders) != 0 {
		t.Errorf("idle: %+v", i)
	}
	p := lockByName(t, rep, "pool")
	if p.Kind != "semaphore" || p.Limit != 3 || len(p.Holders) != 2 || p.Contenders == nil || *p.Contenders != 1 {
		t.Fatalf("pool: %+v", p)
	}
	want := map[string]uint64{a: ta, b: tb}
	for _, hh := range p.Holders {
		if want[hh.Session] != hh.FencingToken {
			t.Errorf("pool holder %s: token %d, want its contender key's ModifyIndex %d", hh.Session, hh.FencingToken, want[hh.Session])
		}
	}
	if *p.FencingToken != max(ta, tb) {
		t.Errorf("pool token %d, want the highest holder's %d", *p.FencingToken, max(ta, tb))
	}

	// The always-held rule: "idle" has no holder.
	if code, rep := f.report("-always-held", "idle"); code != ExitViolation || rep.Summary.Unheld != 1 {
		t.Errorf("-always-held idle: exit %d summary %+v, want 1 with one unheld", code, rep.Summary)
	}
	// The table and the detail view.
	code, out, _ := f.run()
	if code != ExitOK || !strings.Contains(out, "semaphore 3") || !strings.Contains(out, "held 2/3") {
		t.Errorf("table (exit %d):\n%s", code, out)
	}
	code, out, _ = f.run("-lock", "held")
	if code != ExitOK || !strings.Contains(out, "Worst-case gap:") || !strings.Contains(out, "serfHealth") {
		t.Errorf("detail (exit %d):\n%s", code, out)
	}
	if code, _, errs := f.run("-lock", "nope"); code != ExitUsage || !strings.Contains(errs, "Lock Not Declared") {
		t.Errorf("-lock nope: exit %d, %s", code, errs)
	}
	t.Logf("status output:\n%s", out)
}

// TestStatusDeclaredAlwaysHeld: a lock declared always_held without a
// holder exits 1 with no flag; -always-held adds locks to the declared
// ones; a held always_held lock is compliant.
func TestStatusDeclaredAlwaysHeld(t *testing.T) {
	f := newFixture(t)
	daemon := f.lock(lockmodel.Lock{Name: "daemon", AlwaysHeld: true}, false)
	f.lock(lockmodel.Lock{Name: "idle"}, false)

	code, rep := f.report()
	if code != ExitViolation || rep.Summary.Unheld != 1 || rep.Summary.Compliant {
		t.Fatalf("exit %d summary %+v, want 1 with one always-held lock unheld", code, rep.Summary)
	}
	if d, i := lockByName(t, rep, "daemon"), lockByName(t, rep, "idle"); !d.AlwaysHeld || d.Compliant || i.AlwaysHeld || !i.Compliant {
		t.Errorf("daemon always_held %v compliant %v; idle always_held %v compliant %v; want true false, false true",
			d.AlwaysHeld, d.Compliant, i.AlwaysHeld, i.Compliant)
	}
	if code, rep := f.report("-always-held", "idle"); code != ExitViolation || rep.Summary.Unheld != 2 {
		t.Errorf("-always-held idle: exit %d summary %+v, want 1 with both unheld", code, rep.Summary)
	}
	if _, out, _ := f.run("-lock", "daemon"); !regexp.MustCompile(`Always held:\s+true`).MatchString(out) {
		t.Errorf("detail view of daemon does not say always held:\n%s", out)
	}

	f.acquire(daemon, f.session("15s", "15s", "release"), time.Now())
	if code, rep := f.report(); code != ExitOK || rep.Summary.Unheld != 0 {
		t.Errorf("daemon held: exit %d summary %+v, want 0", code, rep.Summary)
	}
}

// TestStatusHeldForFollowsHoldStart: held_for follows the controller's
// rule (lockmodel.HoldStart): a start in the future is not believed beyond
// now, and a value without a start (`consul lock`'s) gives held-for unknown.
func TestStatusHeldForFollowsHoldStart(t *testing.T) {
	f := newFixture(t)
	ahead := f.lock(lockmodel.Lock{Name: "ahead"}, false)
	plain := f.lock(lockmodel.Lock{Name: "plain"}, false)
	f.acquire(ahead, f.session("15s", "15s", "release"), time.Now().Add(time.Hour))
	s := f.session("15s", "15s", "release")
	if ok, _, err := f.api.KV().Acquire(&api.KVPair{Key: plain.Key, Session: s, Flags: plain.Flags(), Value: []byte("consul lock value")}, nil); err != nil || !ok {
		t.Fatalf("acquire %s: %v %v", plain.Key, ok, err)
	}
	_, rep := f.report()
	if h := lockByName(t, rep, "ahead").Holders[0]; h.HeldFor != "0s" || h.Started == nil {
		t.Errorf("holder whose clock is an hour ahead: held_for %q started %v, want 0s and a start (now)", h.HeldFor, h.Started)
	}
	if h := lockByName(t, rep, "plain").Holders[0]; h.HeldFor != "" || h.Started != nil {
		t.Errorf("holder without a start: held_for %q started %v, want unknown", h.HeldFor, h.Started)
	}
	if _, out, _ := f.run("-lock", "plain"); !strings.Contains(out, "Held for:") || !strings.Contains(out, "unknown") {
		t.Errorf("detail view does not say held-for unknown:\n%s", out)
	}
}

// TestStatusViolationAndMissingKey: a holder whose session breaks its
// profile (the controller's Decide says so), one past max_hold, and a
// declared lock whose key does not exist: exit 1, each finding named.
func TestStatusViolationAndMissingKey(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	bad := f.lock(lockmodel.Lock{Name: "bad", SessionDefaults: "strict"}, false)
	long := f.lock(lockmodel.Lock{Name: "long", SessionDefaults: "strict", MaxHold: time.Minute}, false)
	f.lock(lockmodel.Lock{Name: "gone", SessionDefaults: "strict"}, true)
	f.acquire(bad, f.session("60s", "1s", "delete"), time.Now())
	f.acquire(long, f.session("15s", "15s", "release"), time.Now().Add(-2*time.Minute))
	// An undeclared lock under the same prefix.
	if _, _, err := f.api.KV().CAS(&api.KVPair{Key: f.prefix + "/stray/.lock", Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err)
	}

	code, rep := f.report()
	if code != ExitViolation || rep.Summary.Compliant || rep.Summary.Violations != 3 {
		t.Fatalf("exit %d summary %+v, want 1 with 3 findings", code, rep.Summary)
	}
	b := lockByName(t, rep, "bad")
	if b.Compliant || len(b.Holders) != 1 || b.Holders[0].Compliant {
		t.Fatalf("bad: %+v", b)
	}
	got := strings.Join(b.Holders[0].Violations, ",")
	for _, r := range []string{lockmodel.ViolationTTLTooLong, lockmodel.ViolationLockDelayTooShort, lockmodel.ViolationBehaviorMismatch} {
		if !strings.Contains(got, r) {
			t.Errorf("bad: violations %q lack %s", got, r)
		}
	}
	if l := lockByName(t, rep, "long"); l.Compliant || !strings.Contains(strings.Join(l.Holders[0].Violations, ","), "max_hold_exceeded") {
		t.Errorf("long: %+v", l)
	}
	g := lockByName(t, rep, "gone")
	if g.State != "missing" || g.Compliant || len(g.Findings) != 1 || g.Findings[0].Kind != "recreate_key" {
		t.Errorf("gone: %+v", g)
	}
	if len(rep.Undeclared) != 1 || rep.Undeclared[0].Key != f.prefix+"/stray/.lock" {
		t.Errorf("undeclared: %+v", rep.Undeclared)
	}
	if _, out, _ := f.run(); !strings.Contains(out, "NO: ttl_too_long") || !strings.Contains(out, "undeclared lock-like key") {
		t.Errorf("table:\n%s", out)
	}
}

// TestStatusPermissions: a token without rules exits 3 naming the missing
// permission; a token with exactly the rules -print-rules renders works.
func TestStatusPermissions(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	l := f.lock(lockmodel.Lock{Name: "job", SessionDefaults: "strict"}, false)
	f.acquire(l, f.session("15s", "15s", "release"), time.Now())

	_, rules, _ := f.run("-print-rules")
	if !strings.Contains(rules, `session_prefix "" {`) || !strings.Contains(rules, f.registry+"/") {
		t.Fatalf("-print-rules:\n%s", rules)
	}
	none, err := agent.MintToken(policyName("none"), `key_prefix "nothing/" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", none.SecretID)
	code, _, errs := f.run()
	if code != ExitUnreachable || !strings.Contains(errs, `"key:read"`) || !strings.Contains(errs, f.registry+"/") {
		t.Errorf("no rules: exit %d, stderr %s; want 3 naming key:read on the registry", code, errs)
	}
	if strings.Contains(errs, none.SecretID) {
		t.Fatal("the token appears in the error")
	}

	ro, err := agent.MintToken(policyName("ro"), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", ro.SecretID)
	code, rep := f.report()
	if code != ExitOK || lockByName(t, rep, "job").State != "held" {
		t.Errorf("read-only rules: exit %d, %+v", code, rep.Summary)
	}
	// Without session read the holder would look absent: refused instead.
	kvOnly := strings.Replace(rules, `session_prefix "" {`, `session_prefix "nothing" {`, 1)
	k, err := agent.MintToken(policyName("kv"), kvOnly, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", k.SecretID)
	if code, _, errs := f.run(); code != ExitUnreachable || !strings.Contains(errs, "session:read") {
		t.Errorf("no session read: exit %d, %s", code, errs)
	}
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")
	if code, _, errs := f.run(); code != ExitUnreachable || !strings.Contains(errs, "Consul Unreachable") {
		t.Errorf("unreachable: exit %d, %s", code, errs)
	}
}

// TestStatusWatchSeesHandover: -watch redraws a hand-over because a
// blocking query returned, not because it polled: between the new acquire
// and the frame that shows the new holder, the watch sent no request that
// was not a blocking query (?index=N, which Consul holds for up to 5
// minutes unless the data changes), and the frame follows the return of a
// blocking query on the lock keys. The latency is logged, not asserted (a
// loaded machine may be slow; the mechanism is what the issue asks for).
func TestStatusWatchSeesHandover(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	l := f.lock(lockmodel.Lock{Name: "job", SessionDefaults: "strict"}, false)
	s1, s2 := f.session("15s", "0s", "release"), f.session("15s", "0s", "release")
	f.acquire(l, s1, time.Now())

	rec := newRecordingProxy(t)
	t.Setenv("CONSUL_HTTP_ADDR", rec.addr)
	pr := f.watch(func(line string) { rec.event("frame", line) })
	holderIn := func(line string) string {
		var rep Report
		if json.Unmarshal([]byte(line), &rep) != nil || len(rep.Locks) != 1 || len(rep.Locks[0].Holders) != 1 {
			return ""
		}
		return rep.Locks[0].Holders[0].Session
	}
	if got := holderIn(pr.next(t)); got != s1 {
		t.Fatalf("first frame holder %q, want %s", got, s1)
	}
	if _, _, err := f.api.KV().Release(&api.KVPair{Key: l.Key, Session: s1, Flags: l.Flags()}, nil); err != nil {
		t.Fatal(err)
	}
	for holderIn(pr.next(t)) != "" { // the frame of the release
	}
	rec.event("acquire", "")
	start := time.Now()
	f.acquire(l, s2, time.Now())
	for holderIn(pr.next(t)) != s2 {
	}
	took := time.Since(start)
	t.Logf("-watch saw the hand-over %s after the new acquire", took.Round(time.Millisecond))

	// From the acquire to the frame showing s2, in the order they happened.
	evs := rec.since("acquire")
	var cause string
	for _, e := range evs {
		switch {
		case e.kind == "frame" && holderIn(e.detail) == s2:
			if cause == "" {
				t.Fatalf("the hand-over frame was not preceded by a blocking query's return; events: %v", evs)
			}
			t.Logf("redraw caused by the blocking query %s returning", cause)
			return
		case e.kind == "start" && !e.blocking:
			t.Errorf("-watch sent a request that is not a blocking query during the hand-over: %s (polling)", e.detail)
		case e.kind == "end" && e.blocking && strings.HasPrefix(e.detail, "/v1/kv/"+f.prefix):
			cause = e.detail
		}
	}
	t.Fatalf("no hand-over frame among the recorded events: %v", evs)
}

// recordingProxy forwards to the agent and records, in order, each request
// it starts and ends (blocking: it carries ?index=N with N > 0) and the
// events a test marks.
type recordingProxy struct {
	addr string
	mu   sync.Mutex
	evs  []proxyEvent
}

type proxyEvent struct {
	kind     string // "start", "end", or what the test marked
	detail   string // the request path, or the marked detail
	blocking bool
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	target, _ := url.Parse("http://" + agent.Addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p := &recordingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idx := r.URL.Query().Get("index")
		blocking := idx != "" && idx != "0"
		p.add(proxyEvent{kind: "start", detail: r.URL.Path, blocking: blocking})
		rp.ServeHTTP(w, r)
		p.add(proxyEvent{kind: "end", detail: r.URL.Path, blocking: blocking})
	}))
	t.Cleanup(srv.Close)
	p.addr = strings.TrimPrefix(srv.URL, "http://")
	return p
}

func (p *recordingProxy) add(e proxyEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evs = append(p.evs, e)
}

func (p *recordingProxy) event(kind, detail string) { p.add(proxyEvent{kind: kind, detail: detail}) }

// since returns the events from the last one of kind on.
func (p *recordingProxy) since(kind string) []proxyEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.evs) - 1; i >= 0; i-- {
		if p.evs[i].kind == kind {
			return append([]proxyEvent(nil), p.evs[i:]...)
		}
	}
	return nil
}

// lineBuffer is a writer whose lines a test reads as they come.
type lineBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
	// mark, when set, is called with each line as it is written.
	mark func(line string)
}

// watch runs `status -watch -json` until the test ends and returns its
// output; mark, when set, is called with each line as it is written.
func (f *fixture) watch(mark func(line string)) *lineBuffer {
	b := &lineBuffer{lines: make(chan string, 1024), mark: mark}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"-registry-prefix", f.registry, "-watch", "-json"}, b, &bytes.Buffer{})
	}()
	f.t.Cleanup(func() { cancel(); <-done })
	return b
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	for {
		line, err := b.buf.ReadString('\n')
		if err != nil {
			b.buf.Reset()
			b.buf.WriteString(line)
			return len(p), nil
		}
		if b.mark != nil {
			b.mark(strings.TrimSuffix(line, "\n"))
		}
		b.lines <- strings.TrimSuffix(line, "\n")
	}
}

// next waits up to 30s (a -watch frame follows a change within a blocking
// query's round) for the next line.
func (b *lineBuffer) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-b.lines:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no output from -watch")
		return ""
	}
}

// TestStatusFixedRequests: the number of Consul requests does not grow
// with the number of locks.
func TestStatusFixedRequests(t *testing.T) {
	f := newFixture(t)
	f.profile(strict)
	counts := map[int]int{}
	n := 0
	for _, want := range []int{3, 60} {
		for ; n < want; n++ {
			f.lock(lockmodel.Lock{Name: fmt.Sprintf("l%03d", n), SessionDefaults: "strict"}, false)
		}
		_, rep := f.report()
		if len(rep.Locks) != want {
			t.Fatalf("%d locks reported, want %d", len(rep.Locks), want)
		}
		counts[want] = rep.ConsulRequests
	}
	if counts[3] != counts[60] || counts[60] > 2+maxKeyLists {
		t.Errorf("requests: %v; want the same for 3 and 60 locks, at most %d", counts, 2+maxKeyLists)
	}
}

// policyName is a unique ACL policy name (no slashes).
func policyName(s string) string {
	return strings.NewReplacer("/", "-").Replace(testenv.UniquePrefix("status-" + s))
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestShippedReaderRules: examples/observability/status-reader.hcl grants
// exactly what aclrules.ReadOnlyRules renders (the rule is written once).
func TestShippedReaderRules(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(root + "/examples/observability/status-reader.hcl")
	if err != nil {
		t.Fatal(err)
	}
	same, err := aclrules.RulesEquivalent(string(data), aclrules.ReadOnlyRules(lockmodel.DefaultRegistryPrefix, nil))
	if err != nil || !same {
		t.Fatalf("status-reader.hcl differs from `consullock status -print-rules` (err %v): regenerate it", err)
	}
}

// TestStatusPendingApplyIsNotDrift: status applies the controller's rule
// (compliance.Pending). An apply that wrote a declaration and then its key
// between status's reads of the two makes the old declaration look
// violated: pending, not a finding; so is a lock whose declaration this
// program saw change within the apply grace. A key changed with no change
// of its declaration is drift.
func TestStatusPendingApplyIsNotDrift(t *testing.T) {
	f := newFixture(t)
	sem := f.lock(lockmodel.Lock{Name: "sem", Limit: 3}, false)
	other := f.lock(lockmodel.Lock{Name: "other", Limit: 3}, false)
	settings, err := consul.SettingsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	client, err := consul.New(settings)
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{c: client, registry: f.registry}
	ctx := context.Background()
	old, err := r.readOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The apply: declaration, then key. Out of band: the other key.
	sem.Limit = 5
	rec, _ := record.EncodeLockRecord(sem)
	f.put(lockmodel.RegistryKey(f.registry, lockmodel.KindLock, sem.Name), rec)
	for _, k := range []struct {
		l     lockmodel.Lock
		limit int
	}{{sem, 5}, {other, 4}} {
		if _, err := f.api.KV().Put(&api.KVPair{Key: k.l.Key, Flags: k.l.Flags(), Value: lockmodel.NewSemaphoreValue(k.limit)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := r.readOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What status saw: the declarations before the apply, the keys after.
	w := &world{registry: old.registry, decl: old.decl, groups: old.groups, pairs: cur.pairs, sessions: cur.sessions, raw: cur.raw}
	now := time.Now()
	rep := build(w, f.registry, nil, now)
	if l := lockByName(t, *rep, "sem"); len(l.Findings) != 1 || l.Findings[0].Kind != "restore_semaphore_limit" {
		t.Fatalf("sem before the rule: %+v", l.Findings)
	}
	if w.pending, err = r.pendingLocks(ctx, w, rep, nil, now); err != nil {
		t.Fatal(err)
	}
	rep = build(w, f.registry, nil, now)
	s := lockByName(t, *rep, "sem")
	if !s.Pending || len(s.Findings) != 0 || !s.Compliant {
		t.Errorf("sem: pending %v, findings %+v, compliant %v; want pending, none, compliant", s.Pending, s.Findings, s.Compliant)
	}
	o := lockByName(t, *rep, "other")
	if o.Pending || len(o.Findings) != 1 || o.Findings[0].Kind != "restore_semaphore_limit" || o.Compliant {
		t.Errorf("other: pending %v, findings %+v; want drift restore_semaphore_limit", o.Pending, o.Findings)
	}
	if rep.Summary.Pending != 1 || rep.Summary.Violations != 1 {
		t.Errorf("summary %+v, want 1 pending, 1 violation", rep.Summary)
	}

	// Seen to change within the grace: pending with no second read;
	// after the grace, judged.
	w = cur
	w.pending = nil
	changed := map[string]time.Time{"sem": now, "other": now.Add(-applyGrace)}
	before := client.Requests()
	if w.pending, err = r.pendingLocks(ctx, w, build(w, f.registry, nil, now), changed, now); err != nil {
		t.Fatal(err)
	}
	if !w.pending["sem"] || w.pending["other"] {
		t.Errorf("pending %v, want sem only", w.pending)
	}
	if n := client.Requests() - before; n != 1 {
		t.Errorf("%d requests, want 1 (the second read, for the drifted lock other)", n)
	}
}

// TestStatusWatchShowsAPendingApplyThenDrift: -watch shows a lock whose
// declaration it saw change as pending for the apply grace (no finding),
// then, the key still not written, as drift, redrawn without any other
// change in Consul.
func TestStatusWatchShowsAPendingApplyThenDrift(t *testing.T) {
	f := newFixture(t)
	sem := f.lock(lockmodel.Lock{Name: "sem", Limit: 3}, false)
	pr := f.watch(nil)
	frame := func() Lock {
		line := pr.next(t)
		var rep Report
		if err := json.Unmarshal([]byte(line), &rep); err != nil || len(rep.Locks) != 1 {
			t.Fatalf("frame %q: %v", line, err)
		}
		return rep.Locks[0]
	}
	if l := frame(); l.Pending || len(l.Findings) != 0 {
		t.Fatalf("first frame: pending %v, findings %+v", l.Pending, l.Findings)
	}

	// An apply writes the declaration and never the key.
	sem.Limit = 5
	rec, _ := record.EncodeLockRecord(sem)
	declared := time.Now()
	f.put(lockmodel.RegistryKey(f.registry, lockmodel.KindLock, sem.Name), rec)
	l := frame()
	if !l.Pending || len(l.Findings) != 0 || !l.Compliant {
		t.Fatalf("frame after the declaration: pending %v, findings %+v, compliant %v; want pending, none, compliant", l.Pending, l.Findings, l.Compliant)
	}
	for l.Pending {
		if len(l.Findings) != 0 {
			t.Fatalf("a pending lock with findings: %+v", l.Findings)
		}
		l = frame()
	}
	if took := time.Since(declared); took < applyGrace {
		t.Errorf("pending ended %s after the declaration, within the apply grace of %s", took.Round(time.Millisecond), applyGrace)
	}
	if len(l.Findings) != 1 || l.Findings[0].Kind != "restore_semaphore_limit" || l.Compliant {
		t.Errorf("after the grace: findings %+v, compliant %v; want restore_semaphore_limit, not compliant", l.Findings, l.Compliant)
	}
}
