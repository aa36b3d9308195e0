package runner

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A worker whose policy loses session:write while it runs a job: its
// renewals are refused with 403 and logged as such (not "unknown:
// Unexpected response code: 403"), it stops the command and exits 123,
// and the log and the run ledger's attempt say why: "the token lost
// session:write on <node>".
func TestRunOnce_lossToARevokedSessionWriteSaysSo(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix, RunOnce: &ledger.RunOnce{Period: time.Hour}},
		fastProfile(t, time.Second))
	rules := func(session bool) string {
		r := fmt.Sprintf(`key_prefix %q { policy = "write" }
key_prefix "%s/" { policy = "read" }
key %q { policy = "write" }
`, prefix, lockmodel.DefaultRegistryPrefix, ledgerKey(l))
		if session {
			r += fmt.Sprintf("session %q { policy = \"write\" }\n", agent.NodeName)
		}
		return r
	}
	name := uniqueName(t, "policy")
	tok, err := agent.MintToken(name, rules(true), 0)
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "record")
	a := startRun(t, "runner", tok.SecretID, []string{"-lock", l.Name, "-run-id", "r1"}, childArgs(record, "a", "-sleep", "5m")...)
	waitStarted(t, record, "a")
	if _, _, err := agent.Client().ACL().PolicyUpdate(&api.ACLPolicy{ID: tok.PolicyID, Name: name, Rules: rules(false)}, nil); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(time.Minute); code != ExitLockLost {
		t.Fatalf("runner exited %d, want %d", code, ExitLockLost)
	}
	want := "the token lost session:write on " + agent.NodeName
	out := a.out.String()
	if strings.Contains(out, "unknown: Unexpected response code: 403") || !strings.Contains(out, `lacks \"session:write\"`) {
		t.Errorf("a refused renewal is not classified (permission denied, naming session:write):\n%s", out)
	}
	lost := false
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "lock lost") && strings.Contains(line, want) {
			lost = true
		}
	}
	if !lost {
		t.Errorf("no \"lock lost\" line says %q:\n%s", want, out)
	}
	if testing.Verbose() {
		t.Logf("runner output:\n%s", out)
	}
	run := ledgerRun(t, l, "r1")
	if len(run.Attempts) != 1 || run.Attempts[0].Outcome != ledger.RunLost || !strings.HasPrefix(run.Attempts[0].Reason, want) {
		t.Fatalf("ledger run %+v; want attempt 1 lost with the reason %q", run, want)
	}
}

// -log-format json: every line the runner logs is one JSON event with the
// controller's keys (time, level, msg, then the event's attributes).
func TestRun_logFormatJSON(t *testing.T) {
	t.Parallel()
	prefix := testenv.UniquePrefix(t.Name())
	l := declare(t, lockmodel.Lock{Name: uniqueName(t, "lock"), Prefix: prefix}, &lockmodel.SessionProfile{Name: uniqueName(t, "profile"), TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	record := filepath.Join(t.TempDir(), "record")
	run := startRun(t, "runner", runnerToken(t, prefix), []string{"-lock", l.Name, "-log-format", "json"}, childArgs(record, "a")...)
	if code := run.wait(time.Minute); code != 0 {
		t.Fatalf("runner exited %d, want 0", code)
	}
	msgs := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(run.out.String()), "\n") {
		var event map[string]any
		if err := json.Unmarshal([]byte(line), &event); err != nil {
			t.Fatalf("not a JSON event: %q (%v)", line, err)
		}
		for _, k := range []string{"time", "level", "msg", "lock"} {
			if _, ok := event[k]; !ok {
				t.Errorf("event lacks %q: %s", k, line)
			}
		}
		msgs[fmt.Sprint(event["msg"])] = true
	}
	if !msgs["lock acquired"] || !msgs["lock released"] {
		t.Errorf("events %v; want lock acquired and lock released", msgs)
	}
}
