package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The docs must not teach what the code does not do. Consul's LockIndex is
// not a fencing token (a plain write resets it to 0, a re-created key starts
// again at 1); the fencing token is the Raft index of the acquisition.
var (
	// The two named within a few words of each other: "LockIndex (the
	// fencing token)", "`lock_index`, the fencing token that grows".
	lockIndexAsFencingToken = regexp.MustCompile(`(?is)(LockIndex|lock_index|CONSUL_LOCK_INDEX|lock index).{0,20}fencing token|fencing token.{0,20}(LockIndex|lock_index|CONSUL_LOCK_INDEX|lock index)`)
	// A sentence that names both may say that one is not the other.
	denial        = regexp.MustCompile(`(?i)\bnot\b|\bnever\b|n't\b|\bno longer\b|\binstead\b|\brather than\b|\bunlike\b`)
	sentenceBreak = regexp.MustCompile(`[.!?:;](\s|$)|\n\s*\n|\|`)
)

// lockIndexCalledFencingToken returns the sentences of text that call
// LockIndex a fencing token.
func lockIndexCalledFencingToken(text string) []string {
	var bad []string
	for _, s := range sentenceBreak.Split(text, -1) {
		if lockIndexAsFencingToken.MatchString(s) && !denial.MatchString(s) {
			bad = append(bad, strings.Join(strings.Fields(s), " "))
		}
	}
	return bad
}

func TestLockIndexCalledFencingToken_rule(t *testing.T) {
	for _, tc := range []struct {
		text string
		bad  bool
	}{
		{"`lock_index`, the fencing token that grows with every new holder.", true},
		{"The current holder, and its LockIndex (the fencing token).", true},
		{"`CONSUL_LOCK_INDEX` is the fencing token to pass on.", true},
		{"Consul's LockIndex of a mutex key. Not a fencing token: it starts again at 1.", false},
		{"lock_index is Consul's LockIndex; it is not a fencing token.", false},
		{"`fencing_token` (the Raft index of the acquisition) and `lock_index` (Consul's counter).", false},
		{"The fencing token only grows.\n\nLockIndex is reported as what it is.", false},
		{"`CONSUL_LOCK_FENCING_TOKEN` (the fencing token, see `examples/fencing`), `CONSUL_LOCK_INDEX` (Consul's LockIndex)", false},
		{"description = \"The holder and its fencing token (the Raft index of its acquisition).\"\n  value = {\n    fencing_token = x\n    lock_index = y", false},
	} {
		if got := len(lockIndexCalledFencingToken(tc.text)) > 0; got != tc.bad {
			t.Errorf("%q: flagged %v, want %v", tc.text, got, tc.bad)
		}
	}
}

// TestDocs_lockIndexIsNeverCalledAFencingToken reads every page under docs/
// and every example, README and template a user reads.
func TestDocs_lockIndexIsNeverCalledAFencingToken(t *testing.T) {
	chdirRoot(t)
	var files []string
	for _, dir := range []string{"docs", "examples", "templates"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch filepath.Ext(path) {
			case ".md", ".tmpl", ".tf", ".hcl", ".sh", ".service", ".timer", ".example", ".yml":
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	files = append(files, "README.md")
	if len(files) < 20 {
		t.Fatalf("found only %d files to check; is the test running from the repository root?", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range lockIndexCalledFencingToken(string(b)) {
			t.Errorf("%s calls LockIndex a fencing token (it is not: use fencing_token / CONSUL_LOCK_FENCING_TOKEN): %q", f, s)
		}
	}
}

// TestDocs_everyGuideIsLinkedFromTheIndex: a guide nobody can reach from the
// provider's front page is a guide nobody reads.
func TestDocs_everyGuideIsLinkedFromTheIndex(t *testing.T) {
	chdirRoot(t)
	index, err := os.ReadFile("docs/index.md")
	if err != nil {
		t.Fatal(err)
	}
	guides, err := filepath.Glob("docs/guides/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(guides) == 0 {
		t.Fatal("no guides under docs/guides")
	}
	for _, g := range guides {
		if !strings.Contains(string(index), "guides/"+filepath.Base(g)) {
			t.Errorf("docs/index.md does not link %s; add it to templates/index.md.tmpl", g)
		}
	}
	for _, m := range regexp.MustCompile(`\]\((guides/[^)#]+\.md)`).FindAllStringSubmatch(string(index), -1) {
		if _, err := os.Stat(filepath.Join("docs", m[1])); err != nil {
			t.Errorf("docs/index.md links %s, which does not exist: add templates/%s.tmpl and run make generate", m[1], m[1])
		}
	}
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if p != "docs/index.md" {
			t.Errorf("%s is outside the directories the Terraform Registry renders; make it a guide (templates/guides/)", p)
		}
	}
}

// chdirRoot runs the test from the repository root, where the paths above
// are relative to.
func chdirRoot(t *testing.T) {
	t.Chdir("../..")
	if _, err := os.Stat("go.mod"); err != nil {
		t.Fatalf("not the repository root: %v", err)
	}
}
