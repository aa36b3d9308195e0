package runner

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// holdOnce runs one runner on lock l until its child has started, checks
// that the token the child got is what the data source reports for it
// (the ModifyIndex of the key its session holds), lets the child finish and
// returns its recorded run.
func holdOnce(t *testing.T, l lockmodel.Lock, token, record, tag string) *childRun {
	t.Helper()
	p := startRun(t, "runner "+tag, token, []string{"-lock", l.Name}, childArgs(record, tag, "-wait-stdin")...)
	waitStarted(t, record, tag)
	var run *childRun
	for _, r := range readRuns(t, record) {
		if r.tag == tag {
			run = r
		}
	}
	key := l.Key
	if l.IsSemaphore() {
		key = l.Prefix + "/" + run.session
	}
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || pair.Session != run.session {
		t.Fatalf("%s: the key %s its session holds: %+v, %v", tag, key, pair, err)
	}
	if run.token == 0 || run.token != pair.ModifyIndex {
		t.Fatalf("%s: %s=%d, but the key it holds has ModifyIndex %d", tag, EnvFencingToken, run.token, pair.ModifyIndex)
	}
	if run.index != pair.LockIndex {
		t.Fatalf("%s: %s=%d, but the key it holds has LockIndex %d", tag, EnvLockIndex, run.index, pair.LockIndex)
	}
	p.closeStdin()
	if code := p.wait(time.Minute); code != 0 {
		t.Fatalf("%s exited %d", p.name, code)
	}
	return run
}

// CONSUL_LOCK_FENCING_TOKEN strictly increases from holder to holder
// through everything that sends LockIndex back: the key deleted and created
// again (consul lock deletes an unheld key when it exits; the provider and
// the controller re-create it), and a plain write (a flag repair), which
// sets LockIndex to 0; and `consul lock`, which deletes the unheld key when
// it exits. CONSUL_LOCK_INDEX stays Consul's LockIndex.
func TestRun_fencingTokenGrowsAcrossKeyRecreationAndPlainWrites(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	kv := agent.Client().KV()

	a := holdOnce(t, l, token, record, "a")
	b := holdOnce(t, l, token, record, "b") // plain hand-over
	if _, err := kv.Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	put(t, kv, l.Key, nil, lockmodel.LockFlagValue) // re-created, as the provider does
	c := holdOnce(t, l, token, record, "c")
	if _, err := kv.Put(&api.KVPair{Key: l.Key, Flags: lockmodel.LockFlagValue}, nil); err != nil {
		t.Fatal(err) // a plain write: LockIndex 0
	}
	d := holdOnce(t, l, token, record, "d")
	// consul lock holds it next, and deletes the unheld key when it exits.
	cl := startConsulLock(t, "consul lock", 1, l.Prefix, childArgs(record, "consul", "-sleep", "100ms")...)
	if code := cl.wait(time.Minute); code != 0 {
		t.Fatalf("consul lock exited %d", code)
	}
	if pair, _, err := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true}); err != nil || pair != nil {
		t.Fatalf("after consul lock exited the key is %+v (%v); this Consul's consul lock no longer deletes it", pair, err)
	}
	e := holdOnce(t, l, token, record, "e") // creates the key again: LockIndex 1

	runs := []*childRun{a, b, c, d, e}
	for i := 1; i < len(runs); i++ {
		if runs[i].token <= runs[i-1].token {
			t.Fatalf("%s: fencing token %d, not above %s's %d", runs[i].tag, runs[i].token, runs[i-1].tag, runs[i-1].token)
		}
	}
	// The scenario did send LockIndex back, so the check above means
	// something.
	if !(b.index > a.index && c.index <= b.index && d.index <= c.index && e.index == 1) {
		t.Fatalf("LockIndex a..e = %d %d %d %d %d; want it to grow, then go back after the re-creation, the plain write and consul lock's delete",
			a.index, b.index, c.index, d.index, e.index)
	}
	t.Logf("fencing tokens %d %d %d %d %d, LockIndex %d %d %d %d %d", a.token, b.token, c.token, d.token, e.token,
		a.index, b.index, c.index, d.index, e.index)
}

// For a semaphore the token is the holder's contender key ModifyIndex at
// its admission, and it grows from admission to admission, also when the
// holder table is deleted and created again.
func TestRun_semaphoreFencingTokenIsTheAdmission(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: 2}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	kv := agent.Client().KV()

	a := holdOnce(t, l, token, record, "a")
	if _, err := kv.Delete(l.Key, nil); err != nil {
		t.Fatal(err)
	}
	put(t, kv, l.Key, lockmodel.NewSemaphoreValue(l.Limit), lockmodel.SemaphoreFlagValue)
	b := holdOnce(t, l, token, record, "b")
	if b.token <= a.token {
		t.Fatalf("b: fencing token %d, not above a's %d", b.token, a.token)
	}
}
