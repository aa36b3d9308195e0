package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Tofu runs the real OpenTofu in a directory, with the provider installed
// from a local directory through dev_overrides.
type Tofu struct {
	// Bin is the tofu executable (TF_ACC_TERRAFORM_PATH or <repo>/bin/tofu).
	Bin string
	// Dir is the working directory: the configuration tofu runs on.
	Dir string
	// CLIConfig is the CLI configuration file, always passed as
	// TF_CLI_CONFIG_FILE: the machine's may point at a file that does not
	// exist.
	CLIConfig string
	// Env is the environment tofu starts from; nil means os.Environ().
	// TF_CLI_CONFIG_FILE, CHECKPOINT_DISABLE and TF_IN_AUTOMATION are added
	// after it.
	Env []string
}

// NewTofuWorkspace writes a CLI configuration (workDir/.tofurc) whose
// dev_overrides install the provider from pluginDir, under both the
// consullock/ source the scenarios declare and the implicit hashicorp/ one,
// on both OpenTofu's and Terraform's default registry host (make
// test-compat runs the same scenarios through Terraform), and returns a Tofu
// that runs in workDir.
func NewTofuWorkspace(pluginDir, workDir string) (*Tofu, error) {
	bin, err := ToolPath("TF_ACC_TERRAFORM_PATH", "tofu")
	if err != nil {
		return nil, err
	}
	rc := filepath.Join(workDir, ".tofurc")
	if err := os.WriteFile(rc, fmt.Appendf(nil, `provider_installation {
  dev_overrides {
    "registry.opentofu.org/consullock/consullock" = %q
    "registry.opentofu.org/hashicorp/consullock"  = %q
    "registry.terraform.io/consullock/consullock" = %q
    "registry.terraform.io/hashicorp/consullock"  = %q
  }
  direct {}
}
`, pluginDir, pluginDir, pluginDir, pluginDir), 0o600); err != nil {
		return nil, err
	}
	return &Tofu{Bin: bin, Dir: workDir, CLIConfig: rc}, nil
}

// Command prepares `tofu args...` in Dir; the caller sets its output.
func (tf *Tofu) Command(ctx context.Context, args ...string) *exec.Cmd {
	env := tf.Env
	if env == nil {
		env = os.Environ()
	}
	cmd := exec.CommandContext(ctx, tf.Bin, args...)
	cmd.Dir = tf.Dir
	cmd.Env = append(env[:len(env):len(env)], "TF_CLI_CONFIG_FILE="+tf.CLIConfig, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
	return cmd
}

// Run runs `tofu args...` to its end and returns its combined output.
func (tf *Tofu) Run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := tf.Command(ctx, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
