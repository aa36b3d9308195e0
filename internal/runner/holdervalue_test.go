package runner

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The holder value's "started" is when the lock was taken, not when the
// runner began to wait: the controller measures max_hold from it, and a
// runner that had waited longer than max_hold was ended by the controller
// in enforce mode the moment it acquired (found by tests/faults).
func TestRun_holderValueStartedIsTheAcquisitionNotTheWait(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, fastProfile(t, 0))
	token := runnerToken(t, prefix)
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner a", token, []string{"-lock", l.Name}, childArgs(record, "a", "-sleep", "3s")...)
	first := waitKey(t, l.Key, 30*time.Second, heldByOther(""))
	b := startRun(t, "runner b", token, []string{"-lock", l.Name}, childArgs(record, "b", "-sleep", "2s")...)
	waitKey(t, l.Key, 30*time.Second, heldByOther(first.Session))
	runs := readRuns(t, record)
	if len(runs) == 0 || runs[0].tag != "a" || !runs[0].ended {
		t.Fatalf("runs = %+v", runs)
	}
	pair, _, err := agent.Client().KV().Get(l.Key, &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v", l.Key, err)
	}
	var hv lockmodel.HolderValue
	if err := json.Unmarshal(pair.Value, &hv); err != nil {
		t.Fatalf("holder value %q: %v", pair.Value, err)
	}
	// b waited about 3s for a; its value must not claim that time as held.
	if hv.Started.Before(runs[0].end.Add(-time.Second)) {
		t.Fatalf("holder value started = %s, but runner b took the lock after a's child ended at %s: it claims its wait as time held",
			hv.Started.Format(time.RFC3339Nano), runs[0].end.Format(time.RFC3339Nano))
	}
	for _, p := range []*proc{a, b} {
		if code := p.wait(time.Minute); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
}
