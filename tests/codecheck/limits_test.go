// Package codecheck checks the code's own size limits (issue 36): no file
// over 800 lines outside tests. Function lengths are golangci-lint's funlen
// (80 lines, .golangci.yml), which runs on both modules.
package codecheck

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const maxFileLines = 800

// TestCode_noFileOver800Lines walks both modules' Go files but the tests
// and the vendored tool builds.
func TestCode_noFileOver800Lines(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "tmp", "tools", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		checked++
		if n := bytes.Count(b, []byte("\n")); n > maxFileLines {
			rel, _ := filepath.Rel(root, p)
			t.Errorf("%s: %d lines, over %d: split it by concern", rel, n, maxFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files under %s; the walk missed the code", checked, root)
	}
}
