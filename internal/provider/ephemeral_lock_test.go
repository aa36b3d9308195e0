package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/echoprovider"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// lockPipelineConfig is one pipeline touching the environment guarded by
// key: it holds the lock during apply and records, in workLog, when its
// guarded work started (with the fencing token and session it got) and
// when it ended.
func lockPipelineConfig(key, workLog string, sleep int) string {
	return ephemeralProviderBlock + fmt.Sprintf(`
ephemeral "consullock_lock" "env" {
  key        = %q
  ttl        = "10s"
  lock_delay = "1s"
  wait       = "5m"
}

resource "terraform_data" "work" {
  provisioner "local-exec" {
    command = "echo \"start $(date +%%s%%N) $FENCING_TOKEN $SESSION\" >> %s; sleep %d; echo \"end $(date +%%s%%N)\" >> %s"
    environment = {
      FENCING_TOKEN = ephemeral.consullock_lock.env.fencing_token
      SESSION       = ephemeral.consullock_lock.env.session
    }
  }
}
`, key, workLog, sleep, workLog)
}

type workRecord struct {
	start, end time.Time
	token      uint64
	session    string
}

var workLine = regexp.MustCompile(`start (\d+) (\d+) ([0-9a-f-]{36})\s+end (\d+)`)

func parseWork(t *testing.T, text string) workRecord {
	t.Helper()
	m := workLine.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("work log does not show a start with token and session and an end:\n%s", text)
	}
	ns := func(s string) time.Time {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Unix(0, n)
	}
	token, _ := strconv.ParseUint(m[2], 10, 64)
	return workRecord{start: ns(m[1]), token: token, session: m[3], end: ns(m[4])}
}

