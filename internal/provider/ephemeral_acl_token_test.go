package provider

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// probeScript writes, for the token in $TOKEN, the HTTP status of a KV
// write to each key, one per line, to codesFile. curl gets the token from
// a header file so it is not on a command line.
func probeScript(codesFile string, keys ...string) string {
	var b strings.Builder
	b.WriteString(`set -e; h=$(mktemp); printf 'X-Consul-Token: %s\n' "$TOKEN" > "$h"; `)
	for _, k := range keys {
		fmt.Fprintf(&b, `curl -s -o /dev/null -w '%%%%{http_code}\n' -X PUT -H @"$h" --data v %s/v1/kv/%s >> %s; `, agent.HTTPAddr(), k, codesFile)
	}
	b.WriteString(`rm -f "$h"`)
	return b.String()
}

// The ephemeral token works for its policy (real 200) and only for it
// (real 403); its secret is in no state, plan or log file, and the token
// is gone after the run.
func TestAccEphemeralACLToken_worksOnlyForItsPolicyAndIsNeverStored(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	prefix := testenv.UniquePrefix(t.Name())
	policy := "eph-" + regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(prefix, "-")
	if _, _, err := agent.Client().ACL().PolicyCreate(&api.ACLPolicy{Name: policy,
		Rules: fmt.Sprintf(`key %q { policy = "write" }`, prefix+"/allowed")}, nil); err != nil {
		t.Fatal(err)
	}
	w := newCLIWorkspace(t)
	codes, ids := w.path("codes"), w.path("ids")
	w.write(ephemeralProviderBlock + fmt.Sprintf(`
ephemeral "consullock_acl_token" "job" {
  policies    = [%q]
  ttl         = "10m"
  description = "migration job"
}

resource "terraform_data" "job" {
  provisioner "local-exec" {
    command = <<-EOT
      echo "$ACCESSOR $TOKEN" > %s
      %s
    EOT
    environment = {
      ACCESSOR = ephemeral.consullock_acl_token.job.accessor_id
      TOKEN    = ephemeral.consullock_acl_token.job.secret_id
    }
  }
}
`, policy, ids, probeScript(codes, prefix+"/allowed", prefix+"/other")))
	w.run("plan.log", nil, "plan", "-out=tfplan", "-no-color")
	planJSON := w.run("", nil, "show", "-json", "tfplan")
	applyOut := w.run("apply.log", nil, "apply", "-no-color", "tfplan")

	if got := strings.Fields(w.read("codes")); strings.Join(got, " ") != "200 403" {
		t.Fatalf("KV writes with the ephemeral token answered %v, want 200 for its policy's key and 403 for another", got)
	}
	fields := strings.Fields(w.read("ids"))
	if len(fields) != 2 {
		t.Fatalf("ids file holds %d fields", len(fields))
	}
	accessor, secret := fields[0], fields[1]
	for where, text := range map[string]string{
		"state": w.read("terraform.tfstate"), "plan file": planFileText(t, w.path("tfplan")), "plan JSON": planJSON,
		"plan log": w.read("plan.log"), "apply log": w.read("apply.log"), "apply output": applyOut,
	} {
		assertAbsent(t, where, text, secret)
	}
	if _, _, err := agent.Client().ACL().TokenRead(accessor, nil); err == nil || !strings.Contains(err.Error(), "ACL not found") {
		t.Fatalf("token %s after the run: err %v, want ACL not found (Close deletes it)", accessor, err)
	}
}

