package jobctl

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/holder"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agent is the real Consul agent (ACLs on, default deny) these tests share.
var agent *testenv.Agent

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithAgent(m, &agent))
}

// declared is a lock declared in a registry of its own on the agent.
type declared struct {
	registry string
	lock     lockmodel.Lock
}

// declare writes lock name's record (profile "p", ttl 15s, lock_delay
// 1s) and creates its key, under a prefix of the test's own.
func declare(t *testing.T, name string, runOnce *ledger.RunOnce) declared {
	t.Helper()
	p := testenv.UniquePrefix(t.Name())
	c := agent.Client()
	t.Cleanup(func() { _, _ = c.KV().DeleteTree(p+"/", nil) })
	d := declared{registry: p + "/registry"}
	prof, err := record.EncodeSessionProfileRecord(lockmodel.SessionProfile{Name: "p", TTL: 15 * time.Second, LockDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l, err := lockmodel.Lock{Name: name, Prefix: p + "/jobs/" + name, SessionDefaults: "p", RunOnce: runOnce}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string][]byte{
		lockmodel.RegistryKey(d.registry, lockmodel.KindSessionDefaults, "p"): prof,
		lockmodel.RegistryKey(d.registry, lockmodel.KindLock, name):           rec,
	} {
		if _, err := c.KV().Put(&api.KVPair{Key: k, Value: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.KV().CAS(&api.KVPair{Key: l.Key, Flags: l.Flags()}, nil); err != nil {
		t.Fatal(err)
	}
	d.lock = l
	return d
}

// run runs prog with token (CONSUL_HTTP_TOKEN) and returns its exit code,
// stdout and stderr; the token's secret must appear in neither.
func (d declared) run(t *testing.T, token testenv.Token, prog func(context.Context, []string, env) int, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
	t.Setenv("CONSUL_HTTP_TOKEN", token.SecretID)
	var out, errs bytes.Buffer
	e := env{stdin: strings.NewReader(""), stdout: &out, stderr: &errs, isTerminal: func() bool { return false }, now: time.Now}
	code := prog(context.Background(), append([]string{"-registry-prefix", d.registry, "-lock", d.lock.Name}, args...), e)
	if strings.Contains(out.String()+errs.String(), token.SecretID) {
		t.Fatalf("a token's secret in the output of %v", args)
	}
	return code, out.String(), errs.String()
}

func (d declared) pause(t *testing.T) *record.Pause {
	t.Helper()
	pair, _, err := agent.Client().KV().Get(record.PauseKey(d.registry, d.lock.Name), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil {
		return nil
	}
	p, err := record.DecodePauseRecord(pair.Value)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// operator mints a token with write on d's pause record and read on its
// declarations.
func (d declared) operator(t *testing.T, name string) testenv.Token {
	t.Helper()
	rules := aclrules.RenderRules(aclrules.RulesInput{LockKeys: []string{record.PauseKey(d.registry, d.lock.Name)},
		ReadKeys: []string{lockmodel.RegistryKey(d.registry, lockmodel.KindLock, d.lock.Name), lockmodel.RegistryKey(d.registry, lockmodel.KindSessionDefaults, "p")}})
	tok, err := agent.MintToken(testenv.UniquePrefix(name), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestPauseResume_refusalsAndAccessor: a second pause is refused without
// -force, naming who paused, when and why; pause and resume record and
// print the caller's token accessor ID (never its secret) next to -by;
// resume of an unpaused lock exits 1 as its help says; a pause Terraform
// wrote is resumed only with -force, saying the next apply pauses again.
func TestPauseResume_refusalsAndAccessor(t *testing.T) {
	d := declare(t, "nightly", nil)
	alice, bob := d.operator(t, "alice"), d.operator(t, "bob")

	code, out, errs := d.run(t, alice, Pause, "-reason", "INC-1: outage", "-by", "alice@ops")
	p := d.pause(t)
	if code != ExitOK || p == nil || p.By != "alice@ops" || p.Accessor != alice.AccessorID || !strings.Contains(out, "alice@ops (token "+alice.AccessorID+")") {
		t.Fatalf("pause: exit %d, record %+v, stdout %q, stderr %q", code, p, out, errs)
	}
	code, _, errs = d.run(t, bob, Pause, "-reason", "INC-2: deploy", "-by", "bob@ops")
	if code != ExitRefused || !strings.Contains(errs, "already paused by alice@ops (token "+alice.AccessorID+") since "+p.At.Format(time.RFC3339)+": INC-1: outage") ||
		!strings.Contains(errs, "-force") {
		t.Fatalf("second pause: exit %d, stderr %q; want 1 naming alice, her token, when and why", code, errs)
	}
	if q := d.pause(t); *q != *p {
		t.Fatalf("a refused pause changed the record: %+v", q)
	}
	if code, _, errs = d.run(t, bob, Pause, "-reason", "INC-2: deploy", "-by", "bob@ops", "-force"); code != ExitOK {
		t.Fatalf("pause -force: exit %d, %s", code, errs)
	}
	if q := d.pause(t); q.By != "bob@ops" || q.Accessor != bob.AccessorID || q.Reason != "INC-2: deploy" {
		t.Fatalf("pause -force wrote %+v", q)
	}

	code, out, errs = d.run(t, alice, Resume, "-by", "alice@ops")
	if code != ExitOK || d.pause(t) != nil || !strings.Contains(out, "resumed lock nightly by alice@ops (token "+alice.AccessorID+")") ||
		!strings.Contains(out, "paused by bob@ops (token "+bob.AccessorID+")") {
		t.Fatalf("resume: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs = d.run(t, alice, Resume); code != ExitRefused || !strings.Contains(errs, "lock nightly is not paused") {
		t.Fatalf("resume of an unpaused lock: exit %d, stderr %q; want 1", code, errs)
	}

	// A name no lock declares: exit 2 naming the flag, the value and the
	// declared names the token may list; nothing written.
	admin := testenv.Token{SecretID: agent.ManagementToken}
	if code, _, errs = d.run(t, admin, Pause, "-lock", "nightlyy", "-reason", "x"); code != ExitUsage ||
		!strings.Contains(errs, `-lock "nightlyy"`) || !strings.Contains(errs, "declared: nightly") {
		t.Fatalf("pause of an undeclared lock: exit %d, stderr %q", code, errs)
	}

	// A pause consullock_lock.paused wrote.
	rec, err := record.EncodePauseRecord(record.Pause{Lock: "nightly", Reason: "migration", By: record.PausedByTerraform, At: time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: record.PauseKey(d.registry, "nightly"), Value: rec}, nil); err != nil {
		t.Fatal(err)
	}
	code, _, errs = d.run(t, alice, Resume)
	if code != ExitRefused || d.pause(t) == nil || !strings.Contains(errs, "paused by Terraform") || !strings.Contains(errs, "the next apply pauses it again") {
		t.Fatalf("resume of Terraform's pause: exit %d, stderr %q; want 1 and the pause kept", code, errs)
	}
	code, out, _ = d.run(t, alice, Resume, "-force")
	if code != ExitOK || d.pause(t) != nil || !strings.Contains(out, "the next apply pauses it again") {
		t.Fatalf("resume -force of Terraform's pause: exit %d, stdout %q", code, out)
	}
}

// worker mints a worker token as the runner guide's per-node pattern
// renders it (consullock_acl_policy for_each node: session_node_prefixes
// = [the node]): key write on the lock key and the run ledger, read on
// the declarations, session write on its own node only.
func (d declared) worker(t *testing.T, node string) testenv.Token {
	t.Helper()
	rules := aclrules.RenderRules(aclrules.RulesInput{
		LockKeys:            []string{d.lock.Key},
		RunLedgerKeys:       []string{record.RunLedgerKey(d.registry, d.lock.Name)},
		SessionNodePrefixes: []string{node},
		ReadKeys: []string{lockmodel.RegistryKey(d.registry, lockmodel.KindLock, d.lock.Name),
			lockmodel.RegistryKey(d.registry, lockmodel.KindSessionDefaults, "p"), record.PauseKey(d.registry, d.lock.Name)},
	})
	tok, err := agent.MintToken(testenv.UniquePrefix(node), rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// holdOn makes a session on catalog node node (registered with a passing
// serfHealth) hold d's lock, with a running attempt in its run ledger.
func (d declared) holdOn(t *testing.T, node string) string {
	t.Helper()
	c := agent.Client()
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1",
		Check: &api.AgentCheck{Node: node, CheckID: "serfHealth", Name: "Serf Health Status", Status: api.HealthPassing}}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, nil) })
	id, _, err := c.Session().Create(&api.SessionEntry{Node: node, TTL: "15s", LockDelay: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Session().Destroy(id, nil) })
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: d.lock.Key, Session: id, Flags: d.lock.Flags()}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	pair, _, err := c.KV().Get(d.lock.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ledger.Ledger{Lock: d.lock.Name}.Begin("r1", holder.Holder{Node: node, Session: id, FencingToken: pair.ModifyIndex}, 3, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := record.EncodeLedger(b.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: record.RunLedgerKey(d.registry, d.lock.Name), Value: rec}, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRelease_perNodeWorkerPolicy: with the per-node worker policy, a
// worker's token cannot release another worker's holder (a real 403) and
// release names the rule it needs; the holder's own node's token can, and
// the run ledger records who released the attempt with the token's
// accessor ID.
func TestRelease_perNodeWorkerPolicy(t *testing.T) {
	d := declare(t, "nightly", &ledger.RunOnce{Period: 24 * time.Hour})
	nodeA, nodeB := testenv.UniquePrefix("worker-a"), testenv.UniquePrefix("worker-b")
	session := d.holdOn(t, nodeB)
	a, b := d.worker(t, nodeA), d.worker(t, nodeB)

	code, _, errs := d.run(t, a, Release, "-reason", "stuck", "-yes", "-by", "worker-a")
	if code != ExitConsul || !strings.Contains(errs, "may not see the holder of lock nightly") ||
		!strings.Contains(errs, `needs session write on the holder's node: session_prefix "<node>" { policy = "write" }`) {
		t.Fatalf("release by another node's worker: exit %d, stderr %q; want 3 naming the rule", code, errs)
	}
	if pair, _, _ := agent.Client().KV().Get(d.lock.Key, &api.QueryOptions{RequireConsistent: true}); pair == nil || pair.Session != session {
		t.Fatalf("the holder was released by a denied call: %+v", pair)
	}

	code, out, errs := d.run(t, b, Release, "-reason", "stuck on NFS", "-yes", "-by", "worker-b")
	if code != ExitOK || !strings.Contains(out, "by worker-b (token "+b.AccessorID+"): stuck on NFS") {
		t.Fatalf("release by the holder's node's worker: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	pair, _, err := agent.Client().KV().Get(record.RunLedgerKey(d.registry, d.lock.Name), &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := record.DecodeLedger(pair.Value)
	if err != nil {
		t.Fatal(err)
	}
	if at := l.Runs[0].Attempts[0]; at.Outcome != ledger.RunReleased || at.ReleasedBy != "worker-b" || at.ReleasedByAccessor != b.AccessorID {
		t.Fatalf("ledger attempt %+v; want released by worker-b with its accessor", at)
	}
}
