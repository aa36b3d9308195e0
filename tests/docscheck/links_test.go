package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	relativeLink = regexp.MustCompile(`\]\(([^)#:\s]*\.md)?(#[^)\s]*)?\)`)
	heading      = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	fencedCode   = regexp.MustCompile("(?ms)^```.*?^```")
	slugDrop     = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	// tfplugindocs marks nested attribute blocks with <a id="nestedatt--x">.
	explicitID = regexp.MustCompile(`<a id="([^"]+)"`)
)

// anchor is the id GitHub and the Terraform Registry give a heading:
// lower case, punctuation dropped, spaces turned into hyphens.
func anchor(h string) string {
	return strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
}

// anchors lists the ids of the headings in a page (code blocks left out)
// and its explicit <a id> anchors.
func anchors(text string) map[string]bool {
	ids := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fencedCode.ReplaceAllString(text, ""), -1) {
		ids[anchor(m[1])] = true
	}
	for _, m := range explicitID.FindAllStringSubmatch(text, -1) {
		ids[m[1]] = true
	}
	return ids
}

func TestAnchor_rule(t *testing.T) {
	for h, want := range map[string]string{
		"Waiters in a queue (`waiters = \"queue\"`)":                                     "waiters-in-a-queue-waiters--queue",
		"The endpoint in Consul's catalog":                                               "the-endpoint-in-consuls-catalog",
		"Finding the replicas: consul_sd":                                                "finding-the-replicas-consul_sd",
		"The stop rule: a holder cut off from Consul stops before anyone else can start": "the-stop-rule-a-holder-cut-off-from-consul-stops-before-anyone-else-can-start",
	} {
		if got := anchor(h); got != want {
			t.Errorf("anchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestDocs_relativeLinksResolve: a link from one published page to another
// (or to a heading of its own) names a page that exists and a heading it has.
// Guides are split and moved; a link left pointing at the old place is a
// dead end for the reader.
func TestDocs_relativeLinksResolve(t *testing.T) {
	chdirRoot(t)
	for _, page := range publishedPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := fencedCode.ReplaceAllString(string(b), "")
		for _, m := range relativeLink.FindAllStringSubmatch(text, -1) {
			target, frag := page, strings.TrimPrefix(m[2], "#")
			if m[1] != "" {
				target = filepath.Join(filepath.Dir(page), m[1])
			}
			tb, err := os.ReadFile(target)
			if err != nil {
				t.Errorf("%s links %s, which does not exist", page, m[0])
				continue
			}
			if frag != "" && !anchors(string(tb))[frag] {
				t.Errorf("%s links %s: %s has no heading with that anchor", page, m[0], target)
			}
		}
	}
}
