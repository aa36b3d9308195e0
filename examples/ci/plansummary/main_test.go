package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/status"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestSummary_quickstartPlans runs the CI recipe of examples/ci/plan-review.yml
// on examples/quickstart against a real Consul agent with the real OpenTofu
// and the provider built from this tree: `tofu plan -out -json`, `tofu show
// -json`, then the summary. It checks the plan-time values a reviewer needs
// on a first plan (creates), then, after an apply and an out-of-band ACL
// edit, on a plan that shows drift, a rules diff and a provider warning,
// and never the token secret the plan JSON holds in clear text.
func TestSummary_quickstartPlans(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	agent, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()

	pluginDir := t.TempDir()
	if err := testenv.BuildProvider(ctx, pluginDir); err != nil {
		t.Fatalf("building the provider: %v", err)
	}

	work := t.TempDir()
	tfFiles, err := filepath.Glob(filepath.Join(root, "examples", "quickstart", "*.tf"))
	if err != nil || len(tfFiles) == 0 {
		t.Fatalf("no .tf files in examples/quickstart (%v)", err)
	}
	for _, f := range tfFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tf, err := testenv.NewTofuWorkspace(pluginDir, work)
	if err != nil {
		t.Fatal(err)
	}
	tf.Env = []string{"CONSUL_HTTP_ADDR=" + agent.Addr}
	for _, kv := range os.Environ() { // nothing from the caller's Consul or OpenTofu setup
		if !strings.HasPrefix(kv, "CONSUL_") && !strings.HasPrefix(kv, "TF_") {
			tf.Env = append(tf.Env, kv)
		}
	}
	// tofuRun runs OpenTofu in the work directory with a Consul token.
	tofuRun := func(token string, stdout *bytes.Buffer, args ...string) error {
		cmd := tf.Command(ctx, args...)
		cmd.Env = append(cmd.Env, "CONSUL_HTTP_TOKEN="+token)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("tofu %s: %w\n%s\n%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
		}
		return nil
	}
	tofu := func(token string, stdout *bytes.Buffer, args ...string) {
		t.Helper()
		if err := tofuRun(token, stdout, args...); err != nil {
			t.Fatal(err)
		}
	}
	summarize := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(append(args, "-title", "examples/quickstart"), nil, &out, &errOut); code != 0 {
			t.Fatalf("plansummary exited %d: %s", code, errOut.String())
		}
		t.Logf("summary:\n%s", out.String())
		return out.String()
	}
	writeTemp := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// plan runs the recipe's two OpenTofu steps and the summary.
	plan := func(token, name string, extra ...string) (summary string, planJSON []byte) {
		t.Helper()
		var log, show bytes.Buffer
		tofu(token, &log, append([]string{"plan", "-input=false", "-out=" + name, "-json"}, extra...)...)
		tofu(token, &show, "show", "-json", name)
		return summarize("-plan", writeTemp("plan.json", show.Bytes()), "-log", writeTemp("plan-log.jsonl", log.Bytes())), show.Bytes()
	}
	admin := agent.ManagementToken

	t.Run("first plan", func(t *testing.T) {
		summary, planJSON := plan(admin, "create.tfplan")
		// The rules the summary shows are the plan's own plan-time rules.
		rules := plannedString(t, planJSON, "consullock_acl_policy.workers", "rules")
		var want []string
		for _, line := range splitLines(rules) {
			want = append(want, "\n+"+line+"\n")
		}
		want = append(want,
			"## examples/quickstart: 5 to add, 0 to change, 0 to destroy",
			"| `+` create | 5 |",
			"| `<=` read | 1 | `data.consullock_lock.nightly_report` |",
			// The lock: its key, flags and limit, known at plan time.
			"| key | `jobs/nightly-report/.lock` |",
			"| flags | `0x2ddccbc058a50c18` (api.Lock) |",
			"| limit | `1` (mutex) |",
			"| max_hold | `1h` |",
			// The profile and its failover bound.
			"| ttl | `10s` |",
			"| lock_delay | `15s` |",
			"| worst_case_gap | `35s` |",
			"**worst_case_gap 35s**",
			// Least privilege, line by line: the lock, its run ledger, the
			// pause record read, sessions on the workers; no agent read.
			"\n+key \"jobs/nightly-report/.lock\" {\n+  policy = \"write\"\n+}\n",
			"\n+key \"consul-lock/runs/nightly-report\" {\n+  policy = \"write\"\n+}\n",
			"\n+key \"consul-lock/pauses/nightly-report\" {\n+  policy = \"read\"\n+}\n",
			"\n+session_prefix \"worker-\" {\n",
			// The token: its policies, never its secret.
			"| policies | `nightly-report-workers` |",
			"`secret_id` is sensitive and never shown here.",
			"- `data.consullock_lock.nightly_report`, key `jobs/nightly-report/.lock`",
		)
		assertContains(t, summary, want...)
		if len(splitLines(rules)) < 5 {
			t.Fatalf("planned rules look incomplete:\n%s", rules)
		}
		tofu(admin, &bytes.Buffer{}, "apply", "-input=false", "-auto-approve", "create.tfplan")
	})
	if t.Failed() {
		return
	}

	t.Run("status with the status token", func(t *testing.T) {
		// The quickstart's last step: consullock status with the token it
		// creates for it (the workers' token cannot list the sessions).
		runStatus := func(output string) (int, string) {
			var secret, out, errOut bytes.Buffer
			tofu(admin, &secret, "output", "-raw", output)
			t.Setenv("CONSUL_HTTP_ADDR", agent.Addr)
			t.Setenv("CONSUL_HTTP_TOKEN", strings.TrimSpace(secret.String()))
			code := status.Run(context.Background(), []string{"-lock", "nightly-report"}, &out, &errOut)
			if secret.Len() < 30 || strings.Contains(out.String()+errOut.String(), strings.TrimSpace(secret.String())) {
				t.Fatalf("%s: no secret, or the secret in status's output", output)
			}
			return code, out.String() + errOut.String()
		}
		if code, out := runStatus("status_token"); code != 0 || !strings.Contains(out, "nightly-report") || !strings.Contains(out, "Compliant:") {
			t.Fatalf("status with status_token: exit %d\n%s", code, out)
		}
		if code, _ := runStatus("worker_token"); code != 3 {
			t.Fatalf("status with worker_token: exit %d, want 3 (it may not list the sessions)", code)
		}
	})

	t.Run("drift, rules diff and warning", func(t *testing.T) {
		var secret bytes.Buffer
		tofu(admin, &secret, "output", "-raw", "worker_token")
		if secret.Len() < 30 {
			t.Fatalf("worker_token output %q is not a token secret", secret.String())
		}
		// Someone widens the workers' policy by hand.
		acl := agent.Client().ACL()
		pol, _, err := acl.PolicyReadByName("nightly-report-workers", nil)
		if err != nil || pol == nil {
			t.Fatalf("reading the policy: %v", err)
		}
		pol.Rules = `key_prefix "" { policy = "write" }`
		if _, _, err := acl.PolicyUpdate(pol, &api.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		// And the change under review opens sessions to every node. The
		// plan job's read-only token (examples/ci/plan-reader.hcl) suffices.
		rules, err := os.ReadFile(filepath.Join(root, "examples", "ci", "plan-reader.hcl"))
		if err != nil {
			t.Fatal(err)
		}
		reader, err := agent.MintToken("ci-plan-reader", string(rules), 0)
		if err != nil {
			t.Fatal(err)
		}
		summary, planJSON := plan(reader.SecretID, "update.tfplan", "-var", "worker_node_prefix=")
		assertContains(t, summary,
			"## examples/quickstart: 0 to add, 1 to change, 0 to destroy",
			"| `~` update | 1 | `consullock_acl_policy.workers` |",
			"### Changed outside OpenTofu",
			"#### `consullock_acl_policy.workers` changed",
			// The refresh saw the hand edit ...
			"\n+key_prefix \"\" { policy = \"write\" }\n",
			// ... and the plan removes it and puts back what is declared.
			"\n-key_prefix \"\" { policy = \"write\" }\n",
			"\n+key \"jobs/nightly-report/.lock\" {\n",
			"\n+session_prefix \"\" {\n",
			"| **session_node_prefixes** | `worker-` | `\"\"` |",
			// The provider's plan-time warning, from the plan log.
			"- **Sessions on any node** (`consullock_acl_policy.workers`): session_node_prefixes contains \"\"",
		)
		// The plan JSON carries the secret in clear text; the summary must not.
		if !bytes.Contains(planJSON, bytes.TrimSpace(secret.Bytes())) {
			t.Fatal("expected the plan JSON to hold the token secret (prior state); the check below would prove nothing")
		}
		if strings.Contains(summary, strings.TrimSpace(secret.String())) {
			t.Fatal("the summary shows the token's secret_id")
		}
		if strings.Contains(summary, "Warnings are not part of the plan JSON") {
			t.Fatal("the summary claims no log was given")
		}
	})

	t.Run("without the log", func(t *testing.T) {
		var show bytes.Buffer
		tofu(admin, &show, "show", "-json", "update.tfplan")
		var out, errOut bytes.Buffer
		if code := run(nil, &show, &out, &errOut); code != 0 {
			t.Fatalf("plansummary exited %d: %s", code, errOut.String())
		}
		assertContains(t, out.String(),
			"## OpenTofu plan: 0 to add, 1 to change, 0 to destroy",
			"Warnings are not part of the plan JSON",
		)
	})

	t.Run("failed plan", func(t *testing.T) {
		// A token Consul does not know: the refresh fails and the summary
		// reports the errors from the plan log.
		var log bytes.Buffer
		if err := tofuRun(testenv.NewUUID(), &log, "plan", "-input=false", "-out=failed.tfplan", "-json"); err == nil {
			t.Fatal("plan with an unknown token succeeded")
		}
		logFile := writeTemp("plan-log.jsonl", log.Bytes())
		// The recipe summarises the errored plan file OpenTofu saves, and
		// only the log when there is no plan file.
		var show bytes.Buffer
		tofu(admin, &show, "show", "-json", "failed.tfplan")
		summary := summarize("-plan", writeTemp("plan.json", show.Bytes()), "-log", logFile)
		assertContains(t, summary, "## examples/quickstart: plan failed", "The plan **errored**", "### Errors", "ACL not found")
		summary = summarize("-plan", "", "-log", logFile)
		assertContains(t, summary, "## examples/quickstart: plan failed", "OpenTofu produced no plan.", "### Errors", "ACL not found")
	})
}

// plannedString returns a string attribute of a resource's planned values.
func plannedString(t *testing.T, planJSON []byte, address, attr string) string {
	t.Helper()
	var p struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				After map[string]any `json:"after"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal(planJSON, &p); err != nil {
		t.Fatal(err)
	}
	for _, rc := range p.ResourceChanges {
		if rc.Address == address {
			if s, ok := rc.Change.After[attr].(string); ok && s != "" {
				return s
			}
			t.Fatalf("%s.%s is not a known string in the plan: %v", address, attr, rc.Change.After[attr])
		}
	}
	t.Fatalf("%s is not in the plan", address)
	return ""
}

func assertContains(t *testing.T, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("summary lacks %q", w)
		}
	}
}
