// Command compat turns the `go test -json` logs of make test-compat (one per
// CLI x Consul pair) into a markdown results table, and fails when any test
// failed or skipped for a reason other than a CLI that cannot have the
// feature.
//
//	go run ./scripts/compat -o results.md 'OpenTofu 1.12.6|Consul 1.14.11|log.json' ...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// UnsupportedPrefix starts the skip message of a test whose feature the CLI
// under test cannot have (internal/testenv's CLI feature checks).
const UnsupportedPrefix = "not supported by this CLI: "

// Outcome is what one test did in one cell.
type Outcome int

const (
	Passed Outcome = iota
	Unsupported
	Failed
	Skipped // for any other reason: a failure of the run too
)

// Result is one test's outcome in one cell, with the skip or failure reason.
type Result struct {
	Outcome Outcome
	Reason  string
}

// Cell is one CLI x Consul pair's run.
type Cell struct {
	CLI, Consul string
	// Tests holds the leaf tests (those without subtests), by package and
	// name: a parent passes when its subtests are skipped, so only leaves
	// say what was proved.
	Tests map[string]Result
	// PackageFailures are packages that failed outside any test (a build
	// error, a TestMain that could not start Consul).
	PackageFailures []string
	Elapsed         time.Duration
}

type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events name the package here
	Test       string
	Output     string
	Elapsed    float64
}

