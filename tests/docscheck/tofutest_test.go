package docscheck

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestExample_tofuTest runs `tofu test` on examples/testing, the module the
// "Testing with tofu test" guide walks through: its integration tests
// against a real agent (ACLs on, default deny, the management token), its
// unit tests under mock_provider with no Consul, with the provider built
// from this tree (dev_overrides, no registry, no init).
func TestExample_tofuTest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pluginDir := t.TempDir()
	if err := testenv.BuildProvider(ctx, pluginDir); err != nil {
		t.Fatalf("building the provider: %v", err)
	}
	agent, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()

	// A copy, so that tofu leaves nothing in the tree.
	work := t.TempDir()
	copyTree(t, filepath.Join(root, "examples", "testing"), work)
	tofu, err := testenv.NewTofuWorkspace(pluginDir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tofu.Dir = work
	tofu.Env = append(os.Environ(), agent.Env()...)
	name := strings.ReplaceAll(strings.ToLower(testenv.UniquePrefix("tftest")), "/", "-")
	out, err := tofu.Run(ctx, "test", "-no-color", "-var", "name="+name)
	t.Logf("tofu test:\n%s", out)
	if err != nil {
		t.Fatalf("tofu test failed: %v", err)
	}
	for _, want := range []string{
		"tests/integration.tftest.hcl... pass",
		"tests/unit.tftest.hcl... pass",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("tofu test output lacks %q", want)
		}
	}
	// tofu test destroyed what the integration runs created.
	if pairs, _, err := agent.Client().KV().List("jobs/"+name+"/", nil); err != nil || len(pairs) != 0 {
		t.Errorf("after tofu test, jobs/%s/ holds %d keys (error %v); want none", name, len(pairs), err)
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}
