package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

const (
	// tofuTimeout bounds every tofu command: a command still running then
	// has hung, and the test fails saying so.
	tofuTimeout = 4 * time.Minute
	// creationComplete is what tofu prints for each resource it created.
	creationComplete = "Creation complete"
)

// invalidToken matches the provider's diagnostics for a token Consul
// refuses: "Invalid Or Expired Consul Token" from a resource operation,
// "Invalid Consul Token" from the provider's own check when it starts; the
// text of both says the token may have expired.
var invalidToken = regexp.MustCompile(`Error: Invalid (Or Expired )?Consul Token(?s:.*)expired`)

// tofuWorkspace runs real OpenTofu, with the provider built for the suite
// installed through dev_overrides, in a configuration directory of its own.
type tofuWorkspace struct {
	t    *testing.T
	tf   *testenv.Tofu
	vars []string // -var arguments for plan and apply
}

func newTofuWorkspace(t *testing.T) *tofuWorkspace {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	tf, err := testenv.NewTofuWorkspace(providerDir(t, dir), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tf.Env = cleanEnv()
	return &tofuWorkspace{t: t, tf: tf}
}

// providerDir makes dir/plugins, a dev_overrides directory holding the
// suite's consullock binary as the provider.
func providerDir(t *testing.T, dir string) string {
	t.Helper()
	pluginDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(runnerBin, filepath.Join(pluginDir, testenv.ProviderFile)); err != nil {
		t.Fatal(err)
	}
	return pluginDir
}

func (w *tofuWorkspace) write(config string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.tf.Dir, "main.tf"), []byte(config), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// command prepares `tofu args...`; plan and apply get the workspace's vars.
func (w *tofuWorkspace) command(ctx context.Context, out *watchBuffer, args ...string) *exec.Cmd {
	full := append([]string{}, args...)
	if args[0] == "plan" || args[0] == "apply" {
		full = append(full, "-input=false", "-no-color")
		full = append(full, w.vars...)
	}
	cmd := w.tf.Command(ctx, full...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// run runs tofu to its end and returns its output and exit code. It fails
// the test if tofu hangs, panics, or cannot be started.
func (w *tofuWorkspace) run(args ...string) (string, int) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tofuTimeout)
	defer cancel()
	out := newWatchBuffer(creationComplete)
	err := w.command(ctx, out, args...).Run()
	return w.result(ctx, args, out.String(), err)
}

func (w *tofuWorkspace) result(ctx context.Context, args []string, out string, err error) (string, int) {
	w.t.Helper()
	if ctx.Err() != nil {
		w.t.Fatalf("tofu %s hung: still running after %s\n%s", args[0], tofuTimeout, out)
	}
	if strings.Contains(out, "panic:") || strings.Contains(out, "The plugin encountered an error") {
		w.t.Fatalf("tofu %s: the provider crashed:\n%s", args[0], out)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &exit):
		return out, exit.ExitCode()
	default:
		w.t.Fatalf("tofu %s: %v\n%s", args[0], err, out)
		return out, -1
	}
}

// mustSucceed runs tofu and fails the test unless it exits 0.
func (w *tofuWorkspace) mustSucceed(args ...string) string {
	w.t.Helper()
	out, code := w.run(args...)
	if code != 0 {
		w.t.Fatalf("tofu %s exited %d:\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// planIsEmpty runs `tofu plan -detailed-exitcode`: 0 is an empty plan, 2 a
// plan with changes; anything else fails the test.
func (w *tofuWorkspace) planIsEmpty() (bool, string) {
	w.t.Helper()
	out, code := w.run("plan", "-detailed-exitcode")
	switch code {
	case 0:
		return true, out
	case 2:
		return false, out
	default:
		w.t.Fatalf("tofu plan exited %d:\n%s", code, out)
		return false, out
	}
}

func (w *tofuWorkspace) stateList() []string {
	w.t.Helper()
	return strings.Fields(w.mustSucceed("state", "list"))
}

// watchBuffer collects a command's output and counts the lines holding
// pattern; reached(n) is closed once n of them were written.
type watchBuffer struct {
	pattern []byte

	mu      sync.Mutex
	buf     bytes.Buffer
	count   int
	waiters map[int]chan struct{}
}

func newWatchBuffer(pattern string) *watchBuffer {
	return &watchBuffer{pattern: []byte(pattern), waiters: map[int]chan struct{}{}}
}

func (b *watchBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before := bytes.Count(b.buf.Bytes(), b.pattern)
	b.buf.Write(p)
	b.count = bytes.Count(b.buf.Bytes(), b.pattern)
	if b.count > before {
		for n, ch := range b.waiters {
			if b.count >= n {
				close(ch)
				delete(b.waiters, n)
			}
		}
	}
	return len(p), nil
}

func (b *watchBuffer) reached(n int) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan struct{})
	if b.count >= n {
		close(ch)
		return ch
	}
	b.waiters[n] = ch
	return ch
}

func (b *watchBuffer) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count
}

