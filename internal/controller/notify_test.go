package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// NotifyEvents finds a missed slot, a run out of attempts and a pause
// older than the threshold, each with a stable ID; nothing else.
func TestNotifyEvents_findsWhatNeedsAPerson(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	exit := 1
	locks := map[string]lockmodel.Lock{
		"nightly": {Name: "nightly", RunOnce: &ledger.RunOnce{Schedule: "0 8 * * *", StartingDeadline: time.Hour, Since: now.Add(-3 * time.Hour)}},
		"report":  {Name: "report", RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, MaxAttempts: 1, Since: now}},
		"plain":   {Name: "plain"},
	}
	ledgers := map[string]ledger.Ledger{"report": {Lock: "report", Runs: []ledger.Run{{ID: "r1", Outcome: ledger.RunFailed,
		Attempts: []ledger.Attempt{{Number: 1, Node: "node-b", Outcome: ledger.RunFailed, ExitCode: &exit, Started: now.Add(-time.Minute), Finished: now}}}}}}
	pauses := map[string]record.Pause{
		"plain":   {Lock: "plain", Reason: "INC-7", By: "alice", At: now.Add(-2 * time.Hour)},
		"nightly": {Lock: "nightly", Reason: "fresh", By: "bob", At: now.Add(-time.Minute)},
	}
	got := map[string]NotifyEvent{}
	for _, e := range NotifyEvents(locks, ledgers, pauses, now, time.Hour) {
		if _, dup := got[e.ID]; dup {
			t.Fatalf("event %s twice", e.ID)
		}
		got[e.ID] = e
	}
	want := map[string]NotifyEvent{
		"missed:nightly:2026-12-07T08:00:00Z":        {Event: NotifyMissed, Lock: "nightly", RunID: "2026-12-07T08:00:00Z", Outcome: "missed"},
		"exhausted:report:r1":                        {Event: NotifyExhausted, Lock: "report", RunID: "r1", Outcome: "exhausted", Reason: "failed", Node: "node-b"},
		"paused_too_long:plain:2026-12-07T08:00:00Z": {Event: NotifyPausedLong, Lock: "plain", Outcome: "paused", Reason: "INC-7", By: "alice"},
	}
	if len(got) != len(want) {
		t.Fatalf("events %v; want %d: %v", got, len(want), want)
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok || g.Event != w.Event || g.Lock != w.Lock || g.RunID != w.RunID || g.Outcome != w.Outcome || g.Reason != w.Reason && w.Reason != "" || g.Node != w.Node || g.By != w.By {
			t.Errorf("event %s: %+v, want %+v", id, g, w)
		}
	}
	for _, bad := range []NotifyConfig{{URL: "ftp://x"}, {URL: "hooks.example/x", PausedAfter: time.Hour}, {URL: "http://x", PausedAfter: -time.Second}} {
		if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "-notify") {
			t.Errorf("%+v: %v, want an error naming the flag", bad, err)
		}
	}
}

