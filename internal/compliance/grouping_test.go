package compliance

import (
	"fmt"
	"strings"
	"testing"
)

func TestGroupKeys_capsTheNumberOfWatches(t *testing.T) {
	var keys []string
	for i := range 1000 {
		keys = append(keys, fmt.Sprintf("svc%03d/job/.lock", i))
	}
	keys = append(keys, "a/x/.lock", "a/y/.lock", "top")
	got := GroupKeys(keys, 8)
	prefixes := map[string]bool{}
	for k, p := range got {
		if !strings.HasPrefix(k, p) {
			t.Errorf("key %s assigned to prefix %q that does not cover it", k, p)
		}
		prefixes[p] = true
	}
	if len(got) != len(keys) || len(prefixes) > 8 {
		t.Errorf("%d keys in %d groups", len(got), len(prefixes))
	}
	// A key alone in its first segment is watched by itself, not with
	// whatever else lives beside it.
	if g := GroupKeys([]string{"a/x/.lock", "a/y/.lock", "b/z"}, 2); g["a/x/.lock"] != "a/" || g["b/z"] != "b/z" {
		t.Errorf("grouping by first segment: %v", g)
	}
	if g := GroupKeys([]string{"t/1/locks/a/.lock", "t/1/locks/b/.lock"}, 8); g["t/1/locks/a/.lock"] != "t/1/locks/" {
		t.Errorf("grouping as deep as the cap allows: %v", g)
	}
}

func TestGroupKeys_neverWatchesTheWholeStore(t *testing.T) {
	tests := []struct {
		name string
		keys []string
		max  int
		want map[string]string
	}{
		{"unrelated prefixes are not merged, even over the cap", []string{"a/x/.lock", "b/y/.lock"}, 1,
			map[string]string{"a/x/.lock": "a/x/.lock", "b/y/.lock": "b/y/.lock"}},
		{"a first segment is narrowed to what its keys share", []string{"svc/a/.lock", "svc/b/.lock", "other/job/.lock"}, 8,
			map[string]string{"svc/a/.lock": "svc/", "svc/b/.lock": "svc/", "other/job/.lock": "other/job/.lock"}},
		{"over the cap, groups merge by their common prefix, never wider", []string{"svc1/.lock", "svc2/.lock", "svc3/.lock", "top"}, 2,
			map[string]string{"svc1/.lock": "svc", "svc2/.lock": "svc", "svc3/.lock": "svc", "top": "top"}},
		{"merged groups are split again while the cap allows", []string{"sa1/.lock", "sa2/.lock", "sb1/.lock", "sb2/.lock", "t/x"}, 3,
			map[string]string{"sa1/.lock": "sa", "sa2/.lock": "sa", "sb1/.lock": "sb", "sb2/.lock": "sb", "t/x": "t/x"}},
		{"a key that is another's prefix covers it", []string{"job", "job-a/.lock", "job-b/.lock", "x/1"}, 2,
			map[string]string{"job": "job", "job-a/.lock": "job", "job-b/.lock": "job", "x/1": "x/1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := GroupKeys(tt.keys, tt.max)
			for k, p := range tt.want {
				if got[k] != p {
					t.Errorf("%s watched by %q, want %q (all: %v)", k, got[k], p, got)
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %v", got)
			}
		})
	}
	// However many keys, no watch is on "" and none misses its key.
	var keys []string
	for i := range 3000 {
		keys = append(keys, fmt.Sprintf("%c%d/job/.lock", 'a'+i%26, i))
	}
	got := GroupKeys(keys, 8)
	for k, p := range got {
		if p == "" || !strings.HasPrefix(k, p) {
			t.Fatalf("%s watched by %q", k, p)
		}
	}
	if n, over := WatchCapExceeded(got, 8); n != 26 || !over {
		t.Errorf("%d watches (over the cap: %v) for keys beginning with 26 letters", n, over)
	}
}
