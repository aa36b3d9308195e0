package provider

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestExamples_fmtAndValidate checks every directory under examples/ that
// holds .tf files with `tofu fmt -check`, `tofu validate` and `tofu plan`
// against the package's agent (ACLs on, default deny), using the provider
// built from this tree (dev_overrides, no registry). A shipped example must
// not trigger any provider warning: users copy them.
func TestExamples_fmtAndValidate(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pluginDir := t.TempDir()
	if err := testenv.BuildProvider(context.Background(), pluginDir); err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	// Examples under examples/resources use the implicit hashicorp/ source;
	// complete scenarios declare consullock/consullock. The workspace
	// overrides both.
	tofu, err := testenv.NewTofuWorkspace(pluginDir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	declareOtherLock(t, *tofu)
	// runTofu runs tofu in dir with the workspace's CLI configuration.
	runTofu := func(dir string, args ...string) ([]byte, error) {
		in := *tofu
		in.Dir = dir
		return in.Run(context.Background(), args...)
	}

	examples := filepath.Join(root, "examples")
	dirs := map[string]bool{}
	err = filepath.WalkDir(examples, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".terraform") {
			return filepath.SkipDir
		}
		if !d.IsDir() && filepath.Ext(p) == ".tf" {
			dirs[filepath.Dir(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no examples found")
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted)

	for _, dir := range sorted {
		rel, _ := filepath.Rel(root, dir)
		t.Run("validate "+rel, func(t *testing.T) {
			requireExampleFeatures(t, rel)
			// Per directory, after the feature check: an older CLI cannot
			// even parse the syntax of features it lacks.
			if out, err := runTofu(dir, "fmt", "-check", "-diff"); err != nil {
				t.Fatalf("tofu fmt -check %s: %v\n%s", rel, err, out)
			}
			// Validate a copy so no .terraform directory is left in the tree.
			work := t.TempDir()
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.IsDir() {
					continue
				}
				data, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(work, e.Name()), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := runTofu(work, "validate", "-no-color"); err != nil {
				t.Fatalf("tofu validate %s: %v\n%s", rel, err, out)
			}
			if strings.HasSuffix(rel, "/import-by-identity") || underHeldLock[rel] {
				return // these plan only against existing objects or inside a held lock
			}
			if config, ok := declaredElsewhere[rel]; ok {
				declare(t, *tofu, config)
			}
			out, err := runTofu(work, "plan", "-no-color", "-input=false", "-lock=false")
			if err != nil {
				t.Fatalf("tofu plan %s: %v\n%s", rel, err, out)
			}
			if w := exampleWarnings(string(out)); len(w) > 0 {
				t.Errorf("tofu plan %s warns; a shipped example must plan without warnings:\n%s", rel, strings.Join(w, "\n"))
			}
		})
	}
}

// requireExampleFeatures skips, as not supported by this CLI, examples of
// language features the CLI lacks (ephemeral resources, functions, import
// by identity).
func requireExampleFeatures(t *testing.T, rel string) {
	t.Helper()
	switch {
	case strings.HasPrefix(rel, "examples/ephemeral-resources/"), rel == "examples/hold-lock-during-apply":
		testenv.RequireCLIFeature(t, testenv.FeatureEphemeralResources)
	case strings.HasPrefix(rel, "examples/functions/"):
		testenv.RequireCLIFeature(t, testenv.FeatureProviderFunctions)
	case strings.HasSuffix(rel, "/import-by-identity"):
		testenv.RequireCLIFeature(t, testenv.FeatureIdentityImport)
	}
}

// underHeldLock are the examples that run inside `consullock run` or hold
// a lock declared elsewhere: their plan fails by design when the lock is
// not held or not declared.
var underHeldLock = map[string]bool{
	"examples/fencing": true, "examples/hold-lock-during-apply": true, "examples/ephemeral-resources/consullock_lock": true,
}

// exampleWarnings returns the warning blocks of a plan's output, leaving
// out the one the test setup itself causes (the dev_overrides notice).
func exampleWarnings(out string) []string {
	var warnings []string
	for _, block := range strings.Split(out, "\n\n") {
		block = strings.Trim(block, "\n│╷╵ ")
		if !strings.HasPrefix(block, "Warning:") || strings.HasPrefix(block, "Warning: Provider development overrides are in effect") {
			continue
		}
		warnings = append(warnings, block)
	}
	return warnings
}

// declareOtherLock applies, for the rest of the test, a lock unrelated to
// the examples: a user's Consul has other declared locks, and the policy's
// "outside the declared locks" check only speaks when there are some.
func declareOtherLock(t *testing.T, tofu testenv.Tofu) {
	t.Helper()
	name := strings.ReplaceAll(testenv.UniquePrefix("other"), "/", "-")
	declare(t, tofu, fmt.Sprintf(`
resource "consullock_session_defaults" "other" {
  name = %[1]q
}

resource "consullock_lock" "other" {
  name             = %[1]q
  prefix           = "other/%[1]s"
  session_defaults = consullock_session_defaults.other.name
}
`, name))
}

// declaredElsewhere are the locks that the reference pages' policy and
// token snippets grant on: a policy's locks are declared in the same
// configuration or another one, as here.
var declaredElsewhere = map[string]string{
	"examples/resources/consullock_acl_policy": `
resource "consullock_session_defaults" "fast" {
  name       = "fast"
  ttl        = "15s"
  lock_delay = "15s"
}
resource "consullock_lock" "nightly_report" {
  name             = "nightly-report"
  prefix           = "jobs/nightly-report"
  session_defaults = consullock_session_defaults.fast.name
}
resource "consullock_lock" "reindex" {
  name             = "reindex"
  prefix           = "jobs/reindex"
  limit            = 3
  session_defaults = consullock_session_defaults.fast.name
}
resource "consullock_lock" "nightly_ingest" {
  name             = "nightly-ingest"
  prefix           = "jobs/nightly-ingest"
  waiters          = "queue"
  session_defaults = consullock_session_defaults.fast.name
}
resource "consullock_lock" "scheduler" {
  name             = "scheduler"
  prefix           = "service/scheduler"
  session_defaults = consullock_session_defaults.fast.name
}
`,
	"examples/resources/consullock_acl_token": `
resource "consullock_session_defaults" "fast" {
  name       = "fast"
  ttl        = "15s"
  lock_delay = "15s"
}
resource "consullock_lock" "nightly_report" {
  name             = "nightly-report"
  prefix           = "jobs/nightly-report"
  session_defaults = consullock_session_defaults.fast.name
}
`,
	"examples/ephemeral-resources/consullock_acl_token": `
resource "consullock_session_defaults" "fast" {
  name       = "fast"
  ttl        = "15s"
  lock_delay = "15s"
}
resource "consullock_lock" "migrations" {
  name             = "migrations"
  prefix           = "locks/prod/migrations"
  session_defaults = consullock_session_defaults.fast.name
}
`,
}

// declare applies config in a directory of its own and destroys it when
// the test ends.
func declare(t *testing.T, tofu testenv.Tofu, config string) {
	t.Helper()
	tofu.Dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(tofu.Dir, "main.tf"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := tofu.Run(context.Background(), "apply", "-auto-approve", "-no-color", "-input=false"); err != nil {
		t.Fatalf("declaring %s: %v\n%s", config, err, out)
	}
	t.Cleanup(func() {
		if out, err := tofu.Run(context.Background(), "destroy", "-auto-approve", "-no-color", "-input=false"); err != nil {
			t.Errorf("destroying %s: %v\n%s", config, err, out)
		}
	})
}
