package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
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
