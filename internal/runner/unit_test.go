package runner

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
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
	codes := []int{ExitOK, ExitUsage, ExitOutcomeNotRecorded, ExitLockLost, ExitTimeout, ExitSetup, ExitCannotExecute, ExitNotFound,
		signalExitCode(syscall.SIGINT), signalExitCode(syscall.SIGTERM),
		ledger.ExitRunExhausted, ledger.ExitRunAlreadySucceededDistinct, ledger.ExitRunPastDeadline, ExitMaxRuntime}
	if got := slices.Compact(slices.Sorted(slices.Values(codes))); len(got) != len(codes) {
		t.Fatalf("exit codes collide: %v", codes)
	}
	if signalExitCode(syscall.SIGINT) != 130 || signalExitCode(syscall.SIGTERM) != 143 {
		t.Fatal("signal exit codes are not 128+N")
	}
}

func TestChildEnv(t *testing.T) {
	base := []string{"PATH=/bin", "CONSUL_LOCK_HELD=false", "CONSUL_LOCK_INDEX=9", "CONSUL_LOCK_FENCING_TOKEN=7", "CONSUL_HTTP_ADDR=x:1"}
	got := childEnv(base, "jobs/a/.lock", "sess-1", lockproto.Grant{FencingToken: 1042, LockIndex: 42})
	want := []string{"PATH=/bin", "CONSUL_HTTP_ADDR=x:1", "CONSUL_LOCK_HELD=true", "CONSUL_LOCK_FENCING_TOKEN=1042", "CONSUL_LOCK_INDEX=42",
		"CONSUL_LOCK_SESSION=sess-1", "CONSUL_LOCK_KEY=jobs/a/.lock"}
	if !slices.Equal(got, want) {
		t.Fatalf("childEnv = %q\nwant %q", got, want)
	}
	// A run-once attempt's variables replace any the runner inherited.
	base = append(base, "CONSUL_LOCK_RUN_ID=old", "CONSUL_LOCK_ATTEMPT=9")
	got = childEnv(base, "jobs/a/.lock", "sess-1", lockproto.Grant{FencingToken: 1042, LockIndex: 42},
		"CONSUL_LOCK_RUN_ID=2026-12-01T00:00:00Z", "CONSUL_LOCK_ATTEMPT=2")
	want = append(want, "CONSUL_LOCK_RUN_ID=2026-12-01T00:00:00Z", "CONSUL_LOCK_ATTEMPT=2")
	if !slices.Equal(got, want) {
		t.Fatalf("childEnv with a run = %q\nwant %q", got, want)
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
		{"run ID", []string{"-lock", "a", "-run-id", "nightly@2026-12-01", "-exit-code-if-done", "122", "--", "job"}, "",
			func(c config) bool { return c.runID == "nightly@2026-12-01" && c.exitIfDone == 122 }},
		{"run ID with a space", []string{"-lock", "a", "-run-id", "nightly 1", "--", "job"}, `-run-id: "nightly 1" is not allowed`, nil},
		{"empty run ID", []string{"-lock", "a", "-run-id", "", "--", "job"}, "-run-id", nil},
		{"run ID over 128 bytes", []string{"-lock", "a", "-run-id", strings.Repeat("x", 129), "--", "job"}, "-run-id", nil},
		{"run ID without a declared lock", []string{"-key", "k", "-run-id", "r1", "--", "job"}, "-run-id needs -lock", nil},
		{"exit code if done out of range", []string{"-lock", "a", "-exit-code-if-done", "256", "--", "job"}, "-exit-code-if-done", nil},
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
