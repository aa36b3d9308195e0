package observability

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// firstEvaluation feeds two real scrapes of the controller, before and
// after the faults, to the shipped rules with promtool, one minute apart:
// each alert of want fires at the first evaluation that sees the second
// scrape (1m), not before. A counter absent from the first scrape, which
// appears at 1 with its first event, reads as no increase: its alert would
// not fire at all.
func firstEvaluation(t *testing.T, promtool string, before, after []byte, want []firing) {
	t.Helper()
	b, a := exposition(t, before), exposition(t, after)
	names := make([]string, 0, len(a))
	for s := range a {
		names = append(names, s)
	}
	for s := range b {
		if _, ok := a[s]; !ok {
			names = append(names, s)
		}
	}
	slices.Sort(names)
	value := func(m map[string]string, s string) string {
		if v, ok := m[s]; ok {
			return v
		}
		return "_"
	}
	input := make([]map[string]string, 0, len(names))
	for _, s := range names {
		input = append(input, map[string]string{"series": withInstance(s), "values": value(b, s) + " " + value(a, s)})
	}
	var exprs []map[string]any
	for _, w := range want {
		expr := fmt.Sprintf(`count(ALERTS{alertstate="firing",alertname=%q,%s})`, w.alert, w.label)
		exprs = append(exprs,
			map[string]any{"expr": expr, "eval_time": "0m", "exp_samples": []any{}},
			map[string]any{"expr": expr, "eval_time": "1m", "exp_samples": []any{map[string]any{"labels": "{}", "value": 1}}})
	}
	data, err := yaml.Marshal(map[string]any{
		"rule_files":          []string{repoFile(t, RulesFile)},
		"evaluation_interval": "1m",
		"tests":               []any{map[string]any{"interval": "1m", "input_series": input, "promql_expr_test": exprs}},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "first-evaluation.test.yml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules on the controller's scrapes before and after the faults: %v\n%s", err, out)
		return
	}
	t.Logf("promtool: %d series of two real scrapes; %d alerts fire at the first evaluation after the faults", len(names), len(want))
}

// exposition reads the consullock series of a /metrics body: series (as
// the text format writes it, name{labels}) -> value.
func exposition(t *testing.T, body []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "consullock_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("unparsable metrics line %q", line)
		}
		if math.IsInf(v, 0) || math.IsNaN(v) {
			continue
		}
		out[line[:i]] = line[i+1:]
	}
	return out
}

// withInstance adds the label instance="a" that a scrape would.
func withInstance(series string) string {
	if strings.HasSuffix(series, "}") {
		return strings.TrimSuffix(series, "}") + `,instance="a"}`
	}
	return series + `{instance="a"}`
}
