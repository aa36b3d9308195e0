package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

func TestChildExitCode(t *testing.T) {
	run := func(script string) *os.ProcessState {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		_ = cmd.Run()
		return cmd.ProcessState
	}
	exit0, exit7, term := run("exit 0"), run("exit 7"), run("kill -TERM $$")
	cases := []struct {
		name        string
		state       *os.ProcessState
		passThrough bool
		want        int
	}{
		{"success is 0", exit0, true, 0},
		{"the child's code is passed through", exit7, true, 7},
		{"a child ended by SIGTERM gives 128+15", term, true, 143},
		{"without pass-through a failing child still gives 0", exit7, false, 0},
		{"without pass-through a signalled child still gives 0", term, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := childExitCode(tc.state, tc.passThrough); got != tc.want {
				t.Fatalf("childExitCode = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStartErrorExitCode(t *testing.T) {
	_, notFound := exec.LookPath("no-such-command-consullock")
	if got := startErrorExitCode(notFound); got != ExitNotFound {
		t.Fatalf("not found: %d, want %d", got, ExitNotFound)
	}
	notExec := exec.Command(t.TempDir()).Start() // a directory cannot be executed
	if got := startErrorExitCode(notExec); got != ExitCannotExecute {
		t.Fatalf("not executable (%v): %d, want %d", notExec, got, ExitCannotExecute)
	}
	if got := startErrorExitCode(&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOENT}); got != ExitNotFound {
		t.Fatalf("missing path: %d, want %d", got, ExitNotFound)
	}
}

func TestExitCodesAreDistinct(t *testing.T) {
	codes := []int{ExitOK, ExitUsage, ExitLockLost, ExitTimeout, ExitSetup, ExitCannotExecute, ExitNotFound,
		signalExitCode(syscall.SIGINT), signalExitCode(syscall.SIGTERM)}
	if got := slices.Compact(slices.Sorted(slices.Values(codes))); len(got) != len(codes) {
		t.Fatalf("exit codes collide: %v", codes)
	}
	if signalExitCode(syscall.SIGINT) != 130 || signalExitCode(syscall.SIGTERM) != 143 {
		t.Fatal("signal exit codes are not 128+N")
	}
}

func TestLossJudge(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const ttl = 10 * time.Second
	// Without health checks, LossAfter is the TTL.
	ttlRule := lockmodel.StopRule{TTL: ttl, RenewEvery: 3 * time.Second, RenewTimeout: 2 * time.Second, Grace: 2 * time.Second, Margin: time.Second}
	// With health checks and lock_delay 10s: LossAfter 10 - 1 - 2 = 7s.
	delayRule := lockmodel.StopRule{TTL: 30 * time.Second, LockDelay: 10 * time.Second, HealthChecks: true,
		RenewEvery: 2 * time.Second, RenewTimeout: 2 * time.Second, Grace: 2 * time.Second, Margin: time.Second}
	type step struct {
		obs   *observation // nil: only check the clock
		now   time.Duration
		lost  bool
		about string // part of the reason when lost
	}
	cases := []struct {
		name  string
		rule  lockmodel.StopRule
		steps []step
	}{
		{"renewals keep the lock", ttlRule, []step{
			{&observation{kind: obsRenewed, at: at(3 * time.Second)}, 3 * time.Second, false, ""},
			{&observation{kind: obsRenewed, at: at(6 * time.Second)}, 6 * time.Second, false, ""},
			{nil, 15 * time.Second, false, ""},
		}},
		{"the key held by another session is loss at once", ttlRule, []step{
			{&observation{kind: obsKeyLost, at: at(time.Second), detail: "held by session x"}, time.Second, true, "held by session x"},
		}},
		{"a renewal answered 404 is loss at once", ttlRule, []step{
			{&observation{kind: obsSessionGone, at: at(time.Second)}, time.Second, true, "no longer exists"},
		}},
		{"one No cluster leader is not loss (Consul issue 1162)", ttlRule, []step{
			{&observation{kind: obsRenewFailed, at: at(3 * time.Second), detail: "No cluster leader"}, 4 * time.Second, false, ""},
			{&observation{kind: obsReadFailed, at: at(4 * time.Second), detail: "No cluster leader"}, 5 * time.Second, false, ""},
			{&observation{kind: obsRenewed, at: at(5 * time.Second)}, 5 * time.Second, false, ""},
			{nil, 14 * time.Second, false, ""},
		}},
		{"no successful renewal for longer than the TTL is loss (Consul issue 18271)", ttlRule, []step{
			{&observation{kind: obsRenewFailed, at: at(3 * time.Second)}, 4 * time.Second, false, ""},
			{&observation{kind: obsRenewFailed, at: at(6 * time.Second)}, 7 * time.Second, false, ""},
			{nil, ttl, false, ""},
			{nil, ttl + time.Millisecond, true, "no successful session renewal"},
		}},
		{"successful reads do not stand in for renewals", ttlRule, []step{
			{&observation{kind: obsKeyHeld, at: at(5 * time.Second)}, 5 * time.Second, false, ""},
			{&observation{kind: obsKeyHeld, at: at(9 * time.Second)}, 9 * time.Second, false, ""},
			{nil, 11 * time.Second, true, "longer than the session TTL"},
		}},
		{"a late answer to an old renewal does not move the clock back", ttlRule, []step{
			{&observation{kind: obsRenewed, at: at(6 * time.Second)}, 6 * time.Second, false, ""},
			{&observation{kind: obsRenewed, at: at(3 * time.Second)}, 7 * time.Second, false, ""},
			{nil, 15 * time.Second, false, ""},
			{nil, 16*time.Second + time.Millisecond, true, "no successful session renewal"},
		}},
		{"once lost, always lost", ttlRule, []step{
			{&observation{kind: obsSessionGone, at: at(time.Second)}, time.Second, true, "no longer exists"},
			{&observation{kind: obsRenewed, at: at(2 * time.Second)}, 2 * time.Second, true, "no longer exists"},
		}},
		{"with health checks, renewals every renew_every keep the lock", delayRule, []step{
			{&observation{kind: obsRenewed, at: at(2 * time.Second)}, 3 * time.Second, false, ""},
			{&observation{kind: obsRenewed, at: at(4 * time.Second)}, 6 * time.Second, false, ""},
			{&observation{kind: obsRenewed, at: at(8 * time.Second)}, 10 * time.Second, false, ""},
			{nil, 15 * time.Second, false, ""},
		}},
		{"with health checks, a hung agent (no answer at all) is loss at lock_delay - grace - margin", delayRule, []step{
			{&observation{kind: obsRenewed, at: at(2 * time.Second)}, 3 * time.Second, false, ""},
			{nil, 9 * time.Second, false, ""},
			{nil, 9*time.Second + time.Millisecond, true, "another holder may acquire from 10s after the last renewal"},
		}},
		{"with health checks, refused renewals are loss at the same moment", delayRule, []step{
			{&observation{kind: obsRenewFailed, at: at(2 * time.Second), detail: "connection refused"}, 2 * time.Second, false, ""},
			{&observation{kind: obsRenewFailed, at: at(5 * time.Second), detail: "connection refused"}, 5 * time.Second, false, ""},
			{nil, 7*time.Second + time.Millisecond, true, "no successful session renewal for 7.001s"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := newLossJudge(tc.rule, t0)
			for i, s := range tc.steps {
				var v verdict
				if s.obs != nil {
					v = j.observe(*s.obs)
				}
				if !v.lost {
					v = j.check(at(s.now))
				}
				if v.lost != s.lost || (s.lost && !strings.Contains(v.reason, s.about)) {
					t.Fatalf("step %d: verdict %+v, want lost=%v about %q", i, v, s.lost, s.about)
				}
			}
		})
	}
}

func TestLossJudgeDeadlineIsLastRenewalPlusTTL(t *testing.T) {
	t0 := time.Now()
	j := newLossJudge(lockmodel.StopRule{TTL: 10 * time.Second, RenewEvery: 3 * time.Second, RenewTimeout: 2 * time.Second}, t0)
	if !j.deadline().Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("deadline %s", j.deadline())
	}
	j.observe(observation{kind: obsRenewed, at: t0.Add(4 * time.Second)})
	if !j.deadline().Equal(t0.Add(14 * time.Second)) {
		t.Fatalf("deadline after renewal %s", j.deadline())
	}
}

func TestLockDelayWait(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 10, 0, time.UTC)
	cases := []struct {
		name    string
		freedAt time.Time
		delay   time.Duration
		retry   int
		want    time.Duration
	}{
		{"first retry waits until the delay has certainly passed", now.Add(-2 * time.Second), 5 * time.Second, 0, 3*time.Second + lockDelayMargin},
		{"a delay above 60s counts as 60s, as Consul clamps it", now, 90 * time.Second, 0, 60*time.Second + lockDelayMargin},
		{"a delay already over backs off briefly", now.Add(-20 * time.Second), 5 * time.Second, 0, 250 * time.Millisecond},
		{"later retries back off", now.Add(-20 * time.Second), 5 * time.Second, 3, time.Second},
		{"backoff is capped at 5s", now.Add(-20 * time.Second), 5 * time.Second, 30, 5 * time.Second},
		{"unknown start of the delay backs off from 250ms", time.Time{}, 15 * time.Second, 0, 250 * time.Millisecond},
		{"unknown start, third retry", time.Time{}, 15 * time.Second, 2, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := lockDelayWait(tc.freedAt, tc.delay, tc.retry, now); got != tc.want {
				t.Fatalf("lockDelayWait = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNextIndex(t *testing.T) {
	for _, tc := range []struct{ prev, last, want uint64 }{
		{0, 5, 5}, {5, 9, 9}, {9, 9, 9}, {9, 3, 0}, {0, 0, 1},
	} {
		if got := nextIndex(tc.prev, tc.last); got != tc.want {
			t.Errorf("nextIndex(%d, %d) = %d, want %d", tc.prev, tc.last, got, tc.want)
		}
	}
}

func TestSessionCreateBodyWritesEverySettingOut(t *testing.T) {
	p := lockmodel.SessionProfile{Name: "p", TTL: 10 * time.Second, LockDelay: 0, NodeChecks: []string{},
		ServiceChecks: []lockmodel.ServiceCheck{{ID: "svc:web", Namespace: "ns"}}}.WithDefaults()
	body := sessionCreateBody("n", "", p)
	want := map[string]any{"Name": "n", "TTL": "10s", "LockDelay": "0s", "Behavior": "release", "NodeChecks": []string{},
		"ServiceChecks": []api.ServiceCheck{{ID: "svc:web", Namespace: "ns"}}}
	if fmt.Sprint(body) != fmt.Sprint(want) {
		t.Fatalf("body = %v\nwant   %v", body, want)
	}
	if _, ok := body["Node"]; ok {
		t.Fatal("Node set although none was asked for: the agent's own node is meant")
	}
	if got := sessionCreateBody("n", "web-1", p)["Node"]; got != "web-1" {
		t.Fatalf("Node = %v", got)
	}
	defaults := sessionCreateBody("n", "", lockmodel.SessionProfile{TTL: 15 * time.Second}.WithDefaults())
	if fmt.Sprint(defaults["NodeChecks"]) != "[serfHealth]" {
		t.Fatalf("default node checks = %v", defaults["NodeChecks"])
	}
}

func TestSessionMismatches(t *testing.T) {
	p := lockmodel.SessionProfile{Name: "p", TTL: 10 * time.Second, LockDelay: 0}.WithDefaults()
	exact := &api.SessionEntry{TTL: "10s", LockDelay: 0, Behavior: "release", NodeChecks: []string{"serfHealth"}}
	if d := sessionMismatches(exact, p); len(d) != 0 {
		t.Fatalf("an exact session has mismatches: %v", d)
	}
	// What the Go api would have created: LockDelay dropped, so 15s.
	dropped := *exact
	dropped.LockDelay = 15 * time.Second
	if d := sessionMismatches(&dropped, p); len(d) != 1 || !strings.Contains(d[0], "lock_delay") {
		t.Fatalf("mismatches = %v, want one about lock_delay", d)
	}
	other := &api.SessionEntry{TTL: "20s", LockDelay: time.Second, Behavior: "delete", NodeChecks: []string{}}
	if d := sessionMismatches(other, p); len(d) != 4 {
		t.Fatalf("mismatches = %v, want ttl, lock_delay, behavior, node checks", d)
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"PATH=/bin", "CONSUL_LOCK_HELD=false", "CONSUL_LOCK_INDEX=9", "CONSUL_LOCK_FENCING_TOKEN=7", "CONSUL_HTTP_ADDR=x:1"}
	got := childEnv(base, "jobs/a/.lock", "sess-1", grant{fencingToken: 1042, lockIndex: 42})
	want := []string{"PATH=/bin", "CONSUL_HTTP_ADDR=x:1", "CONSUL_LOCK_HELD=true", "CONSUL_LOCK_FENCING_TOKEN=1042", "CONSUL_LOCK_INDEX=42",
		"CONSUL_LOCK_SESSION=sess-1", "CONSUL_LOCK_KEY=jobs/a/.lock"}
	if !slices.Equal(got, want) {
		t.Fatalf("childEnv = %q\nwant %q", got, want)
	}
}

func TestParseArgs(t *testing.T) {
	cases := []struct {
		name string
		args []string
		err  string // "" for success
		want func(config) bool
	}{
		{"declared lock", []string{"-lock", "nightly", "--", "job", "-x"}, "",
			func(c config) bool {
				return c.lockName == "nightly" && slices.Equal(c.command, []string{"job", "-x"}) &&
					c.grace == 5*time.Second && c.childExitCode && c.registryPrefix == "consul-lock" && c.timeout == 0
			}},
		{"command without --", []string{"-lock", "nightly", "job"}, "", func(c config) bool { return c.command[0] == "job" }},
		{"undeclared key with Consul's defaults", []string{"-key", "/service/job/leader/", "--", "job"}, "",
			func(c config) bool {
				return c.key == "service/job/leader" && c.profile.TTL == 15*time.Second && c.profile.LockDelay == 15*time.Second &&
					c.profile.Behavior == lockmodel.BehaviorRelease && slices.Equal(c.profile.NodeChecks, []string{"serfHealth"})
			}},
		{"undeclared semaphore defaults to behavior delete", []string{"-key", "jobs/.lock", "-limit", "3", "--", "job"}, "",
			func(c config) bool { return c.limit == 3 && c.profile.Behavior == lockmodel.BehaviorDelete }},
		{"lock_delay 0s is kept", []string{"-key", "k", "-lock-delay", "0s", "-ttl", "10s", "--", "job"}, "",
			func(c config) bool { return c.profile.LockDelay == 0 && c.profile.TTL == 10*time.Second }},
		{"neither -lock nor -key", []string{"--", "job"}, "-lock NAME", nil},
		{"both -lock and -key", []string{"-lock", "a", "-key", "b", "--", "job"}, "exclude each other", nil},
		{"no command", []string{"-lock", "a"}, "no command", nil},
		{"bad lock name", []string{"-lock", "a/b", "--", "job"}, "-lock", nil},
		{"session flags with a declared lock", []string{"-lock", "a", "-ttl", "20s", "-behavior", "delete", "--", "job"}, "-ttl, -behavior only apply with -key", nil},
		{"ttl below Consul's minimum", []string{"-key", "k", "-ttl", "5s", "--", "job"}, "-ttl", nil},
		{"lock delay above 60s", []string{"-key", "k", "-lock-delay", "2m", "--", "job"}, "-lock-delay", nil},
		{"semaphore key not <prefix>/.lock", []string{"-key", "jobs/x", "-limit", "2", "--", "job"}, "<prefix>/.lock", nil},
		{"negative timeout", []string{"-lock", "a", "-timeout", "-1s", "--", "job"}, "-timeout", nil},
		{"unknown flag", []string{"-frobnicate", "--", "job"}, "frobnicate", nil},
		{"bad log level", []string{"-lock", "a", "-log-level", "loud", "--", "job"}, "-log-level", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg, err := parseArgs(tc.args, &out)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				if !tc.want(cfg) {
					t.Fatalf("config %+v", cfg)
				}
				return
			}
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error()+out.String(), tc.err) {
				t.Fatalf("error %v (output %q), want a usage error saying %q", err, out.String(), tc.err)
			}
		})
	}
}

func TestMainUsageErrorsExit2AndHelpExits0(t *testing.T) {
	var out bytes.Buffer
	if code := mainWith(t.Context(), []string{"-key", "k"}, &out); code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(out.String(), "consullock run: no command given") {
		t.Fatalf("output %q", out.String())
	}
	out.Reset()
	if code := mainWith(t.Context(), []string{"-h"}, &out); code != ExitOK {
		t.Fatalf("-h exit %d, want 0", code)
	}
	for _, s := range []string{"Usage: consullock run", "-child-exit-code", "123 lock lost", "124"} {
		if !strings.Contains(out.String(), s) {
			t.Fatalf("help lacks %q:\n%s", s, out.String())
		}
	}
}
