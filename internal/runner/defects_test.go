package runner

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Issue 12, section 4: changing a semaphore's limit (the provider rewrites
// Limit in <prefix>/.lock by check-and-set and keeps Holders) does not take
// the slots from the holders: their commands run on to their end, as
// `consul lock -n` holders do.
func TestRun_semaphoreHoldersSurviveALimitChange(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	p := fastProfile(t, 0)
	p.Behavior = lockmodel.BehaviorDelete
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: 2}, p)
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(record, "a", "-wait-stdin")...)
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-wait-stdin")...)
	waitStarted(t, record, "a")
	waitStarted(t, record, "b")

	// Resize as the provider does: CAS on the holder table, Limit 2 -> 3,
	// Holders kept.
	kv := agent.Client().KV()
	pair, _, err := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v", l.Key, err)
	}
	resized, err := lockmodel.SemaphoreValueWithLimit(pair.Value, 3)
	if err != nil {
		t.Fatal(err)
	}
	ok, _, err := kv.CAS(&api.KVPair{Key: l.Key, Value: resized, Flags: pair.Flags, ModifyIndex: pair.ModifyIndex}, nil)
	if err != nil || !ok {
		t.Fatalf("resize: ok=%v err=%v", ok, err)
	}
	// The watchers wake on the write at once (blocking queries); give a
	// loaded machine time to act on it before ending the commands.
	time.Sleep(3 * time.Second)
	for _, p := range []*proc{a, b} {
		p.closeStdin()
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d after the limit changed, want 0 (the holder keeps its slot)", p.name, code)
		}
	}
	for _, r := range readRuns(t, record) {
		if r.termed || !r.ended {
			t.Fatalf("child %s was stopped after the limit changed: %+v", r.tag, r)
		}
	}
}

// Issue 12, section 4: processes the command leaves in its process group
// are ended (SIGTERM, then SIGKILL after -grace) before the lock is
// released, so that nothing the command started works on once the next
// holder may start.
func TestRun_endsWhatTheCommandLeftInItsGroupBeforeReleasing(t *testing.T) {
	for _, onTerm := range []string{"exit", "ignore"} {
		t.Run("leftover that on SIGTERM does "+onTerm, func(t *testing.T) {
			t.Parallel()
			prefix := testenv.UniquePrefix(t.Name())
			l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
			record := filepath.Join(t.TempDir(), "record")
			run := startRun(t, "runner", runnerToken(t, prefix), []string{"-lock", l.Name, "-grace", "1s"},
				childArgs(record, "a", "-sleep", "100ms", "-spawn", "leftover", "-spawn-on-term", onTerm)...)
			if code := run.wait(time.Minute); code != 0 {
				t.Fatalf("runner exited %d, want the command's 0", code)
			}
			var leftover *childRun
			for _, r := range readRuns(t, record) {
				if r.tag == "leftover" {
					leftover = r
				}
			}
			if leftover == nil || leftover.pid == 0 {
				t.Fatalf("the command did not leave a process behind; the test proved nothing: %+v", readRuns(t, record))
			}
			if err := syscall.Kill(leftover.pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("the process the command left (pid %d) still runs after the runner exited (kill 0: %v)", leftover.pid, err)
			}
			released := logTime(t, run, "lock released")
			switch onTerm {
			case "exit":
				if !leftover.termed || !leftover.ended || !leftover.end.Before(released) {
					t.Fatalf("the leftover was not ended by SIGTERM before the release at %s: %+v", released, leftover)
				}
			case "ignore":
				if killed := logTime(t, run, "processes left by the command did not exit within the grace period; killing them"); !killed.Before(released) {
					t.Fatalf("the leftover was killed at %s, not before the release at %s", killed, released)
				}
			}
		})
	}
}

// Issue 12, section 4: a semaphore holder's "started" is when it was
// admitted, not when it began to wait (the controller measures max_hold
// from it).
func TestRun_semaphoreHolderStartedIsTheAdmissionNotTheWait(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	p := fastProfile(t, 0)
	p.Behavior = lockmodel.BehaviorDelete
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, Limit: 2}, p)
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(record, "a", "-sleep", "3s")...)
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "3s")...)
	waitStarted(t, record, "a")
	waitStarted(t, record, "b")
	c := startRun(t, "runner c", token, []string{"-lock", l.Name}, childArgs(record, "c", "-wait-stdin")...)
	waitStarted(t, record, "c")
	var first time.Time
	var session string
	for _, r := range readRuns(t, record) {
		if r.tag != "c" && r.ended && (first.IsZero() || r.end.Before(first)) {
			first = r.end
		}
		if r.tag == "c" {
			session = r.session
		}
	}
	pair, _, err := agent.Client().KV().Get(prefix+"/"+session, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("contender key of c: %v %v", pair, err)
	}
	var hv lockmodel.HolderValue
	if err := json.Unmarshal(pair.Value, &hv); err != nil {
		t.Fatalf("holder value %q: %v", pair.Value, err)
	}
	// c waited about 3s for a slot; its value must not claim that as held.
	if hv.Started.Before(first.Add(-time.Second)) {
		t.Fatalf("holder value started = %s, but c was admitted after the first holder's child ended at %s: it claims its wait as time held",
			hv.Started.Format(time.RFC3339Nano), first.Format(time.RFC3339Nano))
	}
	c.closeStdin()
	for _, p := range []*proc{a, b, c} {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	if !strings.Contains(string(pair.Value), `"lock":"`+l.Name+`"`) {
		t.Fatalf("holder value %s does not name the lock", pair.Value)
	}
}
