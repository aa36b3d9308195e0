// Command layout measures the shape of the module's centre, for the
// before/after table of a re-cut (reports/layout.md): per package, its
// non-test lines and exported identifiers (package-level names plus
// exported methods); exported types named Hold... or Holder... (and how
// many of those names are defined twice); the methods on consul.Client;
// the packages that hold run-once code (they use the run ledger:
// ledger.Ledger or its outcomes, or define them); and where defaults are
// applied: the calls of WithDefaults (today ledger.RunOnce's) and of Resolve
// (lockmodel.SessionProfile's, which gives the resolved lockmodel.Profile),
// each counted by selector and listed as file:line; and the files that name
// one lock attribute read by the runner (-trace, a regular expression of its
// spellings; by default run_once.overlap's: the schema's and the record's
// "overlap", the field Overlap, FieldRunOnceOverlap), which a new attribute
// of its kind touches.
//
//	go run ./scripts/layout            # a markdown table of the working tree
//	go run ./scripts/layout -json      # the same figures as JSON
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Figures are one tree's measurements.
type Figures struct {
	Packages        []Package      `json:"packages"`
	HolderTypes     []string       `json:"holder_types"`      // pkg.Name of exported Hold.../Holder... types
	HolderTwice     int            `json:"holder_twice"`      // names among them defined in more than one package
	ClientMethods   int            `json:"client_methods"`    // methods declared on consul.Client
	RunOncePackages []string       `json:"run_once_packages"` // packages that use or define the run ledger
	RunOnceWriters  []string       `json:"run_once_writers"`  // of those, packages that decide or write it themselves
	RunOnceCallers  []string       `json:"run_once_callers"`  // packages that run it through package runonce
	WithDefaults    int            `json:"with_defaults"`     // calls of a WithDefaults method (selectors)
	WithDefaultsAt  []string       `json:"with_defaults_at"`  // where: file:line
	Resolve         int            `json:"resolve"`           // calls of a Resolve method (selectors)
	ResolveAt       []string       `json:"resolve_at"`        // where: file:line
	Trace           string         `json:"trace"`             // the -trace expression
	Traced          []string       `json:"traced"`            // files whose text matches it
	Calls           map[string]int `json:"-"`
}

// Package is one package's size.
type Package struct {
	Path     string `json:"path"`
	Lines    int    `json:"lines"`    // non-test, non-blank lines
	Exported int    `json:"exported"` // exported package-level names and methods
}

func main() {
	asJSON := flag.Bool("json", false, "print JSON")
	root := flag.String("root", ".", "the module's root")
	trace := flag.String("trace", DefaultTrace, "a regular expression of one attribute's spellings: the files naming it are listed")
	flag.Parse()
	re, err := regexp.Compile(*trace)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layout: -trace:", err)
		os.Exit(2)
	}
	f, err := Measure(*root, re)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layout:", err)
		os.Exit(1)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(f)
		return
	}
	Print(os.Stdout, f)
}

// ledgerNames are the identifiers whose use marks run-once code.
var ledgerNames = []string{"Ledger", "RunOutcome", "RunSucceeded", "BeginDecision", "AttemptResult", "RunLedgerKey"}

// writerNames are the ledger's decisions and writes: a package that
// declares or calls one decides or writes run-once state itself; one that
// uses package runonce runs the protocol through it; the others only read.
var writerNames = []string{"BeginWith", "FinishWith", "FinishWithReason", "BeginRun", "FinishRunAndRelease", "EditLedger", "CASLedger"}

// DefaultTrace spells run_once.overlap, an attribute of consullock_lock
// that the runner reads, as the code names it.
const DefaultTrace = `\.Overlap\b|"overlap"|FieldRunOnceOverlap`

// Measure reads every non-test Go file of the module below root (not
// tests/, examples/ or other non-product folders, nor testdata); the files
// whose text trace matches are listed in Traced.
func Measure(root string, trace *regexp.Regexp) (Figures, error) {
	m := &measurer{trace: trace, fset: token.NewFileSet(), pkgs: map[string]*Package{}, holders: map[string][]string{}, runOnce: map[string]bool{}, writers: map[string]bool{}, callers: map[string]bool{}}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" ||
				slices.Contains([]string{"tests", "bin", "tmp", "examples", "docs", "templates", "scripts", "tools", "reports"}, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return m.file(path, filepath.ToSlash(rel))
	})
	if err != nil {
		return m.f, err
	}
	return m.figures(), nil
}

// measurer accumulates one tree's figures file by file.
type measurer struct {
	trace   *regexp.Regexp
	fset    *token.FileSet
	f       Figures
	pkgs    map[string]*Package
	holders map[string][]string // Hold... type name -> packages
	runOnce map[string]bool
	writers map[string]bool
	callers map[string]bool
}

// file adds the Go file at path, rel below the root.
func (m *measurer) file(path, rel string) error {
	dir := filepath.ToSlash(filepath.Dir(rel))
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	file, err := parser.ParseFile(m.fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	if m.trace.Match(src) {
		m.f.Traced = append(m.f.Traced, rel)
	}
	p := m.pkgs[dir]
	if p == nil {
		p = &Package{Path: dir}
		m.pkgs[dir] = p
	}
	for _, line := range strings.Split(string(src), "\n") {
		if strings.TrimSpace(line) != "" {
			p.Lines++
		}
	}
	for _, decl := range file.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			m.funcDecl(p, dir, d)
		case *ast.GenDecl:
			m.genDecl(p, dir, d)
		}
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if x, ok := n.(*ast.SelectorExpr); ok {
			at := fmt.Sprintf("%s:%d", rel, m.fset.Position(x.Sel.Pos()).Line)
			switch x.Sel.Name {
			case "WithDefaults":
				m.f.WithDefaults++
				m.f.WithDefaultsAt = append(m.f.WithDefaultsAt, at)
			case "Resolve":
				m.f.Resolve++
				m.f.ResolveAt = append(m.f.ResolveAt, at)
			}
			if id, ok := x.X.(*ast.Ident); ok && (id.Name == "lockmodel" || id.Name == "ledger" || id.Name == "record") && isLedgerName(x.Sel.Name) {
				m.runOnce[dir] = true
			}
			id, _ := x.X.(*ast.Ident)
			switch {
			case id != nil && id.Name == "runonce":
				m.runOnce[dir], m.callers[dir] = true, true
			case id != nil && id.Name == "ledger" && x.Sel.Name == "BeginRun": // the decision's kind, not the write
			case slices.Contains(writerNames, x.Sel.Name):
				m.runOnce[dir], m.writers[dir] = true, true
			}
		}
		return true
	})
	return nil
}