// assertUnheld checks that key is not held and that no session of an
// ephemeral lock is left on the agent.
func assertUnheld(t *testing.T, key string) {
	t.Helper()
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if pair != nil && pair.Session != "" {
		t.Errorf("key %s is still held by session %s", key, pair.Session)
	}
	sessions, _, err := agent.Client().Session().List(&api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sessions {
		if s.Name == "consullock ephemeral "+key {
			t.Errorf("session %s (%s) is left behind", s.ID, s.Name)
		}
	}
}

// Two pipelines apply at the same moment with real tofu processes; the
// lock lets the work of one run only after the other's has ended, each
// under a higher fencing token, and nothing is left held.
func TestAccEphemeralLock_serialisesConcurrentApplies(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	key := testenv.UniquePrefix(t.Name()) + "/env/.lock"
	const sleep = 3

	// One apply alone, for the figure.
	solo := newCLIWorkspace(t)
	solo.write(lockPipelineConfig(key, solo.path("work.log"), sleep))
	began := time.Now()
	solo.run("", nil, "apply", "-auto-approve", "-no-color")
	soloTook := time.Since(began)
	soloWork := parseWork(t, solo.read("work.log"))
	assertUnheld(t, key)

	ws := []*cliWorkspace{newCLIWorkspace(t), newCLIWorkspace(t)}
	for _, w := range ws {
		w.write(lockPipelineConfig(key, w.path("work.log"), sleep))
	}
	var wg sync.WaitGroup
	outs := make([]string, len(ws))
	errs := make([]error, len(ws))
	start := make(chan struct{})
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd, out := w.command(ctx, "", nil, "apply", "-auto-approve", "-no-color")
			<-start
			errs[i] = cmd.Run()
			outs[i] = out.String()
		}()
	}
	began = time.Now()
	close(start)
	wg.Wait()
	bothTook := time.Since(began)
	for i := range ws {
		if errs[i] != nil {
			t.Fatalf("apply %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	a, b := parseWork(t, ws[0].read("work.log")), parseWork(t, ws[1].read("work.log"))
	if b.start.Before(a.start) {
		a, b = b, a
	}
	if !b.start.After(a.end) {
		t.Errorf("the guarded work overlapped: first ran %s..%s, second started %s",
			a.start.Format(time.StampMicro), a.end.Format(time.StampMicro), b.start.Format(time.StampMicro))
	}
	if !(soloWork.token < a.token && a.token < b.token) {
		t.Errorf("fencing tokens do not grow with each holder: %d, %d, %d", soloWork.token, a.token, b.token)
	}
	if a.session == b.session {
		t.Errorf("both applies report session %s", a.session)
	}
	assertUnheld(t, key)
	t.Logf("figures: one apply holding the lock (%ds of work) took %s; two concurrent applies on the same lock took %s in all (second work started %s after the first ended)",
		sleep, soloTook.Round(10*time.Millisecond), bothTook.Round(10*time.Millisecond), b.start.Sub(a.end).Round(time.Millisecond))
}

// An apply interrupted (SIGINT) while its guarded work runs still closes
// the lock: the key is free when tofu exits. Before that, the lock is
// held past 2 x TTL, which only the CLI's Renew calls can make happen.
func TestAccEphemeralLock_interruptedApplyReleasesAndRenewsWhileHeld(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	key := testenv.UniquePrefix(t.Name()) + "/env/.lock"
	w := newCLIWorkspace(t)
	w.write(lockPipelineConfig(key, w.path("work.log"), 120))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd, out := w.command(ctx, "apply.log", nil, "apply", "-auto-approve", "-no-color")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	text := waitForText(t, w.path("work.log"), "start", 3*time.Minute, exited)
	m := regexp.MustCompile(`start \d+ (\d+) ([0-9a-f-]{36})`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("work log: %q", text)
	}
	session := m[2]

	// 2 x TTL (10s) + margin: without renewals Consul would have ended
	// the session by now.
	time.Sleep(25 * time.Second)
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil || pair.Session != session {
		t.Fatalf("after 25s (2 x TTL + 5s) key %s is %v, want held by session %s: the session was not renewed", key, pair, session)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Logf("interrupted apply exited: %v\n%s", err, out)
	case <-time.After(2 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("tofu did not exit within 2m of SIGINT\n%s", out)
	}
	assertUnheld(t, key)
	if info, _, err := agent.Client().Session().Info(session, &api.QueryOptions{RequireConsistent: true}); err != nil || info != nil {
		t.Errorf("session %s still exists after the interrupted apply (err %v)", session, err)
	}
}

// A killed apply (tofu, its provider and its provisioner all SIGKILLed)
// cannot close the lock: Consul ends its session by TTL and the key is
// free again.
func TestAccEphemeralLock_killedApplySessionExpiresByTTL(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	key := testenv.UniquePrefix(t.Name()) + "/env/.lock"
	w := newCLIWorkspace(t)
	w.write(lockPipelineConfig(key, w.path("work.log"), 300))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd, _ := w.command(ctx, "", nil, "apply", "-auto-approve", "-no-color")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	text := waitForText(t, w.path("work.log"), "start", 3*time.Minute, exited)
	m := regexp.MustCompile(`start \d+ \d+ ([0-9a-f-]{36})`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("work log: %q", text)
	}
	session := m[1]
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed apply exited: %v", <-exited)
	killed := time.Now()
	pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil || pair.Session != session {
		t.Fatalf("right after the kill key %s is %v, want still held by %s (nothing could release it)", key, pair, session)
	}
	// Consul invalidates after about 2 x TTL; its TTL timers are lazy,
	// so allow generously more.
	deadline := killed.Add(2 * time.Minute)
	for {
		info, _, err := agent.Client().Session().Info(session, &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		if info == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s still exists 2m after the kill", session)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("session ended by TTL %s after the kill (TTL 10s)", time.Since(killed).Round(100*time.Millisecond))
	assertUnheld(t, key)
}

// Neither the plan file, its JSON form, nor the state holds anything of
// the ephemeral lock: not its session, not the fencing token's attribute.
func TestAccEphemeralLock_nothingInStateOrPlan(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	key := testenv.UniquePrefix(t.Name()) + "/env/.lock"
	w := newCLIWorkspace(t)
	w.write(lockPipelineConfig(key, w.path("work.log"), 0))
	w.run("plan.log", nil, "plan", "-out=tfplan", "-no-color")
	planSession := regexp.MustCompile(`lock acquired.*?session=([0-9a-f-]{36})`).FindStringSubmatch(w.read("plan.log"))
	if planSession == nil {
		t.Fatal("the provider log of the plan does not show the lock acquired with its session")
	}
	planJSON := w.run("", nil, "show", "-json", "tfplan")
	w.run("", nil, "apply", "-no-color", "tfplan")
	work := parseWork(t, w.read("work.log"))
	state := w.read("terraform.tfstate")
	for where, text := range map[string]string{"plan file": planFileText(t, w.path("tfplan")), "plan JSON": planJSON, "state": state} {
		assertAbsent(t, where, text, planSession[1], work.session)
		for _, attr := range []string{`"fencing_token"`, `"session"`, `"lock_index"`} {
			if strings.Contains(text, attr) {
				t.Errorf("%s mentions %s", where, attr)
			}
		}
	}
	assertUnheld(t, key)
}

// The values Open returns, through the echo provider: the key, the
// session, and a fencing token equal to the key's ModifyIndex at the
// acquisition; a declared lock is found by name with its profile.
func TestAccEphemeralLock_returnsDeclaredLockValues(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	prefix := testenv.UniquePrefix(t.Name())
	name := strings.ReplaceAll(strings.TrimPrefix(prefix, "t/"), "/", "-")
	decl := fmt.Sprintf(`
resource "consullock_session_defaults" "p" {
  name       = %[1]q
  ttl        = "20s"
  lock_delay = "0s"
}
resource "consullock_lock" "l" {
  name             = %[1]q
  prefix           = %[2]q
  session_defaults = consullock_session_defaults.p.name
}
`, name, prefix)
	held := decl + fmt.Sprintf(`
ephemeral "consullock_lock" "l" {
  lock = %q
}
provider "echo" {
  data = ephemeral.consullock_lock.l
}
resource "echo" "l" {}
`, name)
	factories := map[string]func() (tfprotov6.ProviderServer, error){
		"consullock": testAccProtoV6ProviderFactories["consullock"],
		"echo":       echoprovider.NewProviderServer(),
	}
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []tfresource.TestStep{
			{Config: decl},
			{
				Config: held,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("echo.l", tfjsonpath.New("data").AtMapKey("key"), knownvalue.StringExact(prefix+"/.lock")),
					statecheck.ExpectKnownValue("echo.l", tfjsonpath.New("data").AtMapKey("session"), knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f-]{36}$`))),
					statecheck.ExpectKnownValue("echo.l", tfjsonpath.New("data").AtMapKey("fencing_token"), knownvalue.NotNull()),
					statecheck.ExpectKnownValue("echo.l", tfjsonpath.New("data").AtMapKey("lock_index"), knownvalue.NotNull()),
				},
				Check: func(_ *terraform.State) error {
					// Close ran: the key is free again.
					pair, _, err := agent.Client().KV().Get(prefix+"/.lock", &api.QueryOptions{RequireConsistent: true})
					if err != nil {
						return err
					}
					if pair != nil && pair.Session != "" {
						return fmt.Errorf("key still held by %s after the run", pair.Session)
					}
					return nil
				},
			},
			// Without the ephemeral lock, so that the final destroy does
			// not open it after its declaration is gone.
			{Config: decl},
		},
	})
}

// A wait that runs out names the holder's session and node.
func TestAccEphemeralLock_waitTimeoutNamesHolder(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	c := agent.Client()
	sid, _, err := c.Session().Create(&api.SessionEntry{Name: "other holder", TTL: "60s", LockDelay: time.Nanosecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Session().Destroy(sid, nil) }()
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: sid, Flags: lockmodel.LockFlagValue}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config: fmt.Sprintf(`
ephemeral "consullock_lock" "l" {
  key  = %q
  wait = "2s"
}
`, key),
			ExpectError: regexp.MustCompile(`(?s)Lock Not Acquired In Time.*` + sid + `.*` + agent.NodeName),
		}},
	})
}

// The holder value's "started" is the acquisition, not the start of the
// wait: status and the controller time the hold from it
// (lockmodel.HoldStart), so a wait must not count as holding. The lock is
// held by another session when Open starts waiting and freed later; the
// value written at acquisition (and again at release, which Close does
// with the same value) starts after the lock was freed.
func TestAccEphemeralLock_holderValueStartsAtAcquisitionNotWait(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	c := agent.Client()
	sid, _, err := c.Session().Create(&api.SessionEntry{Name: "other holder", TTL: "60s", LockDelay: time.Nanosecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Session().Destroy(sid, nil) }()
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: key, Session: sid, Flags: lockmodel.LockFlagValue}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	// Free the lock once the ephemeral lock's session exists (it waits).
	freed := make(chan time.Time, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			sessions, _, err := c.Session().List(&api.QueryOptions{RequireConsistent: true})
			if err == nil {
				for _, s := range sessions {
					if s.Name == "consullock ephemeral "+key {
						at := time.Now()
						if _, _, err := c.KV().Release(&api.KVPair{Key: key, Session: sid, Flags: lockmodel.LockFlagValue}, nil); err == nil {
							freed <- at
							return
						}
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config: fmt.Sprintf(`
ephemeral "consullock_lock" "l" {
  key  = %q
  wait = "2m"
}
`, key),
			Check: func(*terraform.State) error {
				var at time.Time
				select {
				case at = <-freed:
				default:
					return fmt.Errorf("the lock was never freed: the ephemeral lock did not wait for it")
				}
				pair, _, err := c.KV().Get(key, &api.QueryOptions{RequireConsistent: true})
				if err != nil || pair == nil {
					return fmt.Errorf("reading %s: %v", key, err)
				}
				var hv lockmodel.HolderValue
				if err := json.Unmarshal(pair.Value, &hv); err != nil || hv.Started.IsZero() {
					return fmt.Errorf("value %q is not a holder value with a start: %v", pair.Value, err)
				}
				if hv.Started.Before(at) {
					return fmt.Errorf("holder value says started %s, before the lock was freed at %s: the wait counted as holding",
						hv.Started.Format(time.RFC3339Nano), at.UTC().Format(time.RFC3339Nano))
				}
				return nil
			},
		}},
	})
}

// A token that may not create sessions, or may not write the key, gets an
// error naming the missing permission.
func TestAccEphemeralLock_tokenWithoutPermissionIsClearError(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	base := regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(key, "-")
	noSession, err := agent.MintToken(base+"-ns", `key_prefix "" { policy = "read" }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	noKey, err := agent.MintToken(base+"-nk",
		fmt.Sprintf(`session_prefix "" { policy = "write" }
key %q { policy = "read" }`, key), 0)
	if err != nil {
		t.Fatal(err)
	}
	config := func(token string) string {
		return fmt.Sprintf(`
provider "consullock" {
  token = %q
}
ephemeral "consullock_lock" "l" {
  key  = %q
  wait = "30s"
}
`, token, key)
	}
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{Config: config(noSession.SecretID), ExpectError: diagRE("Cannot Acquire Lock", `the token lacks "session:write"`)},
			{Config: config(noKey.SecretID), ExpectError: diagRE("Cannot Acquire Lock", `the token lacks "key:write"`)},
		},
	})
	assertUnheld(t, key)
}
