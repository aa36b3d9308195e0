package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/controller"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// RulesFile and RulesTestFile are the shipped rules and their unit tests,
// relative to the repository root.
const (
	RulesFile     = "examples/observability/consullock.rules.yml"
	RulesTestFile = "examples/observability/consullock.rules.test.yml"
)

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// tool returns bin/<name>; missing is a failure, never a skip.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	p, err := testenv.ToolPath(env, name)
	if err != nil {
		t.Fatalf("%v (tools/build.sh %s builds it from the pinned Prometheus module)", err, name)
	}
	return p
}

// exportedMetrics reads the metric names the controller registers from its
// own registry (not a hand list): every Desc it describes, plus the series
// names a histogram exposes.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	client, err := consul.New(consul.Settings{Address: "127.0.0.1:1"}) // never contacted
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(client, controller.Config{Mode: compliance.ModeObserve, ApplyGrace: compliance.DefaultApplyGrace})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Metrics().Registry.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
	}
	// Histograms are exposed as _bucket, _sum and _count series.
	for _, h := range []string{"consullock_reconcile_duration_seconds"} {
		if !names[h] {
			t.Fatalf("histogram %s is not registered", h)
		}
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			names[h+s] = true
		}
	}
	return names
}

var metricRef = regexp.MustCompile(`\bconsullock_[a-z_]+`)

// TestDashboardUpToDate fails when the committed dashboard JSON is not what
// the generator writes (run `go generate ./observability/` in tests/).
func TestDashboardUpToDate(t *testing.T) {
	want, err := Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(repoFile(t, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `go generate ./observability/` in tests/ and commit it", DashboardFile)
	}
}

// TestDashboardQueriesNameExportedMetrics: every panel queries, and every
// metric a query names is one the controller exports.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	var d struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	data, err := os.ReadFile(repoFile(t, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	panels := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			names := metricRef.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no consullock metric", p.Title, q.Expr)
			}
			for _, n := range names {
				used[n] = true
				if !exported[n] {
					t.Errorf("panel %q: query %q names %s, which the controller does not export", p.Title, q.Expr, n)
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		for _, n := range metricRef.FindAllString(fmt.Sprint(v.Query), -1) {
			if !exported[n] {
				t.Errorf("variable %q names %s, which the controller does not export", v.Name, n)
			}
		}
	}
	if panels < 10 {
		t.Errorf("%d panels, want the overview, lock and controller panels", panels)
	}
	t.Logf("%d panels query %d metrics", panels, len(used))
}

// TestRulesPromtool runs `promtool check rules` and `promtool test rules`
// on the shipped files, and checks every metric they name is exported.
func TestRulesPromtool(t *testing.T) {
	promtool := tool(t, "PROMTOOL_BIN", "promtool")
	rules, tests := repoFile(t, RulesFile), repoFile(t, RulesTestFile)
	for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", tests}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args[:2], " "), err, out)
		}
		t.Logf("promtool %s: %s", strings.Join(args[:2], " "), bytes.TrimSpace(out))
	}
	exported := exportedMetrics(t)
	data, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, n := range metricRef.FindAllString(string(data), -1) {
		if !exported[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s names metrics the controller does not export: %v", RulesFile, missing)
	}
	// Every alert has a runbook paragraph in the guide.
	guide, err := os.ReadFile(repoFile(t, "templates/guides/observability.md.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(data), -1) {
		if !strings.Contains(string(guide), "### "+m[1]) {
			t.Errorf("alert %s has no runbook section (### %s) in templates/guides/observability.md.tmpl", m[1], m[1])
		}
	}
}

// waitFor polls cond every 100ms until it is true or d has passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s", d, what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
