package compliance

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
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

// randomKeys returns n distinct lock keys of one of three shapes: numbered
// like the benchmarks ("b/run/17/.lock"), named by team and job, or random
// strings over a small alphabet (deep common prefixes, keys that begin
// others).
func randomKeys(r *rand.Rand, n int) []string {
	seen := map[string]bool{}
	var keys []string
	shape := r.IntN(3)
	for len(keys) < n {
		var k string
		switch shape {
		case 0:
			k = fmt.Sprintf("b/run/%d/.lock", r.IntN(4*n))
		case 1:
			k = fmt.Sprintf("team-%d/svc-%s/job-%d/.lock", r.IntN(5), strings.Repeat("x", r.IntN(3)), r.IntN(3*n))
		default:
			b := make([]byte, 1+r.IntN(8))
			for i := range b {
				b[i] = "ab/1é"[r.IntN(5)]
			}
			k = "k" + string(b)
			if !utf8.ValidString(k) {
				continue
			}
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// checkGrouping checks what every grouping must be: each key in exactly one
// watch whose prefix covers it, no watch's prefix covering a key of
// another, each watch's keys a contiguous run of the sorted keys, and no
// more watches than maxGroups (the keys here begin with fewer characters).
// It returns the watches' sizes.
func checkGrouping(t *testing.T, keys []string, maxGroups int, got map[string]string) map[string]int {
	t.Helper()
	if len(got) != len(keys) {
		t.Fatalf("%d keys assigned, want %d", len(got), len(keys))
	}
	sizes := map[string]int{}
	for _, k := range keys {
		p, ok := got[k]
		if !ok || !strings.HasPrefix(k, p) || p == "" {
			t.Fatalf("key %q watched by %q", k, p)
		}
		sizes[p]++
	}
	for _, k := range keys {
		for p := range sizes {
			if p != got[k] && strings.HasPrefix(k, p) {
				t.Fatalf("key %q of watch %q is also under watch %q", k, got[k], p)
			}
		}
	}
	sorted := slices.Sorted(slices.Values(keys))
	runs := map[string]bool{}
	for i, k := range sorted {
		if i > 0 && got[sorted[i-1]] != got[k] {
			if runs[got[k]] {
				t.Fatalf("watch %q's keys are not contiguous (at %q)", got[k], k)
			}
		}
		runs[got[k]] = true
	}
	if len(sizes) > maxGroups {
		t.Fatalf("%d watches, cap %d", len(sizes), maxGroups)
	}
	return sizes
}

func TestGroupKeys_randomKeySetsAreSplitDisjointlyWithinTheCap(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 1))
	for range 60 {
		n := 1 + r.IntN(20000)
		maxGroups := []int{1, 8, 16, 64, 128, 256}[r.IntN(6)]
		keys := randomKeys(r, n)
		sizes := checkGrouping(t, keys, maxGroups, GroupKeys(keys, maxGroups))
		largest := 0
		for _, s := range sizes {
			largest = max(largest, s)
		}
		t.Logf("n=%d max=%d: %d watches, largest %d (ideal %d)", n, maxGroups, len(sizes), largest, (n+maxGroups-1)/maxGroups)
	}
}

// movedWatches returns how many watches of before lost or gained a key other
// than k in after, and how many watches of after did: adding or removing
// k alone moves no key (0, 0), or splits one watch into its parts (1, n)
// or merges them back (n, 1).
func movedWatches(before, after map[string]string, k string) (int, int) {
	movedFrom, movedTo := map[string]bool{}, map[string]bool{}
	for key, p := range before {
		if q, ok := after[key]; key != k && ok && q != p {
			movedFrom[p], movedTo[q] = true, true
		}
	}
	return len(movedFrom), len(movedTo)
}

func TestGroupKeys_aKeyAddedOrRemovedMovesOnlyItsWatch(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 2))
	hist, nonLocal := map[[2]int]int{}, 0
	const trials = 400
	for range trials {
		n := 1 + r.IntN(5000)
		maxGroups := []int{8, 16, 64, 128}[r.IntN(4)]
		keys := randomKeys(r, n+1)
		k := keys[n]
		before, after := GroupKeys(keys[:n], maxGroups), GroupKeys(keys, maxGroups)
		from, to := movedWatches(before, after, k)
		hist[[2]int{min(from, to), max(from, to)}]++
		if min(from, to) > 1 {
			nonLocal++ // the cap made the largest-first splits go elsewhere
		}
	}
	// The watches passed over for want of room under the cap depend on
	// the sizes of all of them: a key can tip one of those choices.
	t.Logf("watches moved (fewer, more side) -> trials: %v", hist)
	if nonLocal > trials/20 {
		t.Errorf("%d of %d single-key changes moved keys between several watches: %v", nonLocal, trials, hist)
	}
}

