package systemdtimer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

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

// declare writes the records of locks (profile "p") under a registry of
// the test's own and returns the registry prefix.
func declare(t *testing.T, locks ...lockmodel.Lock) string {
	t.Helper()
	p := testenv.UniquePrefix(t.Name())
	c := agent.Client()
	t.Cleanup(func() { _, _ = c.KV().DeleteTree(p+"/", nil) })
	registry := p + "/registry"
	put := func(key string, v []byte, err error) {
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.KV().Put(&api.KVPair{Key: key, Value: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
	prof, err := record.EncodeSessionProfileRecord(lockmodel.SessionProfile{Name: "p", TTL: 15 * time.Second, LockDelay: time.Second})
	put(lockmodel.RegistryKey(registry, lockmodel.KindSessionDefaults, "p"), prof, err)
	for _, l := range locks {
		l.Prefix, l.SessionDefaults = p+"/jobs/"+l.Name, "p"
		n, err := l.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := record.EncodeLockRecord(n)
		put(lockmodel.RegistryKey(registry, lockmodel.KindLock, l.Name), rec, err)
	}
	return registry
}

// TestTimerCLI_followsTheDeclaredSchedule: the built binary, with a token
// that may only read the declarations, prints the timer of a declared
// schedule; systemd elapses its event at the lock's next three slots (the
// provider's run_once.next_slots), and refusals exit as documented, naming
// what is wrong.
func TestTimerCLI_followsTheDeclaredSchedule(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "consullock")
	if err := testenv.BuildConsullock(context.Background(), bin); err != nil {
		t.Fatal(err)
	}
	nightly := &ledger.RunOnce{Schedule: "0 2 * * 1-5", TimeZone: "Europe/Berlin", StartingDeadline: 30 * time.Minute}
	registry := declare(t,
		lockmodel.Lock{Name: "nightly", RunOnce: nightly},
		lockmodel.Lock{Name: "hourly", RunOnce: &ledger.RunOnce{Period: time.Hour}},
		lockmodel.Lock{Name: "skipped", RunOnce: &ledger.RunOnce{Schedule: "30 2 * * *", TimeZone: "Europe/Berlin"}})
	reader, err := agent.MintToken("timer-"+testenv.NewUUID()[:8],
		`key_prefix "`+registry+`/" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	run := func(token string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"timer", "-registry-prefix", registry}, args...)...)
		cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+agent.Addr, "CONSUL_HTTP_TOKEN="+token)
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errs.String()
	}

	start := time.Now()
	code, out, errs := run(reader.SecretID, "-lock", "nightly", "-randomized-delay", "2m")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	t.Logf("consullock timer -lock nightly -randomized-delay 2m:\n%s", out)
	var events []string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "OnCalendar="); ok {
			events = append(events, v)
		}
	}
	for _, want := range []string{"RandomizedDelaySec=120s\n", "Unit=consullock-run@nightly.service\n", "[Install]\nWantedBy=timers.target\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("timer lacks %q", want)
		}
	}
	if !slices.Equal(events, []string{"Mon..Fri *-*-* 02:00:00 Europe/Berlin"}) {
		t.Fatalf("events %q", events)
	}
	s, err := nightly.ParsedSchedule()
	if err != nil {
		t.Fatal(err)
	}
	var nextSlots []string // as the provider computes run_once.next_slots
	for _, at := range s.NextSlots(start, 3) {
		nextSlots = append(nextSlots, s.SlotID(at))
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		c := exec.Command(sa, "--no-pager", "calendar", "--iterations=3", "--base-time=@"+strconv.FormatInt(start.Unix(), 10), events[0])
		c.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
		got, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("systemd-analyze: %v\n%s", err, got)
		}
		var elapses []string
		for _, line := range strings.Split(string(got), "\n") {
			key, stamp, _ := strings.Cut(strings.TrimSpace(line), ": ")
			if key == "Next elapse" || strings.HasPrefix(key, "Iter. #") {
				at, err := time.Parse("Mon 2006-01-02 15:04:05 MST", stamp)
				if err != nil {
					t.Fatal(err)
				}
				elapses = append(elapses, s.SlotID(at))
			}
		}
		if !slices.Equal(elapses, nextSlots) {
			t.Fatalf("systemd elapses %q at %q; run_once.next_slots is %q", events[0], elapses, nextSlots)
		}
		t.Logf("systemd-analyze: %q elapses at %q, the lock's next_slots", events[0], elapses)
	} else {
		t.Logf("systemd-analyze is not on this machine: the event was not read by systemd here (oncalendar's tests check events against the slots)")
	}

	for _, tc := range []struct {
		token string
		args  []string
		code  int
		want  []string
	}{
		{reader.SecretID, []string{"-lock", "hourly"}, ExitRefused, []string{`lock "hourly" has no run_once.schedule`}},
		{reader.SecretID, []string{"-lock", "skipped"}, ExitRefused, []string{"the clocks skip from 02:00 to 03:00"}},
		{reader.SecretID, []string{"-lock", "nightly", "-randomized-delay", "30m"}, ExitUsage, []string{"-randomized-delay 30m", "run_once.starting_deadline 30m"}},
		{reader.SecretID, []string{"-lock", "ghost"}, ExitUsage, []string{`-lock "ghost"`, "not declared"}},
		{reader.SecretID, []string{"-lock", "nightly", "-service-name", "consullock-run@.service"}, ExitUsage, []string{"-service-name"}},
		{"00000000-0000-0000-0000-000000000000", []string{"-lock", "nightly"}, ExitConsul, []string{"ACL not found"}},
	} {
		code, out, errs := run(tc.token, tc.args...)
		if code != tc.code || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and nothing printed", tc.args, code, out, errs, tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%q: stderr %q lacks %q", tc.args, errs, w)
			}
		}
	}
}