// secret_id_wo sets the token's secret without storing it; a new version
// rotates it (a new token). The secret works, for its policy only, and is
// in no state or plan file.
func TestAccACLToken_writeOnlySecretWorksAndIsNeverStored(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureWriteOnlyAttrs)
	prefix := testenv.UniquePrefix(t.Name())
	name := "wo-" + regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(prefix, "-")
	w := newCLIWorkspace(t)
	w.write(aclPolicyConfig(name, prefix, false, "") + `
variable "secret" {
  type      = string
  ephemeral = true
  sensitive = true
}
variable "secret_version" {
  type = number
}
resource "consullock_acl_token" "t" {
  policies             = [consullock_acl_policy.p.name]
  secret_id_wo         = var.secret
  secret_id_wo_version = var.secret_version
}
`)
	accessorOf := func() string {
		m := regexp.MustCompile(`"accessor_id":\s*"([0-9a-f-]{36})"`).FindStringSubmatch(w.read("terraform.tfstate"))
		if m == nil {
			t.Fatal("no accessor_id in state")
		}
		return m[1]
	}
	probe := func(secret string) (allowed, other error) {
		kv := agent.ClientWithToken(secret).KV()
		_, allowed = kv.Put(&api.KVPair{Key: prefix + "/mutex/.lock", Value: []byte("x")}, nil)
		_, other = kv.Put(&api.KVPair{Key: prefix + "/other", Value: []byte("x")}, nil)
		return allowed, other
	}

	s1, s2 := testenv.NewUUID(), testenv.NewUUID()
	env1 := []string{"TF_VAR_secret=" + s1, "TF_VAR_secret_version=1"}
	w.run("plan.log", env1, "plan", "-out=tfplan", "-no-color")
	planJSON := w.run("", env1, "show", "-json", "tfplan")
	w.run("apply.log", env1, "apply", "-no-color", "tfplan")
	state := w.read("terraform.tfstate")
	for where, text := range map[string]string{"state": state, "plan file": planFileText(t, w.path("tfplan")), "plan JSON": planJSON,
		"plan log": w.read("plan.log"), "apply log": w.read("apply.log")} {
		assertAbsent(t, where, text, s1)
	}
	if !regexp.MustCompile(`"secret_id":\s*null`).MatchString(state) {
		t.Error(`state does not record "secret_id": null for a token whose secret is write-only`)
	}
	first := accessorOf()
	live, _, err := agent.Client().ACL().TokenRead(first, nil)
	if err != nil {
		t.Fatal(err)
	}
	if live.SecretID != s1 {
		t.Fatal("Consul's token does not carry the secret given in secret_id_wo")
	}
	allowed, other := probe(s1)
	if allowed != nil {
		t.Errorf("write to the policy's key with the write-only secret: %v, want allowed", allowed)
	}
	if err := expectDenied("write to another key", other); err != nil {
		t.Error(err)
	}

	// Rotate.
	env2 := []string{"TF_VAR_secret=" + s2, "TF_VAR_secret_version=2"}
	w.run("rotate.log", env2, "apply", "-auto-approve", "-no-color")
	assertAbsent(t, "state after rotation", w.read("terraform.tfstate"), s1, s2)
	assertAbsent(t, "rotation log", w.read("rotate.log"), s1, s2)
	if second := accessorOf(); second == first {
		t.Errorf("a new secret_id_wo_version kept token %s; a secret cannot change in place, the token must be replaced", first)
	}
	if allowed, _ := probe(s2); allowed != nil {
		t.Errorf("the rotated secret does not work: %v", allowed)
	}
	if allowed, _ := probe(s1); allowed == nil || !strings.Contains(allowed.Error(), "ACL not found") {
		t.Errorf("the old secret after rotation: %v, want ACL not found", allowed)
	}
	w.run("", env2, "destroy", "-auto-approve", "-no-color")
}

// An interrupted apply still deletes its ephemeral token: OpenTofu skips
// Close after the interrupt, and the provider deletes the token when the CLI
// shuts it down.
func TestAccEphemeralACLToken_interruptedApplyDeletesToken(t *testing.T) {
	testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	prefix := testenv.UniquePrefix(t.Name())
	policy := "eph-" + regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(prefix, "-")
	if _, _, err := agent.Client().ACL().PolicyCreate(&api.ACLPolicy{Name: policy,
		Rules: fmt.Sprintf(`key %q { policy = "read" }`, prefix)}, nil); err != nil {
		t.Fatal(err)
	}
	w := newCLIWorkspace(t)
	ids := w.path("ids")
	w.write(ephemeralProviderBlock + fmt.Sprintf(`
ephemeral "consullock_acl_token" "job" {
  policies = [%q]
  ttl      = "10m"
}

resource "terraform_data" "job" {
  provisioner "local-exec" {
    command     = "echo \"$ACCESSOR\" > %s; sleep 120"
    environment = { ACCESSOR = ephemeral.consullock_acl_token.job.accessor_id }
  }
}
`, policy, ids))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd, out := w.command(ctx, "", nil, "apply", "-auto-approve", "-no-color")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	accessor := strings.TrimSpace(waitForText(t, ids, "-", 3*time.Minute, exited))
	if _, _, err := agent.Client().ACL().TokenRead(accessor, nil); err != nil {
		t.Fatalf("the token does not exist while the run uses it: %v", err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Logf("interrupted apply exited: %v", err)
	case <-time.After(2 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("tofu did not exit within 2m of SIGINT\n%s", out)
	}
	if _, _, err := agent.Client().ACL().TokenRead(accessor, nil); err == nil || !strings.Contains(err.Error(), "ACL not found") {
		t.Fatalf("token %s after the interrupted run: err %v, want ACL not found", accessor, err)
	}
}