func TestGroupKeys_splitsLargeWatchesTowardsTheIdealSize(t *testing.T) {
	// The benchmarks' keys: 10,000 numbered locks under one prefix. Ten
	// digits follow the common prefix, so a cap below 10 cannot split it.
	var keys []string
	for i := range 10000 {
		keys = append(keys, fmt.Sprintf("b/run/%d/.lock", i))
	}
	for _, tc := range []struct{ max, watches, largest int }{{8, 1, 10000}, {16, 10, 1111}, {128, 100, 111}} {
		sizes := checkGrouping(t, keys, tc.max, GroupKeys(keys, tc.max))
		largest := 0
		for _, s := range sizes {
			largest = max(largest, s)
		}
		if len(sizes) != tc.watches || largest != tc.largest {
			t.Errorf("cap %d: %d watches, largest %d keys; want %d, %d", tc.max, len(sizes), largest, tc.watches, tc.largest)
		}
	}
	// Keys of one length over four letters (none begins another): the
	// largest watch stays within one split (4 parts) of the ideal size.
	r := rand.New(rand.NewPCG(24, 3))
	for range 30 {
		n, maxGroups := 1000+r.IntN(20000), []int{8, 16, 64, 256}[r.IntN(4)]
		seen := map[string]bool{}
		keys = keys[:0]
		for len(keys) < n {
			b := make([]byte, 10)
			for i := range b {
				b[i] = "abcd"[r.IntN(4)]
			}
			if k := "locks/" + string(b) + "/.lock"; !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		sizes := checkGrouping(t, keys, maxGroups, GroupKeys(keys, maxGroups))
		largest := 0
		for _, s := range sizes {
			largest = max(largest, s)
		}
		ideal := (n + maxGroups - 1) / maxGroups
		if largest > max(MinSplitKeys, 4*ideal) {
			t.Errorf("%d keys, cap %d: largest watch %d keys, ideal %d", n, maxGroups, largest, ideal)
		}
	}
}

func TestGroupKeys_aKeyThatBeginsOthersSharesTheirWatch(t *testing.T) {
	// "job" lists "job-a/.lock" too: watching "job-a/.lock" on its own as
	// well would answer every change there twice.
	keys := []string{"job", "job-a/.lock", "job-b/.lock", "x/1", "x/10/.lock"}
	got := GroupKeys(keys, 8)
	checkGrouping(t, keys, 8, got)
	want := map[string]string{"job": "job", "job-a/.lock": "job", "job-b/.lock": "job", "x/1": "x/", "x/10/.lock": "x/"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestAutoLockWatches_keepsAChangesListingNearLocksPerWatch: the default
// cap grows with the locks from 8 to 128, and numbered keys under one
// prefix (the benchmark's fleet) are then watched in listings of at most
// 111 keys up to 10,000 locks; past that the cap stops growing.
func TestAutoLockWatches_keepsAChangesListingNearLocksPerWatch(t *testing.T) {
	for _, tc := range []struct{ keys, want int }{
		{0, 8}, {1, 8}, {800, 8}, {801, 9}, {1000, 10}, {10000, 100}, {12800, 128}, {1000000, 128},
	} {
		if got := AutoLockWatches(tc.keys); got != tc.want {
			t.Errorf("AutoLockWatches(%d) = %d, want %d", tc.keys, got, tc.want)
		}
	}
	for _, n := range []int{1000, 10000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("fleet/%d/.lock", i)
		}
		assign := GroupKeys(keys, AutoLockWatches(n))
		sizes := map[string]int{}
		for _, p := range assign {
			sizes[p]++
		}
		largest := 0
		for _, s := range sizes {
			largest = max(largest, s)
		}
		if len(sizes) > AutoLockWatches(n) || largest > 111 {
			t.Errorf("%d numbered keys: %d watches, the largest listing %d keys; want at most %d watches of at most 111 keys",
				n, len(sizes), largest, AutoLockWatches(n))
		}
	}
}
