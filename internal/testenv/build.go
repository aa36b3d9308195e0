package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ProviderFile is the executable name OpenTofu looks for in a
// dev_overrides directory.
const ProviderFile = "terraform-provider-consullock"

// BuildConsullock builds the repository's main package (the consullock
// command, which is also the provider) to path. It builds to a temporary
// name beside path and renames, so that a concurrent build never leaves a
// half-written executable behind.
func BuildConsullock(ctx context.Context, path string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s-%d", filepath.Base(path), os.Getpid()))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, ".")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return os.Rename(tmp, path)
}

// BuildProvider builds the provider into pluginDir as ProviderFile, for a
// dev_overrides CLI configuration (NewTofuWorkspace) to point at.
func BuildProvider(ctx context.Context, pluginDir string) error {
	return BuildConsullock(ctx, filepath.Join(pluginDir, ProviderFile))
}
