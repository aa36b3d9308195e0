package concurrency_test

import (
	"os"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// agent is one real Consul agent (ACLs on, default deny) for the package.
var agent *testenv.Agent

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithAgent(m, &agent))
}

// setEnv points api.DefaultConfig at the agent (management token), so that
// the examples build their client as a program would.
func setEnv() {
	_ = os.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
	_ = os.Setenv("CONSUL_HTTP_TOKEN", agent.ManagementToken)
}

// declare writes the records of profile p and lock l under registry, as the
// provider does.
func declare(t testing.TB, registry string, p lockmodel.SessionProfile, l lockmodel.Lock) {
	if t != nil {
		t.Helper()
	}
	kv := agent.Client().KV()
	pv, err := record.EncodeSessionProfileRecord(p)
	must(t, err)
	_, err = kv.Put(&api.KVPair{Key: lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, p.Name), Value: pv}, nil)
	must(t, err)
	lv, err := record.EncodeLockRecord(l)
	must(t, err)
	_, err = kv.Put(&api.KVPair{Key: lockmodel.RegistryKey(registry, lockmodel.KindLock, l.Name), Value: lv}, nil)
	must(t, err)
}

func must(t testing.TB, err error) {
	if err == nil {
		return
	}
	if t == nil {
		panic(err)
	}
	t.Helper()
	t.Fatal(err)
}

// runOnceLock declares a run-once mutex called name with a profile of TTL
// 10s and no lock-delay, and returns the registry prefix.
func runOnceLock(t testing.TB, name string, maxAttempts int) string {
	registry := testenv.UniquePrefix(name)
	p := lockmodel.SessionProfile{Name: "jobs", TTL: 10 * time.Second, LockDelay: 0}
	declare(t, registry, p, lockmodel.Lock{
		Name: name, Prefix: registry + "/jobs/" + name, Limit: 1, SessionDefaults: "jobs",
		RunOnce: &ledger.RunOnce{Period: time.Hour, MaxAttempts: maxAttempts},
	})
	return registry
}

// poolLock declares a semaphore called name of limit slots with a profile
// called name (behavior delete, as api.Semaphore's), and returns the
// registry prefix.
func poolLock(t testing.TB, name string, limit int) string {
	registry := testenv.UniquePrefix(name)
	p := lockmodel.SessionProfile{Name: name, TTL: 10 * time.Second, LockDelay: 0, Behavior: lockmodel.BehaviorDelete}
	declare(t, registry, p, lockmodel.Lock{Name: name, Prefix: registry + "/" + name, Limit: limit, SessionDefaults: name})
	return registry
}

// waitClosed waits for c, failing after a bound far above any expected
// wait (a failed test, not a measurement).
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s was not closed", what)
	}
}
