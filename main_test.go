package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// TestProviderLogs_quietUnlessAsked runs the built provider binary the way
// users do (OpenTofu launches it) against a real agent, with its stderr
// captured by a wrapper: without TF_LOG the plugin SDKs write nothing;
// with TF_LOG=trace the framework's and the protocol's logs still arrive.
func TestProviderLogs_quietUnlessAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	agent, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()

	dir := t.TempDir()
	providerBin := filepath.Join(dir, "real", testenv.ProviderFile)
	if err := testenv.BuildConsullock(ctx, providerBin); err != nil {
		t.Fatal(err)
	}
	pluginDir := filepath.Join(dir, "plugins")
	stderrFile := filepath.Join(dir, "provider-stderr.log")
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %q \"$@\" 2>>%q\n", providerBin, stderrFile)
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pluginDir, testenv.ProviderFile), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	config := `data "consullock_lock" "probe" {
  key = "logs-test/.lock"
}
`
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := testenv.NewTofuWorkspace(pluginDir, work)
	if err != nil {
		t.Fatal(err)
	}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TF_LOG") && !strings.HasPrefix(kv, "CONSUL_") {
			base = append(base, kv)
		}
	}
	base = append(base, agent.Env()...)

	plan := func(extra ...string) string {
		t.Helper()
		if err := os.WriteFile(stderrFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		tf.Env = append(base[:len(base):len(base)], extra...)
		if out, err := tf.Run(ctx, "plan", "-input=false", "-no-color"); err != nil {
			t.Fatalf("tofu plan: %v\n%s", err, out)
		}
		b, err := os.ReadFile(stderrFile)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// go-plugin's own two start-up lines (no @module) are not the SDKs'.
	if quiet := plan(); strings.Contains(quiet, `"@module":"sdk`) || strings.Contains(quiet, `"@module":"provider`) {
		t.Fatalf("without TF_LOG the provider still wrote SDK logs (%d bytes), e.g.:\n%s", len(quiet), firstLines(quiet, 5))
	}
	traced := plan("TF_LOG=trace", "TF_LOG_PATH="+filepath.Join(dir, "tofu.log"))
	for _, module := range []string{`"@module":"sdk.framework"`, `"@module":"sdk.proto"`} {
		if !strings.Contains(traced, module) {
			t.Fatalf("with TF_LOG=trace the provider's stderr has no %s line (%d bytes):\n%s", module, len(traced), firstLines(traced, 5))
		}
	}
	if strings.Contains(traced, agent.ManagementToken) {
		t.Fatal("the provider's trace log contains the Consul token")
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
