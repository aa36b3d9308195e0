package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// Measure counts a small tree's lines, exported names, Hold types (one
// defined twice), client methods, run-once packages, and the WithDefaults
// and Resolve calls with where they are; test files and testdata are not
// counted.
func TestMeasure_aSmallTree(t *testing.T) {
	root := t.TempDir()
	write := func(path, src string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("internal/consul/client.go", "package consul\n\ntype Client struct{}\n\nfunc (c *Client) Get() {}\n\nfunc (c *Client) put() {}\n\ntype HolderSession struct{}\n")
	write("internal/lockmodel/ledger.go", "package lockmodel\n\ntype Ledger struct{}\n\nconst A, b = 1, 2\n\ntype Hold struct{}\n")
	write("internal/runner/run.go", "package runner\n\nimport \"x/lockmodel\"\n\nvar l lockmodel.Ledger\n\ntype Hold struct{}\n\nfunc f(p interface{ WithDefaults() }) { p.WithDefaults() }\n")
	write("internal/runner/config.go", "package runner\n\nfunc g(p interface{ Resolve() }) {\n\tp.Resolve()\n\tp.Resolve()\n}\n\nfunc (c config) Resolve() {}\n\ntype config struct{}\n")
	write("internal/runner/run_test.go", "package runner\n\nfunc Exported() { var p interface{ Resolve() }; p.Resolve() }\n")
	write("internal/runner/testdata/x/main.go", "package main\n\nfunc Exported() {}\n")
	write("internal/store/ledger.go", "package store\n\nfunc (s Store) BeginRun() {}\n\ntype Store struct{}\n")
	write("internal/cli/run.go", "package cli\n\nimport \"x/runonce\"\n\nvar r runonce.Run\n\nvar o = r.Overlap\n")
	write("internal/provider/schema.go", "package provider\n\nconst name = \"overlap\"\n")
	f, err := Measure(root, regexp.MustCompile(DefaultTrace))
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string]Package{}
	for _, p := range f.Packages {
		sizes[p.Path] = p
	}
	if len(sizes) != 6 || sizes["internal/consul"].Exported != 3 || sizes["internal/lockmodel"].Exported != 3 || sizes["internal/runner"].Exported != 2 ||
		sizes["internal/consul"].Lines != 5 {
		t.Fatalf("packages %+v", f.Packages)
	}
	if f.ClientMethods != 1 || len(f.HolderTypes) != 3 || f.HolderTwice != 1 || f.WithDefaults != 1 ||
		!slices.Equal(f.RunOncePackages, []string{"internal/cli", "internal/lockmodel", "internal/runner", "internal/store"}) ||
		!slices.Equal(f.RunOnceWriters, []string{"internal/store"}) || !slices.Equal(f.RunOnceCallers, []string{"internal/cli"}) {
		t.Fatalf("figures %+v", f)
	}
	// Calls are counted where they are, a method's declaration is not.
	if !slices.Equal(f.WithDefaultsAt, []string{"internal/runner/run.go:9"}) || f.Resolve != 2 ||
		!slices.Equal(f.ResolveAt, []string{"internal/runner/config.go:4", "internal/runner/config.go:5"}) {
		t.Fatalf("WithDefaults %d at %v, Resolve %d at %v", f.WithDefaults, f.WithDefaultsAt, f.Resolve, f.ResolveAt)
	}
	// The traced attribute's files: a field read and its name as written.
	if !slices.Equal(f.Traced, []string{"internal/cli/run.go", "internal/provider/schema.go"}) {
		t.Fatalf("traced %v", f.Traced)
	}
}
