package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The clock-skew fault's hook (lockmodel.EnvClockOffset), on the real
// binary: a runner started with its clock an hour slow writes a holder
// value whose "started" is an hour behind, which is what the controller's
// max_hold judges (lockmodel.HoldStart); and an offset that is not a
// duration within ±24h stops the runner and the controller at start, naming
// the variable, the value and the range.
func TestClockSkewHook_movesTheRunnersHolderValueAndRefusesBadOffsets(t *testing.T) {
	key := testenv.UniquePrefix(t.Name()) + "/.lock"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runnerBin, "run", "-key", key, "-ttl", "10s", "-lock-delay", "0s", "--", "sleep", "30")
	cmd.Env = append(append(cleanEnv(), agent.Env()...), lockmodel.EnvClockOffset+"=-1h")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var value lockmodel.HolderValue
	deadline := time.Now().Add(time.Minute)
	for {
		pair, _, err := agent.Client().KV().Get(key, &api.QueryOptions{RequireConsistent: true})
		if err == nil && pair != nil && pair.Session != "" {
			if err := json.Unmarshal(pair.Value, &value); err != nil {
				t.Fatalf("holder value %q: %v", pair.Value, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not acquire %s within a minute:\n%s", key, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if behind := time.Since(value.Started); behind < time.Hour-time.Minute || behind > time.Hour+time.Minute {
		t.Errorf("holder value started %s, %s before now; want about an hour before (%s=-1h)", value.Started, behind.Round(time.Second), lockmodel.EnvClockOffset)
	}

	for _, args := range [][]string{
		{"run", "-key", key, "--", "true"},
		{"controller", "-mode", "observe", "-listen", ""},
	} {
		bad := exec.CommandContext(ctx, runnerBin, args...)
		bad.Env = append(append(cleanEnv(), agent.Env()...), lockmodel.EnvClockOffset+"=soon")
		text, _ := bad.CombinedOutput()
		if code := bad.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(text), lockmodel.EnvClockOffset) ||
			!strings.Contains(string(text), `"soon"`) || !strings.Contains(string(text), "from -24h") {
			t.Errorf("consullock %s with %s=soon: exit %d, output:\n%s\nwant exit 2 naming the variable, the value and the range",
				args[0], lockmodel.EnvClockOffset, code, text)
		}
	}
}

// A controller whose clock is ahead judges a hold it did not see begin
// older by the skew (lockmodel.HoldStart): started with its clock 2
// minutes ahead, an enforcing controller ends at once a hold that began a
// moment ago under a 30s max_hold (the runner exits 123); with its clock
// right it would leave it for 30s. The skew costs the holder its lock,
// never exclusivity: what the guarantees guide says clock skew does.
func TestClockSkewHook_aControllerAheadEndsAHoldEarly(t *testing.T) {
	prefix := fmt.Sprintf("clockskew-%d", os.Getpid())
	name := "skewed-max-hold"
	profile := lockmodel.SessionProfile{Name: name, TTL: 10 * time.Second, LockDelay: time.Second}
	l, err := lockmodel.Lock{Name: name, Prefix: testenv.UniquePrefix(t.Name()), SessionDefaults: name, MaxHold: 30 * time.Second}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	prof, err := record.EncodeSessionProfileRecord(profile)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := record.EncodeLockRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	kv := agent.Client().KV()
	for key, value := range map[string][]byte{
		lockmodel.RegistryKey(prefix, lockmodel.KindSessionDefaults, name): prof,
		lockmodel.RegistryKey(prefix, lockmodel.KindLock, name):            rec,
	} {
		if _, err := kv.Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _, err := kv.CAS(&api.KVPair{Key: l.Key, Flags: l.Flags()}, nil); err != nil || !ok {
		t.Fatalf("creating %s: ok=%v err=%v", l.Key, ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, runnerBin, "run", "-registry-prefix", prefix, "-lock", name, "--", "sleep", "60")
	run.Env = append(cleanEnv(), agent.Env()...)
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = run.Process.Kill() }()
	exited := make(chan int, 1)
	go func() { _ = run.Wait(); exited <- run.ProcessState.ExitCode() }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if pair, _, err := kv.Get(l.Key, &api.QueryOptions{RequireConsistent: true}); err == nil && pair != nil && pair.Session != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not acquire %s within a minute:\n%s", l.Key, runOut.String())
		}
	}
	ctl := exec.CommandContext(ctx, runnerBin, "controller", "-mode", "enforce", "-listen", "", "-apply-grace", "0",
		"-no-leader-election", "-registry-prefix", prefix)
	ctl.Env = append(append(cleanEnv(), agent.Env()...), lockmodel.EnvClockOffset+"=2m")
	var ctlOut bytes.Buffer
	ctl.Stdout, ctl.Stderr = &ctlOut, &ctlOut
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctl.Process.Signal(syscall.SIGTERM); _ = ctl.Wait() }()
	select {
	case code := <-exited:
		if code != 123 {
			t.Errorf("runner exited %d; want 123 (lock lost: the controller ended its session)\n%s", code, runOut.String())
		}
		if !strings.Contains(ctlOut.String(), compliance.ReasonMaxHoldExceeded) {
			t.Errorf("the controller's log does not say %s:\n%s", compliance.ReasonMaxHoldExceeded, ctlOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("the controller with its clock 2m ahead left a hold under a 30s max_hold for 15s; want it ended at once\n--- controller:\n%s", ctlOut.String())
	}
}