// Two controller replicas (real processes) with -notify: a real HTTP
// receiver gets exactly one POST per event (a missed slot of a lock that
// never succeeded, a run out of attempts, a pause past its threshold),
// also after the leader stops and the other replica takes over.
func TestNotify_oneRealPOSTPerEventWithTwoReplicas(t *testing.T) {
	h := newHarness(t, agent)
	now := time.Now().UTC()
	slot := now.Add(-2 * time.Hour).Truncate(time.Minute)
	nightly := h.declareLock(lockmodel.Lock{Name: h.name("nightly"), Prefix: h.prefix + "/nightly",
		RunOnce: &ledger.RunOnce{Schedule: fmt.Sprintf("%d %d * * *", slot.Minute(), slot.Hour()), StartingDeadline: time.Hour, Since: slot.Add(-time.Hour)}})
	report := h.declareLock(lockmodel.Lock{Name: h.name("report"), Prefix: h.prefix + "/report",
		RunOnce: &ledger.RunOnce{Period: 24 * time.Hour, MaxAttempts: 1, Since: now}})
	exit := 3
	rec, err := record.EncodeLedger(ledger.Ledger{Lock: report.Name, Runs: []ledger.Run{{ID: "r1", Outcome: ledger.RunFailed,
		Attempts: []ledger.Attempt{{Number: 1, Node: "node-b", Session: "0b6e1f0a-6d2b-4bbf-9f43-3c1bd2b1f0a7", FencingToken: 7,
			Outcome: ledger.RunFailed, ExitCode: &exit, Started: now.Add(-time.Minute), Finished: now}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ledgerKey := record.RunLedgerKey(h.registry, report.Name)
	h.put(ledgerKey, rec)
	if out, err := h.cli("pause", "-registry-prefix", h.registry, "-lock", nightly.Name, "-reason", "INC-9 billing", "-by", "alice"); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}

	var mu sync.Mutex
	posts := map[string]int{}
	var bodies []NotifyEvent
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var e NotifyEvent
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil {
			t.Errorf("not a JSON POST: %s %s %q", r.Method, r.Header.Get("Content-Type"), b)
		}
		mu.Lock()
		posts[e.ID]++
		bodies = append(bodies, e)
		mu.Unlock()
	}))
	defer recv.Close()

	flags := []string{"-notify", recv.URL, "-notify-paused-after", "1s", "-log-level", "debug"}
	replicas := []*replica{h.replica("a", compliance.ModeObserve, flags...), h.replica("b", compliance.ModeObserve, flags...)}
	want := []string{
		"missed:" + nightly.Name + ":" + slot.Format(time.RFC3339),
		"exhausted:" + report.Name + ":r1",
	}
	eventually(t, 90*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		paused := 0
		for id := range posts {
			if strings.HasPrefix(id, NotifyPausedLong+":"+nightly.Name+":") {
				paused++
			}
		}
		for _, id := range want {
			if posts[id] == 0 {
				return fmt.Errorf("no POST for %s yet (got %v)", id, posts)
			}
		}
		if paused == 0 {
			return fmt.Errorf("no POST for the pause yet (got %v)", posts)
		}
		return nil
	})

	// The leader stops; the other takes over and, as the new leader,
	// finds every event sent.
	var leader, other *replica
	eventually(t, 30*time.Second, func() error {
		for i, r := range replicas {
			if strings.Contains(r.logs.String(), "became leader") {
				leader, other = r, replicas[1-i]
				return nil
			}
		}
		return fmt.Errorf("no replica says it became leader")
	})
	_ = leader.cmd.Process.Signal(syscall.SIGTERM) // releases the leader key: the other leads at once
	<-leader.done
	eventually(t, 90*time.Second, func() error {
		if !strings.Contains(other.logs.String(), "became leader") {
			return fmt.Errorf("replica %s has not taken over", other.name)
		}
		if !strings.Contains(other.logs.String(), "every event already sent") {
			return fmt.Errorf("replica %s has not looked for events as leader", other.name)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range posts {
		if n != 1 {
			t.Errorf("event %s was POSTed %d times, want once", id, n)
		}
	}
	for _, e := range bodies {
		if e.Lock == "" || e.Outcome == "" || e.At == "" || strings.Contains(e.Reason, "http") {
			t.Errorf("event %+v: want lock, outcome and time, and no link", e)
		}
	}
	t.Logf("%d events POSTed once each: %v", len(posts), posts)
}

// cli runs the consullock binary with the agent's environment.
func (h *harness) cli(args ...string) (string, error) {
	cmd := exec.Command(binary(h.t), args...)
	cmd.Env = append(os.Environ(), h.a.Env()...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A failed POST's error keeps the -notify URL's user info and query (a
// token) out.
func TestNotify_errorsHideTheURLsSecrets(t *testing.T) {
	raw := "https://bot:s3cret@hooks.example/notify?token=s3cret"
	err := redactURL(errors.New(`Post "`+raw+`": dial tcp: refused`), raw)
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "https://hooks.example/notify") {
		t.Fatalf("error %q: want the URL without its user info and query", err)
	}
}
