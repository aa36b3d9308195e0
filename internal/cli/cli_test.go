package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

func TestUnknownCommandPrintsUsageAndExits2(t *testing.T) {
	var stderr bytes.Buffer
	code := Run(context.Background(), "dev", []string{"frobnicate"}, &bytes.Buffer{}, &stderr)
	if code != 2 {
		t.Fatalf("exit code = %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), `unknown command "frobnicate"`) || !strings.Contains(stderr.String(), "Usage:") {
		t.Fatalf("stderr does not explain: %q", stderr.String())
	}
}

func TestUsageListsOnlyRegisteredCommands(t *testing.T) {
	var out bytes.Buffer
	usage(&out)
	listed := 0
	for _, line := range strings.Split(out.String(), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "consullock" && !strings.HasPrefix(fields[1], "-") && !strings.HasPrefix(fields[1], "[") {
			if _, ok := commands[fields[1]]; !ok {
				t.Fatalf("usage lists %q, which is not a registered command", fields[1])
			}
			listed++
		}
	}
	if listed != len(commands) {
		t.Fatalf("usage lists %d programs, %d are registered:\n%s", listed, len(commands), out.String())
	}
}

func TestBadFlagExits2(t *testing.T) {
	var stderr bytes.Buffer
	if code := Run(context.Background(), "dev", []string{"-no-such-flag"}, &bytes.Buffer{}, &stderr); code != 2 {
		t.Fatalf("exit code = %d, want 2", code)
	}
}

// TestBothBinaries_sameProgram builds the provider binary (module root)
// and cmd/consullock the way .goreleaser.yml does (-X main.version): both
// print the version they were built with and dispatch the same programs.
func TestBothBinaries_sameProgram(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const version = "9.9.9-clitest"
	for _, pkg := range []string{".", "./cmd/consullock"} {
		bin := filepath.Join(dir, filepath.Base(filepath.Clean(pkg))+"-bin")
		build := exec.Command("go", "build", "-ldflags", "-X main.version="+version, "-o", bin, pkg)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
		out, err := exec.Command(bin, "-version").Output()
		if err != nil || strings.TrimSpace(string(out)) != version {
			t.Errorf("%s -version: %q (%v), want %q", pkg, out, err, version)
		}
		cmd := exec.Command(bin, "status", "-h")
		cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR=127.0.0.1:1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		_ = cmd.Run()
		if !strings.Contains(stderr.String(), "status") {
			t.Errorf("%s status -h does not run the status program: %q", pkg, stderr.String())
		}
	}
}
