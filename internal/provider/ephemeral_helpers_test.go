package provider

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// Tests of ephemeral resources and write-only attributes run the real tofu
// as separate processes (several at once, interrupted, killed), with the
// provider built from this tree, and read the state, plan and log files
// it leaves.

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

// builtPluginDir builds the provider once per test binary.
func builtPluginDir(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir, pluginErr = os.MkdirTemp("", "consullock-ephemeral-plugin-")
		if pluginErr == nil {
			pluginErr = testenv.BuildProvider(context.Background(), pluginDir)
		}
	})
	if pluginErr != nil {
		t.Fatalf("building the provider: %v", pluginErr)
	}
	return pluginDir
}

// cliWorkspace is one configuration directory (one "pipeline") run by
// the real CLI.
type cliWorkspace struct {
	t  *testing.T
	tf *testenv.Tofu
}

func newCLIWorkspace(t *testing.T) *cliWorkspace {
	t.Helper()
	dir := t.TempDir()
	tf, err := testenv.NewTofuWorkspace(builtPluginDir(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	return &cliWorkspace{t: t, tf: tf}
}

func (w *cliWorkspace) write(config string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.tf.Dir, "main.tf"), []byte(config), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

func (w *cliWorkspace) path(name string) string { return filepath.Join(w.tf.Dir, name) }

// command prepares `tofu args...` with TF_LOG=trace written to logName
// (under the workspace) when logName is set. It runs in its own process
// group so that a test can kill tofu with its provider and provisioners.
func (w *cliWorkspace) command(ctx context.Context, logName string, extraEnv []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := w.tf.Command(ctx, args...)
	if logName != "" {
		cmd.Env = append(cmd.Env, "TF_LOG=trace", "TF_LOG_PATH="+w.path(logName))
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	setProcessGroup(cmd)
	return cmd, &out
}

// run runs tofu to its end and fails the test when it fails.
func (w *cliWorkspace) run(logName string, extraEnv []string, args ...string) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd, out := w.command(ctx, logName, extraEnv, args...)
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out.String()
}

func (w *cliWorkspace) read(name string) string {
	w.t.Helper()
	b, err := os.ReadFile(w.path(name))
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b)
}

// planFileText is every entry of a saved plan (a zip archive), as text.
func planFileText(t *testing.T, file string) string {
	t.Helper()
	r, err := zip.OpenReader(file)
	if err != nil {
		t.Fatalf("opening plan %s: %v", file, err)
	}
	defer func() { _ = r.Close() }()
	var all strings.Builder
	for _, f := range r.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&all, "== %s\n%s\n", f.Name, b)
	}
	return all.String()
}

// assertAbsent fails when any of secrets occurs in text (named where).
// Only the secret's position is reported, never the secret.
func assertAbsent(t *testing.T, where, text string, secrets ...string) {
	t.Helper()
	for i, s := range secrets {
		if s == "" {
			t.Fatalf("assertAbsent %s: secret %d is empty, the check would prove nothing", where, i)
		}
		if strings.Contains(text, s) {
			t.Errorf("%s contains value %d that must never be stored or logged", where, i)
		}
	}
}

// waitForText waits until file holds want, failing when exited reports
// the process ended first.
func waitForText(t *testing.T, file, want string, timeout time.Duration, exited <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(file)
		if strings.Contains(string(b), want) {
			return string(b)
		}
		select {
		case err := <-exited:
			t.Fatalf("tofu exited (%v) before %s held %q", err, file, want)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not hold %q within %s", file, want, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const ephemeralProviderBlock = `terraform {
  required_providers {
    consullock = { source = "consullock/consullock" }
  }
}
`

func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
