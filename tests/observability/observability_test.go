package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

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

// idleController is a controller that has not run (its metrics as at
// its first scrape, before any registry answer).
func idleController(t *testing.T) *controller.Controller {
	t.Helper()
	client, err := consul.New(consul.Settings{Address: "127.0.0.1:1"}) // never contacted
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(client, controller.Config{Mode: compliance.ModeObserve, ApplyGrace: compliance.DefaultApplyGrace})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// exportedMetrics reads the metric names the controller registers from its
// own registry (not a hand list): every Desc it describes, plus the series
// names a histogram exposes.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	c := idleController(t)
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
	for _, h := range histograms {
		if !names[h] {
			t.Fatalf("histogram %s is not registered", h)
		}
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			names[h+s] = true
		}
	}
	return names
}

// histograms are the controller's histograms.
var histograms = []string{"consullock_reconcile_duration_seconds"}

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

// GuideFile is the observability guide's template (docs/ is generated
// from it).
const GuideFile = "templates/guides/observability.md.tmpl"

// baseMetric is the metric a series name belongs to: a histogram's for
// its _bucket, _sum and _count series.
func baseMetric(name string) string {
	for _, h := range histograms {
		if strings.HasPrefix(name, h+"_") {
			return h
		}
	}
	return name
}

// alertsReading maps each metric the shipped alerts read, directly or
// through a recording rule, to those alerts.
func alertsReading(t *testing.T) map[string]map[string]bool {
	t.Helper()
	data, err := os.ReadFile(repoFile(t, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = r.Expr
			}
		}
	}
	recordRef := regexp.MustCompile(`\bconsullock:[a-z0-9_:]+`)
	var reads func(expr string, into map[string]bool)
	reads = func(expr string, into map[string]bool) {
		for _, n := range metricRef.FindAllString(expr, -1) {
			into[baseMetric(n)] = true
		}
		for _, r := range recordRef.FindAllString(expr, -1) {
			reads(recorded[r], into)
		}
	}
	out := map[string]map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			read := map[string]bool{}
			reads(r.Expr, read)
			for m := range read {
				if out[m] == nil {
					out[m] = map[string]bool{}
				}
				out[m][r.Alert] = true
			}
		}
	}
	return out
}

// guideRow is one row of the guide's metrics table.
type guideRow struct {
	metrics []string
	meaning string
	alerts  map[string]bool
}

// guideTable reads the metrics table of the observability guide.
func guideTable(t *testing.T) []guideRow {
	t.Helper()
	data, err := os.ReadFile(repoFile(t, GuideFile))
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(string(data[strings.Index(string(data), "## Controller metrics"):]), "\n## Prometheus rules")
	name := regexp.MustCompile("`(consullock_[a-z_]+)`")
	alert := regexp.MustCompile("`(ConsulLock[A-Za-z]+)`")
	var rows []guideRow
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `consullock_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) != 5 {
			t.Fatalf("%s: a row of the metrics table has %d cells, want 3: %s", GuideFile, len(cells)-2, line)
		}
		r := guideRow{meaning: cells[2], alerts: map[string]bool{}}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			r.metrics = append(r.metrics, m[1])
		}
		for _, m := range alert.FindAllStringSubmatch(cells[3], -1) {
			r.alerts[m[1]] = true
		}
		rows = append(rows, r)
	}
	if len(rows) < 10 {
		t.Fatalf("%s: %d rows in the metrics table", GuideFile, len(rows))
	}
	return rows
}

// TestGuideListsEveryMetric: the observability guide's table lists every
// metric the controller exports (read from its registry, not a hand list),
// and nothing else; each row names exactly the shipped alerts that read
// its metrics; and each label value the controller exports from its first
// scrape (a run's outcomes, violation reasons, kinds, watches) is in the
// row of its metric.
func TestGuideListsEveryMetric(t *testing.T) {
	exported := map[string]bool{}
	for n := range exportedMetrics(t) {
		if strings.HasPrefix(n, "consullock_") {
			exported[baseMetric(n)] = true
		}
	}
	reading := alertsReading(t)
	rowOf := map[string]guideRow{}
	for _, r := range guideTable(t) {
		want := map[string]bool{}
		for _, m := range r.metrics {
			rowOf[m] = r
			if !exported[m] {
				t.Errorf("%s lists %s, which the controller does not export", GuideFile, m)
			}
			for a := range reading[m] {
				want[a] = true
			}
		}
		if !maps.Equal(want, r.alerts) {
			t.Errorf("%s: the row of %s names the alerts %v; the rules read its metrics in %v",
				GuideFile, strings.Join(r.metrics, ", "), slices.Sorted(maps.Keys(r.alerts)), slices.Sorted(maps.Keys(want)))
		}
	}
	for m := range exported {
		if _, ok := rowOf[m]; !ok {
			t.Errorf("the controller exports %s, which %s does not list", m, GuideFile)
		}
	}

	// Label values, as the controller's first scrape has them.
	values := map[string]map[string]bool{"consullock_lock_runs_total": {}}
	for _, o := range controller.RunOutcomes() {
		values["consullock_lock_runs_total"][o] = true
	}
	mfs, err := idleController(t).Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(mf.GetName(), "consullock_") && l.GetName() != "lock" {
					if values[mf.GetName()] == nil {
						values[mf.GetName()] = map[string]bool{}
					}
					values[mf.GetName()][l.GetValue()] = true
				}
			}
		}
	}
	if len(values) < 6 {
		t.Fatalf("label values of %d metrics at the first scrape: %v", len(values), values)
	}
	for name, vs := range values {
		for v := range vs {
			if !strings.Contains(rowOf[name].meaning, "`"+v+"`") {
				t.Errorf("%s: the row of %s does not list the label value `%s`", GuideFile, name, v)
			}
		}
	}
}
