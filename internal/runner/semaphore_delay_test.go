package runner

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// deadHolderLog is what a waiting runner logs when it sees a holder whose
// session ended while still listed in the holder table.
const deadHolderLog = "its slot frees when its lock-delay has passed"

// Found by the cluster fault suite (cluster-semaphore-client-freeze):
// Consul puts no lock-delay on a semaphore slot, an entry in the holder
// table. When a holder's session ends while it is still listed (there: the
// servers invalidated a frozen node's session; here: destroyed out of
// band, which puts no lock-delay on the table either), a waiting runner
// must not take the slot before lock_delay has passed since it saw the
// holder gone: the old holder's runner stops its command only by then.
func TestRun_semaphoreWaiterTakesADeadHoldersSlotOnlyAfterLockDelay(t *testing.T) {
	t.Parallel()
	const lockDelay = 3 * time.Second
	prefix := testenv.UniquePrefix(t.Name())
	p := fastProfile(t, lockDelay)
	p.Behavior = lockmodel.BehaviorDelete
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: 2}, p)
	record := filepath.Join(t.TempDir(), "record")

	// Two holders that cannot leave the table when their session ends:
	// api.Semaphore clients (what `consul lock -n` runs) on sessions with
	// the profile's lock-delay.
	client := agent.Client()
	var holders []string
	for i := range 2 {
		id, _, err := client.Session().Create(&api.SessionEntry{
			Name: uniqueName(t, "holder"), LockDelay: lockDelay, Behavior: api.SessionBehaviorDelete,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = client.Session().Destroy(id, nil) })
		sem, err := client.SemaphoreOpts(&api.SemaphoreOptions{Prefix: prefix, Limit: 2, Session: id})
		if err != nil {
			t.Fatal(err)
		}
		if held, err := sem.Acquire(nil); err != nil || held == nil {
			t.Fatalf("holder %d: acquire: %v", i, err)
		}
		holders = append(holders, id)
	}

	c := startRun(t, "runner c", runnerToken(t, prefix), []string{"-lock", l.Name}, childArgs(record, "c", "-sleep", "100ms")...)
	waitOutput(t, c, "waiting for a semaphore slot")
	destroyed := time.Now()
	if _, err := client.Session().Destroy(holders[0], nil); err != nil {
		t.Fatal(err)
	}
	if code := c.wait(time.Minute); code != 0 {
		t.Fatalf("runner c exited %d, want 0", code)
	}
	runs := readRuns(t, record)
	if len(runs) != 1 {
		t.Fatalf("runs = %+v", runs)
	}
	// c saw the holder gone after the destroy, so a start lock_delay after
	// that is also at least lock_delay after the destroy.
	after := runs[0].start.Sub(destroyed)
	t.Logf("runner c started %s after the holder's session was destroyed (lock_delay %s)", after, lockDelay)
	if after < lockDelay {
		t.Fatalf("runner c took the dead holder's slot %s after its session was destroyed, before lock_delay %s had passed", after, lockDelay)
	}
	if !strings.Contains(c.out.String(), deadHolderLog) {
		t.Fatalf("runner c did not say why it waited:\n%s", c.out.String())
	}
}

// A holder that ends cleanly leaves the holder table before it destroys
// its session, so the waiter takes the slot at once, without lock_delay.
func TestRun_semaphoreCleanReleaseHandsOverWithoutLockDelay(t *testing.T) {
	t.Parallel()
	const lockDelay = 30 * time.Second
	prefix := testenv.UniquePrefix(t.Name())
	p := fastProfile(t, lockDelay)
	p.Behavior = lockmodel.BehaviorDelete
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: 2}, p)
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(record, "a", "-wait-stdin")...)
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-wait-stdin")...)
	waitStarted(t, record, "a")
	waitStarted(t, record, "b")
	c := startRun(t, "runner c", token, []string{"-lock", l.Name}, childArgs(record, "c", "-sleep", "100ms")...)
	waitOutput(t, c, "waiting for a semaphore slot")
	a.closeStdin()
	for _, p := range []*proc{a, c} {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d, want 0", p.name, code)
		}
	}
	b.closeStdin()
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("runner b exited %d, want 0", code)
	}
	var endA, startC time.Time
	for _, r := range readRuns(t, record) {
		switch r.tag {
		case "a":
			endA = r.end
		case "c":
			startC = r.start
		}
	}
	t.Logf("runner c started %s after a's command ended (lock_delay %s)", startC.Sub(endA), lockDelay)
	if strings.Contains(c.out.String(), deadHolderLog) {
		t.Fatalf("runner c waited out a lock-delay after a clean release:\n%s", c.out.String())
	}
	if startC.Sub(endA) >= lockDelay {
		t.Fatalf("runner c started %s after a's clean exit: a clean hand-over must not wait lock_delay %s", startC.Sub(endA), lockDelay)
	}
}