func (b *watchBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// firstError returns tofu's output from its first error on, at most 30
// lines: enough to read the diagnostic without the plan before it.
func firstError(out string) string {
	i := strings.Index(out, "Error: ")
	if i < 0 {
		return ""
	}
	lines := strings.Split(out[i:], "\n")
	return strings.Join(lines[:min(len(lines), 30)], "\n")
}

// errorLines returns tofu's "Error: ..." titles, each once, for a summary.
func errorLines(out string) []string {
	var titles []string
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(line, "│╷╵ "))
		if strings.HasPrefix(line, "Error: ") && !slices.Contains(titles, line) {
			titles = append(titles, line)
		}
	}
	return titles
}

// locksConfig declares one session profile and, for each count, that many
// locks referencing it, under prefixes unique to name. The provider's token
// is the variable "token"; extra adds var.extra locks.
func locksConfig(name, registry string, base int, extra bool, providerExtra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}
variable "token" {
  type      = string
  sensitive = true
}
variable "extra" {
  type    = number
  default = 0
}
provider "consullock" {
  address         = %q
  token           = var.token
  registry_prefix = %q
%s}
resource "consullock_session_defaults" "profile" {
  name = %q
}
resource "consullock_lock" "base" {
  count            = %d
  name             = format("%%s-base-%%03d", %q, count.index)
  prefix           = format("faults/%%s/base-%%03d", %q, count.index)
  session_defaults = consullock_session_defaults.profile.name
}
`, agent.Addr, registry, providerExtra, name, base, name, name)
	if extra {
		fmt.Fprintf(&b, `resource "consullock_lock" "extra" {
  count            = var.extra
  name             = format("%%s-extra-%%03d", %q, count.index)
  prefix           = format("faults/%%s/extra-%%03d", %q, count.index)
  session_defaults = consullock_session_defaults.profile.name
}
`, name, name)
	}
	return b.String()
}

// checkConsul checks Consul against the declaration: exactly one lock key,
// with the mutex flags, under each declared prefix and nothing else under
// faults/<name>/; exactly one record per lock (naming its prefix) and one
// for the profile under the registry prefix, and nothing else.
func checkConsul(t *testing.T, name, registry string, prefixes map[string]string) {
	t.Helper()
	kv := agent.Client().KV()
	consistent := &api.QueryOptions{RequireConsistent: true}
	keys, _, err := kv.List("faults/"+name+"/", consistent)
	if err != nil {
		t.Fatalf("listing the lock keys: %v", err)
	}
	declaredKeys := map[string]bool{}
	for _, prefix := range prefixes {
		declaredKeys[prefix+"/.lock"] = true
	}
	var orphans, badFlags []string
	found := 0
	for _, p := range keys {
		switch {
		case !declaredKeys[p.Key]:
			orphans = append(orphans, p.Key)
		case p.Flags != lockmodel.LockFlagValue:
			badFlags = append(badFlags, fmt.Sprintf("%s (0x%x)", p.Key, p.Flags))
		default:
			found++
		}
	}
	if found != len(prefixes) || len(orphans) > 0 || len(badFlags) > 0 {
		t.Errorf("lock keys: %d of %d declared keys present with the mutex flags; orphan keys %v; wrong flags %v", found, len(prefixes), orphans, badFlags)
	}

	records, _, err := kv.List(registry+"/", consistent)
	if err != nil {
		t.Fatalf("listing the registry: %v", err)
	}
	var lockRecords, profileRecords int
	var strays []string
	seen := map[string]bool{}
	for _, p := range records {
		rest := strings.TrimPrefix(p.Key, registry+"/")
		kind, recName, _ := strings.Cut(rest, "/")
		switch {
		case kind == lockmodel.KindSessionDefaults && recName == name:
			profileRecords++
		case kind == lockmodel.KindLock && prefixes[recName] != "":
			rec, err := record.DecodeLockRecord(p.Value)
			if err != nil || rec.Prefix != prefixes[recName] || seen[rec.Prefix] {
				strays = append(strays, fmt.Sprintf("%s (prefix %q, err %v)", p.Key, rec.Prefix, err))
				continue
			}
			seen[rec.Prefix] = true
			lockRecords++
		default:
			strays = append(strays, p.Key)
		}
	}
	if lockRecords != len(prefixes) || profileRecords != 1 || len(strays) > 0 {
		t.Errorf("registry %s: %d lock records of %d, %d profile records of 1, stray or duplicate records %v", registry, lockRecords, len(prefixes), profileRecords, strays)
	}
}

// unownedObjects lists the lock keys and registry records under the test's
// prefixes that no resource in the workspace's state owns.
func unownedObjects(t *testing.T, ws *tofuWorkspace, name, registry string) []string {
	t.Helper()
	owned := map[string]bool{}
	address := regexp.MustCompile(`^consullock_lock\.(base|extra)\[(\d+)\]$`)
	for _, a := range ws.stateList() {
		if a == "consullock_session_defaults.profile" {
			owned[lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, name)] = true
			continue
		}
		m := address.FindStringSubmatch(a)
		if m == nil {
			t.Fatalf("unexpected resource in state: %s", a)
		}
		i, _ := strconv.Atoi(m[2])
		lock := fmt.Sprintf("%s-%s-%03d", name, m[1], i)
		owned[lockmodel.RegistryKey(registry, lockmodel.KindLock, lock)] = true
		owned[fmt.Sprintf("faults/%s/%s-%03d/.lock", name, m[1], i)] = true
	}
	var unowned []string
	for _, prefix := range []string{"faults/" + name + "/", registry + "/"} {
		keys, _, err := agent.Client().KV().Keys(prefix, "", &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatalf("listing %s: %v", prefix, err)
		}
		for _, k := range keys {
			if !owned[k] {
				unowned = append(unowned, k)
			}
		}
	}
	return unowned
}

// declared returns lock name -> prefix for n locks of the given group, as
// locksConfig names them.
func declared(into map[string]string, name, group string, n int) {
	for i := range n {
		into[fmt.Sprintf("%s-%s-%03d", name, group, i)] = fmt.Sprintf("faults/%s/%s-%03d", name, group, i)
	}
}

// The dev agent is restarted, losing all its state, while OpenTofu applies
// 50 locks with parallelism 10, once per round at a different point of the
// apply. The apply must succeed through retries or fail with clear errors
// (no crash, no hang); re-applying must converge to exactly the
// declaration: 50 lock keys, 51 records, no orphans, and an empty plan.
func TestFaults_providerAgentRestartDuringApply(t *testing.T) {
	// The restart comes after this many resources were created (the
	// profile is the first), so that some locks exist (and will be lost)
	// and others are in flight.
	restartAfter := []int{1, 10, 35}
	if os.Getenv("FAULTS_FULL") != "" {
		restartAfter = []int{1, 3, 10, 20, 35, 45}
	}
	for round, after := range restartAfter {
		restartDuringApply(t, round, after)
	}
}

func restartDuringApply(t *testing.T, round, restartAfter int) {
	const locks = 50
	name := fmt.Sprintf("faults-restart-%d-%d", os.Getpid(), round)
	registry := "faults-registry/" + name
	ws := newTofuWorkspace(t)
	ws.vars = []string{"-var", "token=" + agent.ManagementToken}
	// Retries must outlast the restart (a few seconds): 60s, not the 30s
	// default, so that a slow shared machine does not decide the outcome.
	ws.write(locksConfig(name, registry, locks, false, "  retry           = { max_elapsed = \"60s\" }\n"))
	prefixes := map[string]string{}
	declared(prefixes, name, "base", locks)

	ctx, cancel := context.WithTimeout(context.Background(), tofuTimeout)
	defer cancel()
	out := newWatchBuffer(creationComplete)
	args := []string{"apply", "-auto-approve", "-parallelism=10"}
	cmd := ws.command(ctx, out, args...)
	applyStart := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	var restartAt, restartTook time.Duration
	var createdBefore int
	var err error
	select {
	case <-out.reached(restartAfter):
		createdBefore = out.Count()
		restartAt = time.Since(applyStart)
		t0 := time.Now()
		rctx, rcancel := context.WithTimeout(context.Background(), 90*time.Second)
		rerr := agent.Restart(rctx)
		rcancel()
		restartTook = time.Since(t0)
		if rerr != nil {
			t.Fatalf("round %d: restarting the agent: %v\n%s", round, rerr, agent.LogTail(30))
		}
		err = <-waitErr
	case err = <-waitErr:
		t.Fatalf("round %d: the apply ended (%v) before %d resources were created: no restart happened during it\n%s", round, err, restartAfter, out)
	}
	applyTook := time.Since(applyStart)
	applyOut, code := ws.result(ctx, args, out.String(), err)
	createdTotal := out.Count()
	outcome := "succeeded (retries carried it through)"
	if code != 0 {
		titles := errorLines(applyOut)
		if len(titles) == 0 {
			t.Fatalf("round %d: the interrupted apply exited %d without an error diagnostic:\n%s", round, code, applyOut)
		}
		outcome = fmt.Sprintf("failed cleanly (exit %d, %d error diagnostics: %s)", code, strings.Count(applyOut, "Error: "), strings.Join(titles, "; "))
		t.Logf("round %d: the interrupted apply's first error:\n%s", round, firstError(applyOut))
	}

	// What the interrupted apply left in Consul that its state does not
	// hold: nothing can be, unless a write landed after the restart.
	unowned := unownedObjects(t, ws, name, registry)
	if len(unowned) > 0 {
		t.Logf("round %d: after the interrupted apply, in Consul but in no state: %v", round, unowned)
	}

	// Re-apply until the plan is empty. The restart lost what was created:
	// the refresh of the first re-apply drops those resources from state
	// and the apply creates them again.
	reapplies := 0
	reapplyStart := time.Now()
	for {
		if empty, _ := ws.planIsEmpty(); empty {
			break
		}
		if reapplies == 3 {
			_, planOut := ws.planIsEmpty()
			t.Fatalf("round %d: the plan is still not empty after %d re-applies:\n%s", round, reapplies, planOut)
		}
		reapplies++
		if reOut, code := ws.run(args...); code != 0 {
			t.Errorf("round %d: re-apply %d exited %d:\n%s", round, reapplies, code, firstError(reOut))
		}
	}
	convergeTook := time.Since(reapplyStart)

	if got := len(ws.stateList()); got != locks+1 {
		t.Errorf("round %d: state holds %d resources, want %d", round, got, locks+1)
	}
	checkConsul(t, name, registry, prefixes)
	t.Logf("MEASURED agent restart during apply, round %d: %d locks + 1 profile, parallelism 10; restart %s into the apply, after %d creations, "+
		"took %s; interrupted apply ran %s, %d creations reported, %s, left %d keys or records in no state; %d re-apply(s) to converge (%s with plans); "+
		"then %d lock keys, %d records, 0 orphans, empty plan",
		round, locks, restartAt.Round(time.Millisecond), createdBefore, restartTook.Round(time.Millisecond),
		applyTook.Round(time.Millisecond), createdTotal, outcome, len(unowned), reapplies, convergeTook.Round(time.Millisecond), locks, locks+1)
}

// A token with a real Consul expiration (1m, Consul's minimum) expires
// while OpenTofu applies many locks with it. The apply must stop with the
// provider's invalid-or-expired diagnostic and keep in state everything it
// created; plan and apply with the expired token must fail the same way and
// lose nothing; with a valid token the remaining locks are created and the
// plan is then empty.
func TestFaults_providerTokenExpiresMidApply(t *testing.T) {
	const (
		base = 3
		// About 15 ms per lock at parallelism 1 here: 600 locks take
		// several seconds, so the expiry falls inside the apply even on a
		// busy machine.
		extra = 600
		// margin is how long the long apply should create locks before the
		// expiry.
		margin = 2 * time.Second
	)
	testStart := time.Now()
	name := fmt.Sprintf("faults-expiry-%d", os.Getpid())
	registry := "faults-registry/" + name
	tok, err := agent.MintToken(name, `acl = "write"
