package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// reattachProviderAddr is the provider's address as the CLI under test
// resolves source = "consullock/consullock": on OpenTofu's registry host,
// or Terraform's when make test-compat runs Terraform.
func reattachProviderAddr() string { return testAccProviderSource() }

// tofuWorkdir runs the real OpenTofu in a directory against this provider
// served in-process and attached through TF_REATTACH_PROVIDERS, the way
// terraform-plugin-testing does. Unlike resource.Test it shows OpenTofu's
// output (warnings included) and lets a benchmark count the provider's
// Consul requests with consul.RequestsSent.
type tofuWorkdir struct {
	dir, tofu string
}

func newTofuWorkdir(tb testing.TB, config string) *tofuWorkdir {
	tb.Helper()
	tofu, err := testenv.ToolPath("TF_ACC_TERRAFORM_PATH", "tofu")
	if err != nil {
		tb.Fatal(err)
	}
	w := &tofuWorkdir{dir: tb.TempDir(), tofu: tofu}
	w.setConfig(tb, config)
	w.mustRun(tb, "init", "-input=false", "-no-color")
	return w
}

func (w *tofuWorkdir) setConfig(tb testing.TB, config string) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// run runs one tofu command with a fresh in-process provider server and
// returns its combined output.
func (w *tofuWorkdir) run(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reattachCh := make(chan *plugin.ReattachConfig)
	closeCh := make(chan struct{})
	serveErr := make(chan error, 1)
	go func() {
		serveErr <- tf6server.Serve(reattachProviderAddr(), providerserver.NewProtocol6(New("test")()),
			tf6server.WithDebug(ctx, reattachCh, closeCh),
			tf6server.WithGoPluginLogger(hclog.NewNullLogger()),
			tf6server.WithLoggingSink(logSinkT{tb}),
			tf6server.WithoutLogStderrOverride())
	}()
	var rc *plugin.ReattachConfig
	select {
	case rc = <-reattachCh:
	case err := <-serveErr:
		tb.Fatalf("serving the provider: %v", err)
	case <-time.After(30 * time.Second):
		tb.Fatal("the in-process provider did not start within 30s")
	}
	reattach, err := json.Marshal(map[string]any{reattachProviderAddr(): map[string]any{
		"Protocol": string(rc.Protocol), "ProtocolVersion": rc.ProtocolVersion, "Pid": rc.Pid, "Test": true,
		"Addr": map[string]string{"Network": rc.Addr.Network(), "String": rc.Addr.String()},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(w.tofu, args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), "TF_REATTACH_PROVIDERS="+string(reattach), "TF_IN_AUTOMATION=1")
	out, err := cmd.CombinedOutput()
	cancel()
	select {
	case <-closeCh:
	case <-time.After(30 * time.Second):
		tb.Fatal("the in-process provider did not stop within 30s")
	}
	return string(out), err
}

// logSinkT lets a benchmark's testing.B name the provider's log sink, which
// then follows TF_LOG like OpenTofu does (off unless set) instead of writing
// trace logs to stderr.
type logSinkT struct{ testing.TB }

func (logSinkT) Parallel() {}

func (w *tofuWorkdir) mustRun(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := w.run(tb, args...)
	if err != nil {
		tb.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

var spaceRun = regexp.MustCompile(`[\s│]+`)

// assertOutputHas checks that tofu's output says each text, ignoring how
// OpenTofu wrapped and framed it.
func assertOutputHas(tb testing.TB, out string, texts ...string) {
	tb.Helper()
	flat := spaceRun.ReplaceAllString(out, " ")
	for _, text := range texts {
		if !strings.Contains(flat, text) {
			tb.Errorf("tofu output does not say %q:\n%s", text, out)
		}
	}
}

const reattachTerraformBlock = `
terraform {
  required_providers {
    consullock = {
      source = "consullock/consullock"
    }
  }
}
`

func TestAccSessionDefaults_warnsAboutRiskyChoicesAtPlan(t *testing.T) {
	reg := testenv.UniquePrefix(t.Name()) + "/registry"
	w := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(reg)+`
resource "consullock_session_defaults" "test" {
  name        = "risky"
  lock_delay  = "0s"
  node_checks = []
}
`)
	out := w.mustRun(t, "plan", "-input=false", "-no-color")
	assertOutputHas(t, out,
		"Warning: lock_delay of 0s",
		"That is only safe for idempotent work",
		"Warning: Session not bound to node health",
		"With node_checks empty the lock survives node failure until the TTL lapses, up to 2 x ttl (30s)",
		`+ worst_case_gap = "30s"`,
	)
}

func TestAccLock_warnsAboutSemaphoreChoices(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	config := func(limit int) string {
		return reattachTerraformBlock + lockTestProvider(reg) + fmt.Sprintf(`
resource "consullock_session_defaults" "default" {
  name = "default"
}

resource "consullock_lock" "test" {
  name             = "pool"
  prefix           = "%s/pool"
  limit            = %d
  session_defaults = consullock_session_defaults.default.name
}
`, p, limit)
	}
	w := newTofuWorkdir(t, config(3))
	t.Cleanup(func() { w.mustRun(t, "destroy", "-auto-approve", "-input=false", "-no-color") })
	out := w.mustRun(t, "apply", "-auto-approve", "-input=false", "-no-color")
	assertOutputHas(t, out,
		"Warning: Semaphore with a release session profile",
		`api.Semaphore and `+"`consul lock -n`"+` use behavior "delete"`,
	)
	w.setConfig(t, config(5))
	out = w.mustRun(t, "plan", "-input=false", "-no-color")
	assertOutputHas(t, out,
		"Warning: Semaphore Limit Change",
		fmt.Sprintf("Apply rewrites the Limit in %s/pool/.lock from 3 to 5 and keeps the current holders.", p),
		"until they are restarted with -n 5",
	)
}

// BenchmarkLocks_200LocksWith20ProfilesThroughTofu plans and applies 200
// locks spread over 20 session profiles with the real OpenTofu against the
// real agent, counts the provider's Consul requests per refreshed resource,
// and runs the same number of terraform_data resources as the floor a
// provider cannot beat. Run it with `make bench`.
func BenchmarkLocks_200LocksWith20ProfilesThroughTofu(b *testing.B) {
	const locks, profiles = 200, 20
	for range b.N {
		p := testenv.UniquePrefix("bench")
		lockCfg := reattachTerraformBlock + lockTestProvider(p+"/registry") + fmt.Sprintf(`
resource "consullock_session_defaults" "p" {
  count = %[2]d
  name  = "bench-profile-${count.index}"
}

resource "consullock_lock" "l" {
  count            = %[3]d
  name             = "bench-lock-${count.index}"
  prefix           = "%[1]s/lock-${count.index}"
  session_defaults = consullock_session_defaults.p[count.index %% %[2]d].name
  description      = "benchmark lock ${count.index}"
}
`, p, profiles, locks)
		dataCfg := fmt.Sprintf(`
resource "terraform_data" "p" {
  count = %[1]d
  input = "bench-profile-${count.index}"
}

resource "terraform_data" "l" {
  count = %[2]d
  input = {
    name    = "bench-lock-${count.index}"
    profile = terraform_data.p[count.index %% %[1]d].output
  }
}
`, profiles, locks)

		lw := newTofuWorkdir(b, lockCfg)
		dw := newTofuWorkdir(b, dataCfg)
		apply := []string{"apply", "-auto-approve", "-input=false", "-no-color"}
		plan := []string{"plan", "-input=false", "-no-color", "-detailed-exitcode"}
		timed := func(w *tofuWorkdir, args ...string) (time.Duration, uint64, string) {
			before := consul.RequestsSent()
			start := time.Now()
			out, err := w.run(b, args...)
			if err != nil && !(args[0] == "plan" && strings.Contains(err.Error(), "exit status 2")) {
				b.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return time.Since(start), consul.RequestsSent() - before, out
		}

		b.ResetTimer()
		lockApply, applyReqs, _ := timed(lw, apply...)
		b.StopTimer()
		_, planOnlyReqs, _ := timed(lw, append(plan, "-refresh=false")...)
		lockPlan, refreshReqs, out := timed(lw, plan...)
		if !strings.Contains(out, "No changes.") {
			b.Fatalf("re-plan after apply is not empty:\n%s", out)
		}
		lockDestroy, _, _ := timed(lw, "destroy", "-auto-approve", "-input=false", "-no-color")

		dataApply, _, _ := timed(dw, apply...)
		dataPlan, _, _ := timed(dw, plan...)
		dataDestroy, _, _ := timed(dw, "destroy", "-auto-approve", "-input=false", "-no-color")

		resources := float64(locks + profiles)
		perRefresh := float64(refreshReqs-planOnlyReqs) / resources
		b.ReportMetric(lockApply.Seconds(), "apply-s")
		b.ReportMetric(lockPlan.Seconds(), "plan-s")
		b.ReportMetric(perRefresh, "requests/resource/refresh")
		b.ReportMetric(lockApply.Seconds()/dataApply.Seconds(), "apply-ratio")
		b.ReportMetric(lockPlan.Seconds()/dataPlan.Seconds(), "plan-ratio")
		fmt.Printf(`
%d consullock_lock + %d consullock_session_defaults vs %d terraform_data, OpenTofu %s, Consul agent %s
                      consullock   terraform_data   ratio
  plan+apply (create)  %9.2fs   %12.2fs   %5.2fx
  plan (refresh)       %9.2fs   %12.2fs   %5.2fx
  destroy              %9.2fs   %12.2fs   %5.2fx
Consul HTTP requests:
  plan+apply (create)        %d (%.2f per resource)
  plan -refresh=false        %d (provider configuration only)
  plan (refresh)             %d, i.e. %.2f per resource per refresh after the %d of configuration
`,
			locks, profiles, locks+profiles, lw.tofu, agent.Addr,
			lockApply.Seconds(), dataApply.Seconds(), lockApply.Seconds()/dataApply.Seconds(),
			lockPlan.Seconds(), dataPlan.Seconds(), lockPlan.Seconds()/dataPlan.Seconds(),
			lockDestroy.Seconds(), dataDestroy.Seconds(), lockDestroy.Seconds()/dataDestroy.Seconds(),
			applyReqs, float64(applyReqs)/resources,
			planOnlyReqs,
			refreshReqs, perRefresh, planOnlyReqs,
		)
		b.StartTimer()
	}
}
