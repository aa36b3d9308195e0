package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureRun runs the fixture package (every way a test can end) through
// the real `go test -json`, so the parser is checked against the format the
// go command really writes, parallel subtests included.
func fixtureRun(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "fixture_test.go"} {
		b, err := os.ReadFile(filepath.Join("testdata", "fixture", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("the fixture has failing tests, go test passed:\n%s", out)
	}
	return out
}

func TestParse_classifiesEveryEnding(t *testing.T) {
	c, err := Parse(bytes.NewReader(fixtureRun(t)), "OpenTofu 1.10.6", "Consul 1.14.11")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Outcome{
		"fixture TestPasses":                  Passed,
		"fixture TestUnsupported":             Unsupported,
		"fixture TestSkippedForAnotherReason": Skipped,
		"fixture TestFails":                   Failed,
		"fixture TestParent/ok":               Passed,
		"fixture TestParent/unsupported":      Unsupported,
		"fixture TestParent/fails":            Failed,
		"fixture TestParentAllPass/a":         Passed,
		"fixture TestParentAllPass/b":         Passed,
	}
	for name, w := range want {
		got, ok := c.Tests[name]
		if !ok {
			t.Errorf("%s: missing from %v", name, c.Tests)
			continue
		}
		if got.Outcome != w {
			t.Errorf("%s: outcome %d (%q), want %d", name, got.Outcome, got.Reason, w)
		}
	}
	// Parents are not counted: their leaves say what was proved.
	if len(c.Tests) != len(want) {
		t.Errorf("got %d tests, want %d: %v", len(c.Tests), len(want), c.Tests)
	}
	if r := c.Tests["fixture TestUnsupported"].Reason; r != "ephemeral resources need OpenTofu >= 1.11 (have 1.10.6)" {
		t.Errorf("unsupported reason = %q", r)
	}
	if r := c.Tests["fixture TestSkippedForAnotherReason"].Reason; r != "no agent" {
		t.Errorf("other skip reason = %q", r)
	}
	if c.OK() {
		t.Error("a cell with a failure and a plain skip is OK")
	}
	// The package failed because its tests did: not a failure of its own.
	if len(c.PackageFailures) != 0 {
		t.Errorf("package failures %q, want none", c.PackageFailures)
	}
	if r := c.Tests["fixture TestFails"].Reason; !strings.Contains(r, "boom") || strings.Contains(r, "---") {
		t.Errorf("failure reason = %q", r)
	}
}

// A package that fails outside its tests (here: TestMain could not start
// Consul) is a failure of the cell even though no test failed.
func TestParse_packageFailureOutsideTests(t *testing.T) {
	stream := `{"Action":"start","Package":"example/p"}
{"Action":"output","Package":"example/p","Output":"starting consul: exit status 1\n"}
{"Action":"output","Package":"example/p","Output":"FAIL\texample/p\t0.1s\n"}
{"Action":"fail","Package":"example/p","Elapsed":0.1}
`
	c, err := Parse(strings.NewReader(stream), "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.PackageFailures) != 1 || !strings.Contains(c.PackageFailures[0], "starting consul") {
		t.Fatalf("package failures = %q", c.PackageFailures)
	}
	if c.OK() {
		t.Fatal("a cell whose package failed is OK")
	}
}

func TestMarkdown_unsupportedIsNeverCountedAsPassed(t *testing.T) {
	ok := &Cell{CLI: "OpenTofu 1.12.6", Consul: "Consul 1.14.11", Tests: map[string]Result{
		"p TestA": {Outcome: Passed}, "p TestEphemeral": {Outcome: Passed},
	}}
	old := &Cell{CLI: "Terraform 1.5.7", Consul: "Consul 1.14.11", Tests: map[string]Result{
		"p TestA": {Outcome: Passed}, "p TestEphemeral": {Unsupported, "ephemeral resources need Terraform >= 1.10"},
	}}
	if !ok.OK() || !old.OK() {
		t.Fatal("cells with only passes and unsupported features must be OK")
	}
	md := Markdown([]*Cell{ok, old})
	for _, want := range []string{
		"| OpenTofu 1.12.6 | 2 passed |",
		"| Terraform 1.5.7 | 1 passed, 1 not supported by this CLI |",
		"| `p TestEphemeral` | passed | not supported by this CLI |",
		"- Terraform 1.5.7: ephemeral resources need Terraform >= 1.10",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Failures") {
		t.Errorf("no failure, yet:\n%s", md)
	}
}

func TestMarkdown_parentInOneCellLeafInAnother(t *testing.T) {
	withSubtests := &Cell{CLI: "OpenTofu 1.12.6", Consul: "c", Tests: map[string]Result{
		"p TestF/a": {Outcome: Passed}, "p TestF/b": {Outcome: Passed},
	}}
	skipped := &Cell{CLI: "Terraform 1.5.7", Consul: "c", Tests: map[string]Result{
		"p TestF": {Unsupported, "provider functions need Terraform 1.8"},
	}}
	md := Markdown([]*Cell{withSubtests, skipped})
	if want := "| `p TestF` | passed | not supported by this CLI |"; !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
}

func TestMarkdown_otherSkipsAndPackageFailuresFail(t *testing.T) {
	c := &Cell{CLI: "OpenTofu 1.12.6", Consul: "Consul 1.16.3", Tests: map[string]Result{
		"p TestA": {Outcome: Passed}, "p TestB": {Skipped, "no agent"},
	}}
	if c.OK() {
		t.Fatal("a skip for another reason is OK")
	}
	md := Markdown([]*Cell{c})
	for _, want := range []string{"**1 skipped**", "`p TestB`: no agent"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	dead := &Cell{CLI: "x", Consul: "y", Tests: map[string]Result{}, PackageFailures: []string{"p: starting consul: exit 1"}}
	if dead.OK() {
		t.Fatal("a package failure is OK")
	}
	empty := &Cell{CLI: "x", Consul: "y", Tests: map[string]Result{}}
	if empty.OK() || !strings.Contains(Markdown([]*Cell{empty}), "no test ran") {
		t.Fatal("a cell where nothing ran is OK")
	}
}
