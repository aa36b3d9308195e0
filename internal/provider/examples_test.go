package provider

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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
	tofu, err := testenv.ToolPath("TF_ACC_TERRAFORM_PATH", "tofu")
	if err != nil {
		t.Fatal(err)
	}
	pluginDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "terraform-provider-consullock"), ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the provider: %v\n%s", err, out)
	}
	rc := filepath.Join(t.TempDir(), "tofu.rc")
	// Examples under examples/resources use the implicit hashicorp/ source;
	// complete scenarios declare consullock/consullock. Override both.
	if err := os.WriteFile(rc, fmt.Appendf(nil, `provider_installation {
  dev_overrides {
    "registry.opentofu.org/consullock/consullock" = %q
    "registry.opentofu.org/hashicorp/consullock"  = %q
  }
  direct {}
}
`, pluginDir, pluginDir), 0o600); err != nil {
		t.Fatal(err)
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

	t.Run("fmt", func(t *testing.T) {
		if out, err := runTofu(tofu, rc, examples, "fmt", "-check", "-diff", "-recursive"); err != nil {
			t.Fatalf("tofu fmt -check: %v\n%s", err, out)
		}
	})
	for _, dir := range sorted {
		rel, _ := filepath.Rel(root, dir)
		t.Run("validate "+rel, func(t *testing.T) {
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
			if out, err := runTofu(tofu, rc, work, "validate", "-no-color"); err != nil {
				t.Fatalf("tofu validate %s: %v\n%s", rel, err, out)
			}
		})
	}
}

func runTofu(tofu, rc, dir string, args ...string) ([]byte, error) {
	cmd := exec.Command(tofu, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