// fileLine matches the prefix the testing package puts before t.Log and
// t.Skip messages.
var fileLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)$`)

// Parse reads one cell's `go test -json` stream.
func Parse(r io.Reader, cli, consul string) (*Cell, error) {
	c := &Cell{CLI: cli, Consul: consul, Tests: map[string]Result{}}
	outputs := map[string][]string{}
	final := map[string]string{}
	pkgOut := map[string][]string{}
	var pkgFailed []string
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // go test writes a few non-JSON lines (e.g. go: downloading)
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
		if e.Test == "" {
			switch e.Action {
			case "build-output":
				// Named by ImportPath, which may carry a " [pkg.test]" suffix.
				pkg, _, _ := strings.Cut(e.ImportPath, " ")
				pkgOut[pkg] = append(pkgOut[pkg], e.Output)
			case "output":
				pkgOut[e.Package] = append(pkgOut[e.Package], e.Output)
			case "fail": // also follows a build failure ("build-fail")
				pkgFailed = append(pkgFailed, e.Package)
			}
			if e.Action == "pass" || e.Action == "fail" {
				c.Elapsed += time.Duration(e.Elapsed * float64(time.Second))
			}
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "run":
			if _, seen := final[key]; !seen {
				order = append(order, key)
				final[key] = ""
			}
		case "output":
			outputs[key] = append(outputs[key], e.Output)
		case "pass", "fail", "skip":
			final[key] = e.Action
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, key := range order {
		if hasChildren(key, order) {
			// A parent's own failure shows in its leaves, except a failure
			// after its subtests ran (e.g. in a cleanup): keep that one.
			if final[key] == "fail" && !slices.ContainsFunc(order, func(k string) bool {
				return strings.HasPrefix(k, key+"/") && final[k] == "fail"
			}) {
				c.Tests[key] = Result{Failed, firstLines(outputs[key], 3)}
			}
			continue
		}
		switch final[key] {
		case "pass":
			c.Tests[key] = Result{Outcome: Passed}
		case "skip":
			msg := skipMessage(outputs[key])
			if reason, ok := strings.CutPrefix(msg, UnsupportedPrefix); ok {
				c.Tests[key] = Result{Unsupported, reason}
			} else {
				c.Tests[key] = Result{Skipped, msg}
			}
		case "fail":
			c.Tests[key] = Result{Failed, firstLines(outputs[key], 3)}
		default: // started, never ended: the package died (timeout, panic)
			c.Tests[key] = Result{Failed, "did not finish: " + lastLines(outputs[key], 5)}
		}
	}
	// A package fails when one of its tests did; count it only when none
	// did (a build error, a TestMain that could not start, a timeout).
	for _, pkg := range pkgFailed {
		if !slices.ContainsFunc(order, func(k string) bool {
			return strings.HasPrefix(k, pkg+" ") && c.Tests[k].Outcome == Failed
		}) {
			c.PackageFailures = append(c.PackageFailures, pkg+": "+lastLines(pkgOut[pkg], 5))
		}
	}
	return c, nil
}

func hasChildren(key string, keys []string) bool {
	return slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, key+"/") })
}

// skipMessage is the last message logged before "--- SKIP": the one
// t.Skip gave.
func skipMessage(out []string) string {
	msg := ""
	for _, l := range out {
		if m := fileLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			msg = m[1]
		}
	}
	return msg
}

// firstLines is the start of a failure's messages (the first error says
// most), without the === and --- markers, at most 300 characters.
func firstLines(out []string, n int) string {
	var lines []string
	for _, o := range out {
		l := strings.TrimSpace(o)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		if lines = append(lines, l); len(lines) == n {
			break
		}
	}
	s := strings.Join(lines, " / ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func lastLines(out []string, n int) string {
	var lines []string
	for _, o := range out {
		for l := range strings.SplitSeq(strings.TrimRight(o, "\n"), "\n") {
			if strings.TrimSpace(l) != "" {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// lookup is a test's result in this cell; a test that is a leaf in one
// cell may have run subtests in another (subtests only where the feature
// is supported): then its result is the worst of its subtests'.
func (c *Cell) lookup(name string) (Result, bool) {
	if r, ok := c.Tests[name]; ok {
		return r, true
	}
	worst, found := Result{Outcome: Passed}, false
	for k, r := range c.Tests {
		if strings.HasPrefix(k, name+"/") {
			found = true
			if r.Outcome > worst.Outcome {
				worst = r
			}
		}
	}
	return worst, found
}

// Count returns how many leaf tests had each outcome.
func (c *Cell) Count() map[Outcome]int {
	n := map[Outcome]int{}
	for _, r := range c.Tests {
		n[r.Outcome]++
	}
	return n
}

// OK reports whether the cell proved everything it could: no failure, no
// skip other than an unsupported feature, and at least one test passed.
func (c *Cell) OK() bool {
	n := c.Count()
	return len(c.PackageFailures) == 0 && n[Failed] == 0 && n[Skipped] == 0 && n[Passed] > 0
}

// Markdown renders the summary table (CLIs by Consul versions), then one
// row per test that did not pass in every cell, then the failures.
func Markdown(cells []*Cell) string {
	var clis, consuls []string
	byPair := map[[2]string]*Cell{}
	for _, c := range cells {
		if !slices.Contains(clis, c.CLI) {
			clis = append(clis, c.CLI)
		}
		if !slices.Contains(consuls, c.Consul) {
			consuls = append(consuls, c.Consul)
		}
		byPair[[2]string{c.CLI, c.Consul}] = c
	}
	var b strings.Builder
	b.WriteString("| CLI | " + strings.Join(consuls, " | ") + " |\n|---|" + strings.Repeat("---|", len(consuls)) + "\n")
	for _, cli := range clis {
		b.WriteString("| " + cli + " |")
		for _, consul := range consuls {
			c := byPair[[2]string{cli, consul}]
			if c == nil {
				b.WriteString(" not run |")
				continue
			}
			b.WriteString(" " + summary(c) + " |")
		}
		b.WriteString("\n")
	}

	writeNotPassing(&b, cells)
	var failures []string
	for _, c := range cells {
		for _, p := range c.PackageFailures {
			failures = append(failures, fmt.Sprintf("- %s / %s: package %s", c.CLI, c.Consul, escape(p)))
		}
		for _, name := range sortedKeys(c.Tests) {
			if r := c.Tests[name]; r.Outcome == Failed || r.Outcome == Skipped {
				failures = append(failures, fmt.Sprintf("- %s / %s: `%s`: %s", c.CLI, c.Consul, shortName(name), escape(r.Reason)))
			}
		}
	}
	if len(failures) > 0 {
		b.WriteString("\nFailures (a skip for any other reason than an unsupported feature is a failure):\n" + strings.Join(failures, "\n") + "\n")
	}
	return b.String()
}

// writeNotPassing writes one row per test that did not pass in every cell,
// in a stable order, and why a CLI does not support the ones it cannot run.
func writeNotPassing(b *strings.Builder, cells []*Cell) {
	var names []string
	for _, c := range cells {
		for name, r := range c.Tests {
			if r.Outcome != Passed && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	if len(names) > 0 {
		b.WriteString("\n| Test | " + strings.Join(cellNames(cells), " | ") + " |\n|---|" + strings.Repeat("---|", len(cells)) + "\n")
		for _, name := range names {
			b.WriteString("| `" + shortName(name) + "` |")
			for _, c := range cells {
				r, ok := c.lookup(name)
				switch {
				case !ok:
					b.WriteString(" not run |")
				case r.Outcome == Passed:
					b.WriteString(" passed |")
				case r.Outcome == Unsupported:
					b.WriteString(" not supported by this CLI |")
				case r.Outcome == Skipped:
					b.WriteString(" **SKIPPED** |")
				default:
					b.WriteString(" **FAILED** |")
				}
			}
			b.WriteString("\n")
		}
		reasons := map[string]bool{}
		for _, c := range cells {
			for _, name := range names {
				if r, ok := c.Tests[name]; ok && r.Outcome == Unsupported {
					reasons[c.CLI+": "+r.Reason] = true
				}
			}
		}
		if len(reasons) > 0 {
			b.WriteString("\nNot supported by this CLI:\n")
			for _, r := range sortedKeys(reasons) {
				b.WriteString("- " + r + "\n")
			}
		}
	}
}

func summary(c *Cell) string {
	n := c.Count()
	parts := []string{fmt.Sprintf("%d passed", n[Passed])}
	if n[Unsupported] > 0 {
		parts = append(parts, fmt.Sprintf("%d not supported by this CLI", n[Unsupported]))
	}
	if n[Failed] > 0 || len(c.PackageFailures) > 0 {
		parts = append(parts, fmt.Sprintf("**%d failed**", n[Failed]+len(c.PackageFailures)))
	}
	if n[Skipped] > 0 {
		parts = append(parts, fmt.Sprintf("**%d skipped**", n[Skipped]))
	}
	if n[Passed] == 0 && n[Failed] == 0 && len(c.PackageFailures) == 0 {
		parts = append(parts, "**no test ran**")
	}
	return strings.Join(parts, ", ")
}

func cellNames(cells []*Cell) []string {
	var out []string
	for _, c := range cells {
		out = append(out, c.CLI+" / "+c.Consul)
	}
	return out
}

// shortName drops the module path: "internal/provider TestAccX".
func shortName(key string) string {
	pkg, test, _ := strings.Cut(key, " ")
	pkg = strings.TrimPrefix(pkg, "github.com/consullock/terraform-provider-consullock")
	pkg = strings.TrimPrefix(pkg, "/")
	if pkg == "" {
		pkg = "."
	}
	return pkg + " " + test
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func main() {
	out := flag.String("o", "", "write the markdown table to this file too")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: compat [-o results.md] 'CLI|Consul|go-test.json' ...")
		os.Exit(2)
	}
	var cells []*Cell
	for _, arg := range flag.Args() {
		parts := strings.SplitN(arg, "|", 3)
		if len(parts) != 3 {
			fmt.Fprintf(os.Stderr, "compat: %q is not CLI|Consul|file\n", arg)
			os.Exit(2)
		}
		c, err := parseFile(parts[2], parts[0], parts[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "compat:", err)
			os.Exit(1)
		}
		cells = append(cells, c)
	}
	md := Markdown(cells)
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "compat:", err)
			os.Exit(1)
		}
	}
	for _, c := range cells {
		if !c.OK() {
			os.Exit(1)
		}
	}
}

func parseFile(path, cli, consul string) (*Cell, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		// The cell did not run (e.g. its tool failed to build).
		return &Cell{CLI: cli, Consul: consul, Tests: map[string]Result{}, PackageFailures: []string{"no test log " + path}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, cli, consul)
}