key_prefix "" { policy = "write" }
session_prefix "" { policy = "write" }
agent_prefix "" { policy = "read" }
`, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info, _, err := agent.Client().ACL().TokenRead(tok.AccessorID, nil)
	if err != nil || info.ExpirationTime == nil {
		t.Fatalf("reading the token's expiration: %v", err)
	}
	expiry := *info.ExpirationTime
	t.Logf("token expires at %s (in %s)", expiry.Format(time.RFC3339Nano), time.Until(expiry).Round(time.Millisecond))

	ws := newTofuWorkspace(t)
	ws.write(locksConfig(name, registry, base, true, ""))
	expired := []string{"-var", "token=" + tok.SecretID}
	valid := []string{"-var", "token=" + agent.ManagementToken}

	ws.vars = append(expired, "-var", "extra=0")
	ws.mustSucceed("apply", "-auto-approve")
	if got := len(ws.stateList()); got != base+1 {
		t.Fatalf("after the first apply the state holds %d resources, want %d", got, base+1)
	}

	// The long apply creates one lock at a time. Before it creates
	// anything it plans, and then configures the provider again, which
	// checks the token: so that the expiry falls between its first and its
	// last creation, it starts the time a plan of the same configuration
	// takes, plus margin, before the expiry.
	ws.vars = append(expired, "-var", "extra="+strconv.Itoa(extra))
	planStart := time.Now()
	ws.mustSucceed("plan")
	planTook := time.Since(planStart)
	time.Sleep(time.Until(expiry.Add(-planTook - margin)))
	applyStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), tofuTimeout)
	defer cancel()
	out := newWatchBuffer(creationComplete)
	args := []string{"apply", "-auto-approve", "-parallelism=1"}
	runErr := ws.command(ctx, out, args...).Run()
	applyOut, code := ws.result(ctx, args, out.String(), runErr)
	applyEnd := time.Now()
	createdMid := out.Count()
	leftBehind := strings.Count(applyOut, "Lock Record Left Behind")
	midApply := code != 0 && createdMid > 0 && applyStart.Before(expiry) && applyEnd.After(expiry)
	switch {
	case code == 0:
		t.Logf("the apply finished before the token expired (%d created); the expiry falls between applies", createdMid)
	case !invalidToken.MatchString(applyOut):
		t.Fatalf("the apply that outlived its token exited %d without the invalid-or-expired diagnostic:\n%s", code, applyOut)
	case createdMid == 0:
		t.Logf("the token expired before the apply created anything; the expiry falls between applies")
	}
	t.Logf("apply straddling the expiry: exit %d, %d locks created, started %s before the expiry, ended %s after; %d error diagnostics %q, %d records left behind; first error:\n%s",
		code, createdMid, expiry.Sub(applyStart).Round(time.Millisecond), applyEnd.Sub(expiry).Round(time.Millisecond),
		strings.Count(applyOut, "Error: "), errorLines(applyOut), leftBehind, firstError(applyOut))

	// Consul must refuse the token now.
	self := agent.ClientWithToken(tok.SecretID).ACL()
	for {
		_, _, err := self.TokenReadSelf(nil)
		if err != nil && strings.Contains(err.Error(), "403") {
			break
		}
		if time.Now().After(expiry.Add(time.Minute)) {
			t.Fatalf("Consul still accepts the token a minute after its expiry (last: %v)", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	stateAfter := ws.stateList()
	if want := base + 1 + createdMid; len(stateAfter) != want {
		t.Errorf("after the interrupted apply the state holds %d resources, want %d (profile, %d base locks, %d created before the expiry)", len(stateAfter), want, base, createdMid)
	}
	// A creation cut between its record and its key leaves the record: the
	// provider must say so (a "Lock Record Left Behind" warning each), and
	// nothing else may be in Consul that the state does not hold.
	if i := strings.Index(applyOut, "Warning: Lock Record Left Behind"); i >= 0 {
		lines := strings.Split(applyOut[i:], "\n")
		t.Logf("the provider's warning:\n%s", strings.Join(lines[:min(len(lines), 16)], "\n"))
	}
	unowned := unownedObjects(t, ws, name, registry)
	for _, k := range unowned {
		if !strings.HasPrefix(k, lockmodel.RegistryFolder(registry, lockmodel.KindLock)) {
			t.Errorf("after the interrupted apply %s is in Consul and in no state (only a lock record may be left behind)", k)
		}
	}
	if len(unowned) != leftBehind {
		t.Errorf("after the interrupted apply %d objects are in Consul and in no state %v; the provider warned about %d", len(unowned), unowned, leftBehind)
	}

	// With the expired token, plan and apply fail and state loses nothing.
	for _, cmd := range [][]string{{"plan"}, {"apply", "-auto-approve"}} {
		out, code := ws.run(cmd...)
		if code == 0 || !invalidToken.MatchString(out) {
			t.Errorf("tofu %s with the expired token: exit %d, want a failure with the invalid-or-expired diagnostic:\n%s", cmd[0], code, out)
		} else {
			t.Logf("tofu %s with the expired token fails:\n%s", cmd[0], firstError(out))
		}
		if got := ws.stateList(); !slices.Equal(got, stateAfter) {
			t.Errorf("tofu %s with the expired token changed the state: %d resources, was %d", cmd[0], len(got), len(stateAfter))
		}
	}

	// With a valid token: only the locks never created are planned, then
	// everything converges.
	ws.vars = append(valid, "-var", "extra="+strconv.Itoa(extra))
	planOut := ws.mustSucceed("plan")
	wantPlan := fmt.Sprintf("Plan: %d to add, 0 to change, 0 to destroy.", extra-createdMid)
	if createdMid == extra {
		wantPlan = "No changes."
	}
	if !strings.Contains(planOut, wantPlan) {
		t.Errorf("with a valid token the plan should only add the %d locks not yet created (%q):\n%s", extra-createdMid, wantPlan, planOut)
	}
	ws.mustSucceed("apply", "-auto-approve", "-parallelism=10")
	if empty, out := ws.planIsEmpty(); !empty {
		t.Errorf("the plan is not empty after the apply with a valid token:\n%s", out)
	}
	prefixes := map[string]string{}
	declared(prefixes, name, "base", base)
	declared(prefixes, name, "extra", extra)
	checkConsul(t, name, registry, prefixes)

	// Whether the expiry fell between the apply's first and last creation
	// depends on timing on a shared machine; when it did not, the expiry
	// fell between applies, which the checks above cover as well.
	when := "mid-apply"
	if !midApply {
		when = "between applies (this run's apply did not straddle the expiry)"
	}
	t.Logf("MEASURED token expiry %s: the apply of %d locks (parallelism 1) started %s before the expiry (a plan took %s) and ended %s after it, "+
		"exit %d, errors %q, %d locks created and all kept in state, %d records left behind; plan and apply with the expired token failed "+
		"with the invalid-or-expired diagnostic, state unchanged; with a valid token the plan added only the %d missing locks, then was empty; test %s",
		when, extra, expiry.Sub(applyStart).Round(time.Millisecond), planTook.Round(time.Millisecond), applyEnd.Sub(expiry).Round(time.Millisecond),
		code, errorLines(applyOut), createdMid, leftBehind, extra-createdMid, time.Since(testStart).Round(time.Second))
}
