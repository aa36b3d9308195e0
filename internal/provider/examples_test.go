package provider

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestExamples_fmtAndValidate checks every directory under examples/ that
// holds .tf files with `tofu fmt -check` and `tofu validate`, using the
// provider built from this tree (dev_overrides, no registry).
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