func (m *measurer) funcDecl(p *Package, dir string, d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	p.Exported++
	if d.Recv != nil && dir == "internal/consul" && recvName(d.Recv) == "Client" {
		m.f.ClientMethods++
	}
	if d.Recv != nil && isLedgerName(d.Name.Name) {
		m.runOnce[dir] = true
	}
	if slices.Contains(writerNames, d.Name.Name) {
		m.runOnce[dir], m.writers[dir] = true, true
	}
}

func (m *measurer) genDecl(p *Package, dir string, d *ast.GenDecl) {
	for _, spec := range d.Specs {
		switch s := spec.(type) {
		case *ast.TypeSpec:
			if !s.Name.IsExported() {
				continue
			}
			p.Exported++
			if strings.HasPrefix(s.Name.Name, "Hold") {
				m.holders[s.Name.Name] = append(m.holders[s.Name.Name], dir)
			}
			if isLedgerName(s.Name.Name) {
				m.runOnce[dir] = true
			}
		case *ast.ValueSpec:
			for _, n := range s.Names {
				if n.IsExported() {
					p.Exported++
				}
			}
		}
	}
}

// figures sorts what was measured.
func (m *measurer) figures() Figures {
	f := m.f
	f.Trace = m.trace.String()
	sort.Strings(f.Traced)
	for _, p := range m.pkgs {
		f.Packages = append(f.Packages, *p)
	}
	sort.Slice(f.Packages, func(i, j int) bool { return f.Packages[i].Path < f.Packages[j].Path })
	for name, dirs := range m.holders {
		for _, d := range dirs {
			f.HolderTypes = append(f.HolderTypes, filepath.Base(d)+"."+name)
		}
		if len(dirs) > 1 {
			f.HolderTwice++
		}
	}
	sort.Strings(f.HolderTypes)
	for d := range m.runOnce {
		f.RunOncePackages = append(f.RunOncePackages, d)
	}
	sort.Strings(f.RunOncePackages)
	for d := range m.writers {
		f.RunOnceWriters = append(f.RunOnceWriters, d)
	}
	sort.Strings(f.RunOnceWriters)
	for d := range m.callers {
		f.RunOnceCallers = append(f.RunOnceCallers, d)
	}
	sort.Strings(f.RunOnceCallers)
	return f
}

func isLedgerName(name string) bool { return slices.Contains(ledgerNames, name) }

func recvName(fl *ast.FieldList) string {
	if fl == nil || len(fl.List) == 0 {
		return ""
	}
	t := fl.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// Print writes f as markdown.
func Print(w io.Writer, f Figures) {
	fmt.Fprintln(w, "| package | non-test lines | exported identifiers |\n|---|---:|---:|")
	for _, p := range f.Packages {
		fmt.Fprintf(w, "| %s | %d | %d |\n", p.Path, p.Lines, p.Exported)
	}
	fmt.Fprintf(w, "\n| figure | value |\n|---|---:|\n")
	fmt.Fprintf(w, "| exported Hold…/Holder… types | %d (%d names defined twice) |\n", len(f.HolderTypes), f.HolderTwice)
	fmt.Fprintf(w, "| exported methods on consul.Client | %d |\n", f.ClientMethods)
	fmt.Fprintf(w, "| packages with run-once code | %d (%s) |\n", len(f.RunOncePackages), strings.Join(f.RunOncePackages, ", "))
	fmt.Fprintf(w, "| of which decide or write it themselves | %d (%s) |\n", len(f.RunOnceWriters), strings.Join(f.RunOnceWriters, ", "))
	fmt.Fprintf(w, "| of which run it through package runonce | %d (%s) |\n", len(f.RunOnceCallers), strings.Join(f.RunOnceCallers, ", "))
	fmt.Fprintf(w, "| WithDefaults calls (selectors) | %d |\n", f.WithDefaults)
	fmt.Fprintf(w, "| Resolve calls (selectors) | %d |\n", f.Resolve)
	fmt.Fprintf(w, "| files naming the traced attribute (packages) | %d (%d) |\n", len(f.Traced), len(tracedPackages(f.Traced)))
	fmt.Fprintf(w, "\nHold…/Holder… types: %s\n", strings.Join(f.HolderTypes, ", "))
	fmt.Fprintf(w, "\nWithDefaults calls: %s\n", strings.Join(f.WithDefaultsAt, ", "))
	fmt.Fprintf(w, "\nResolve calls: %s\n", strings.Join(f.ResolveAt, ", "))
	fmt.Fprintf(w, "\nFiles naming the traced attribute (`%s`): %s\n", f.Trace, strings.Join(f.Traced, ", "))
}

// tracedPackages are the folders of files.
func tracedPackages(files []string) []string {
	var dirs []string
	for _, f := range files {
		if d := filepath.Dir(f); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
