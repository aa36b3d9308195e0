package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A session_defaults name that is neither declared in the configuration
// nor recorded in Consul is a plan error on the lock (a typo caught before
// CI approves the plan); a profile declared in the same configuration and
// referenced plans clean on a first apply.
func TestAccLock_unknownSessionProfileIsAPlanError(t *testing.T) {
	reg := testenv.UniquePrefix(t.Name()) + "/registry"
	prefix := testenv.UniquePrefix(t.Name()) + "/jobs"
	profile := `
resource "consullock_session_defaults" "nightly_report" {
  name = "nightly-report"
}
`
	w := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(reg)+profile+fmt.Sprintf(`
resource "consullock_lock" "nightly" {
  name             = "nightly"
  prefix           = %q
  session_defaults = "nightly-reprot"
}
`, prefix+"/nightly"))
	out, err := w.run(t, "plan", "-input=false", "-no-color")
	if err == nil {
		t.Fatalf("plan with a misspelled session_defaults passed:\n%s", out)
	}
	assertOutputHas(t, out, "Error: Session Profile Not Found", `session_defaults is "nightly-reprot"`)

	w.setConfig(t, reattachTerraformBlock+lockTestProvider(reg)+profile+fmt.Sprintf(`
resource "consullock_lock" "nightly" {
  name             = "nightly"
  prefix           = %q
  session_defaults = consullock_session_defaults.nightly_report.name
}
`, prefix+"/nightly"))
	out = w.mustRun(t, "plan", "-input=false", "-no-color")
	if strings.Contains(out, "Warning:") || strings.Contains(out, "Error:") {
		t.Errorf("a referenced profile of the same configuration: the plan is not clean:\n%s", out)
	}
}

// A lock key or semaphore prefix that a policy grants and that a lock of
// the same plan declares is not "outside the declared locks", also when
// other locks are already declared in Consul.
func TestAccACLPolicy_noOutsideWarningForLocksOfTheSamePlan(t *testing.T) {
	reg := testenv.UniquePrefix(t.Name()) + "/registry"
	prefix := testenv.UniquePrefix(t.Name()) + "/jobs"
	first := fmt.Sprintf(`
resource "consullock_lock" "a" {
  name   = "a"
  prefix = %q
}
`, prefix+"/a")
	w := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(reg)+first)
	w.mustRun(t, "apply", "-input=false", "-no-color", "-auto-approve")
	w.setConfig(t, reattachTerraformBlock+lockTestProvider(reg)+first+fmt.Sprintf(`
resource "consullock_lock" "b" {
  name   = "b"
  prefix = %q
}

resource "consullock_lock" "pool" {
  name   = "pool"
  prefix = %q
  limit  = 3
}

resource "consullock_acl_policy" "workers" {
  name                  = %q
  lock_keys             = [consullock_lock.a.key, consullock_lock.b.key]
  semaphore_prefixes    = [consullock_lock.pool.prefix]
  session_node_prefixes = ["worker-"]
}
`, prefix+"/b", prefix+"/pool", strings.ReplaceAll(testenv.UniquePrefix(t.Name()), "/", "-")))
	out := w.mustRun(t, "plan", "-input=false", "-no-color")
	if strings.Contains(out, "outside the declared locks") {
		t.Errorf("a lock of the same plan is called outside the declared locks:\n%s", out)
	}
	w.mustRun(t, "destroy", "-input=false", "-no-color", "-auto-approve")
}

// An imported lock plans no change when the configuration spells a
// duration in the short form ("1h", not "1h0m0s").
func TestAccLock_importPlansNoDurationChange(t *testing.T) {
	reg := testenv.UniquePrefix(t.Name()) + "/registry"
	prefix := testenv.UniquePrefix(t.Name()) + "/jobs"
	config := reattachTerraformBlock + lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_lock" "nightly" {
  name     = "nightly"
  prefix   = %q
  max_hold = "1h"
}
`, prefix+"/nightly")
	w := newTofuWorkdir(t, config)
	w.mustRun(t, "apply", "-input=false", "-no-color", "-auto-approve")
	w.mustRun(t, "state", "rm", "consullock_lock.nightly")
	w.mustRun(t, "import", "-input=false", "-no-color", "consullock_lock.nightly", "nightly")
	out := w.mustRun(t, "plan", "-input=false", "-no-color", "-detailed-exitcode")
	if !strings.Contains(out, "No changes") {
		t.Errorf("the imported lock plans a change:\n%s", out)
	}
	w.mustRun(t, "destroy", "-input=false", "-no-color", "-auto-approve")
}

// The configuration -generate-config-out writes for imported resources
// plans no change, and does not pin computed defaults (renew_every
// follows ttl when it was not declared).
func TestAccImport_generatedConfigPlansClean(t *testing.T) {
	reg := testenv.UniquePrefix(t.Name()) + "/registry"
	prefix := testenv.UniquePrefix(t.Name()) + "/jobs"
	policy := strings.ReplaceAll(testenv.UniquePrefix(t.Name()), "/", "-")
	w := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(reg)+fmt.Sprintf(`
resource "consullock_session_defaults" "nightly" {
  name       = "nightly"
  ttl        = "10s"
  lock_delay = "15s"
}

resource "consullock_lock" "nightly" {
  name             = "nightly"
  prefix           = %q
  session_defaults = consullock_session_defaults.nightly.name
  max_hold         = "1h"
  run_once = {
    period = "24h"
  }
}

resource "consullock_acl_policy" "workers" {
  name                  = %q
  lock_keys             = [consullock_lock.nightly.key]
  run_ledgers           = [consullock_lock.nightly.name]
  session_node_prefixes = ["worker-"]
}
`, prefix+"/nightly", policy))
	w.mustRun(t, "apply", "-input=false", "-no-color", "-auto-approve")
	imp := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(reg)+fmt.Sprintf(`
import {
  to = consullock_session_defaults.nightly
  id = "nightly"
}
import {
  to = consullock_lock.nightly
  id = "nightly"
}
import {
  to = consullock_acl_policy.workers
  id = %q
}
`, policy))
	out := imp.mustRun(t, "plan", "-input=false", "-no-color", "-generate-config-out=generated.tf")
	gen, err := os.ReadFile(filepath.Join(imp.dir, "generated.tf"))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("generated:\n%s", gen)
	if strings.Contains(string(gen), "3.333333333s") {
		t.Errorf("the generated configuration pins the computed renew_every:\n%s", gen)
	}
	out = imp.mustRun(t, "plan", "-input=false", "-no-color")
	if !strings.Contains(out, "0 to add, 0 to change, 0 to destroy") || strings.Contains(out, "Warning:") {
		t.Errorf("the generated configuration does not plan clean (imports only):\n%s", out)
	}
	w.mustRun(t, "destroy", "-input=false", "-no-color", "-auto-approve")
}
