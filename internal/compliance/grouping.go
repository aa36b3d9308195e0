package compliance

import (
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// DefaultMaxLockWatches is the most key lists `consullock status` reads,
// and the fewest lock key watches AutoLockWatches chooses.
const DefaultMaxLockWatches = 8

// LocksPerWatch and MaxAutoLockWatches shape the controller's default cap
// on lock key watches (-max-lock-watches 0): see AutoLockWatches.
const (
	LocksPerWatch      = 100
	MaxAutoLockWatches = 128
)

// AutoLockWatches is the cap on lock key watches for keys lock keys when
// the controller is not given one: about one watch per LocksPerWatch keys,
// from DefaultMaxLockWatches to MaxAutoLockWatches.
//
// Why it grows and why it stops: the package doc, "Lock key watches".
func AutoLockWatches(keys int) int {
	return min(max((keys+LocksPerWatch-1)/LocksPerWatch, DefaultMaxLockWatches), MaxAutoLockWatches)
}

// MinSplitKeys is the fewest keys a watch covers before GroupKeys splits it
// to spread the keys over more watches: a listing that small is cheap next
// to the blocking query another watch holds open.
const MinSplitKeys = 128

// GroupKeys assigns each lock key to the prefix of the blocking query that
// watches it: at most maxGroups prefixes where the keys' first characters
// allow (else one per first character, see WatchCapExceeded), each
// covering a contiguous run of the sorted keys and no key of another
// watch. A key added or removed changes only its own watch, or splits or
// merges it. How the watches are formed and split: the package doc, "Lock
// key watches".
func GroupKeys(keys []string, maxGroups int) map[string]string {
	maxGroups = max(maxGroups, 1)
	sorted := slices.Clone(keys)
	sort.Strings(sorted)
	sorted = slices.Compact(sorted)
	base := baseWatches(sorted, maxGroups)
	watches := splitLargest(sorted, base, maxGroups)
	out := make(map[string]string, len(sorted))
	for _, w := range watches {
		for _, k := range sorted[w.lo:w.hi] {
			out[k] = w.prefix
		}
	}
	return out
}

// watch is one blocking query's prefix and the keys it covers:
// sorted[lo:hi] of the sorted keys.
type watch struct {
	prefix string
	lo, hi int
}

// baseWatches groups sorted, distinct keys by first path segment, merges a
// group whose prefix covers its neighbour's keys with it, and merges the
// groups down to maxGroups by common prefix when there are more; see
// GroupKeys.
func baseWatches(sorted []string, maxGroups int) []watch {
	var stack []watch
	for i := 0; i < len(sorted); {
		seg := firstSegment(sorted[i])
		j := i + 1
		for j < len(sorted) && firstSegment(sorted[j]) == seg {
			j++
		}
		w := watch{prefix: sorted[i], lo: i, hi: j}
		if j-i > 1 {
			p := commonPrefix([]string{sorted[i], sorted[j-1]})
			w.prefix = p[:strings.LastIndexByte(p, '/')+1] // they share the first segment
		}
		i = j
		stack = append(stack, w)
		// Keys with a given prefix are contiguous in sorted order: a
		// prefix covers a key outside its watch only if it covers the
		// nearest key of the watch beside it.
		for len(stack) > 1 {
			a, b := stack[len(stack)-2], stack[len(stack)-1]
			if !strings.HasPrefix(sorted[b.lo], a.prefix) && !strings.HasPrefix(sorted[a.hi-1], b.prefix) {
				break
			}
			stack = append(stack[:len(stack)-2], watch{prefix: commonPrefix([]string{a.prefix, b.prefix}), lo: a.lo, hi: b.hi})
		}
	}
	if len(stack) <= maxGroups {
		return stack
	}
	// The prefixes of watches that cover no key of each other are in the
	// order of their keys.
	byPrefix := make(map[string]watch, len(stack))
	prefixes := make([]string, 0, len(stack))
	for _, w := range stack {
		byPrefix[w.prefix] = w
		prefixes = append(prefixes, w.prefix)
	}
	var out []watch
	for _, members := range mergeGroups(prefixes, maxGroups) {
		out = append(out, watch{prefix: commonPrefix(members), lo: byPrefix[members[0]].lo, hi: byPrefix[members[len(members)-1]].hi})
	}
	return out
}

// splitLargest splits the watch with the most keys (more than
// MinSplitKeys) into its parts, the first in key order among equals,
// again and again while the parts fit within maxGroups; a watch whose
// parts do not fit, or that has none, is passed over. See GroupKeys.
func splitLargest(sorted []string, watches []watch, maxGroups int) []watch {
	stuck := map[int]bool{} // lo of the watches passed over
	for {
		best := -1
		for i, w := range watches {
			if n := w.hi - w.lo; n > MinSplitKeys && !stuck[w.lo] && (best < 0 || n > watches[best].hi-watches[best].lo) {
				best = i
			}
		}
		if best < 0 {
			return watches
		}
		parts := splitParts(sorted, watches[best])
		if len(parts) < 2 || len(watches)-1+len(parts) > maxGroups {
			stuck[watches[best].lo] = true
			continue
		}
		watches = slices.Replace(watches, best, best+1, parts...)
	}
}

// splitParts divides w's keys by the character that follows their common
// prefix; each part is watched on its own keys' common prefix. It returns
// nil when one of the keys is the common prefix (it covers the others).
func splitParts(sorted []string, w watch) []watch {
	first, last := sorted[w.lo], sorted[w.hi-1]
	common := commonPrefix([]string{first, last}) // sorted: what the first and last share, all share
	if first == common {
		return nil
	}
	at := len(common)
	var parts []watch
	for i := w.lo; i < w.hi; {
		_, size := utf8.DecodeRuneInString(sorted[i][at:])
		next := sorted[i][:at+size]
		j := i + 1
		for j < w.hi && strings.HasPrefix(sorted[j], next) {
			j++
		}
		parts = append(parts, watch{prefix: commonPrefix([]string{sorted[i], sorted[j-1]}), lo: i, hi: j})
		i = j
	}
	return parts
}

func firstSegment(k string) string {
	if i := strings.IndexByte(k, '/'); i >= 0 {
		return k[:i+1]
	}
	return k
}

// mergeGroups partitions sorted, distinct prefixes into at most maxGroups
// runs with a non-empty common prefix each, splitting the coarsest such
// partition (by first character) while the count allows; see GroupKeys.
func mergeGroups(prefixes []string, maxGroups int) [][]string {
	out := splitAt(prefixes, 0)
	for {
		split := false
		// Split the largest run first: it covers the most besides its locks.
		order := make([]int, len(out))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return len(out[order[a]]) > len(out[order[b]]) })
		for _, i := range order {
			run := out[i]
			if len(run) < 2 {
				continue
			}
			at := len(commonPrefix(run))
			if len(run[0]) == at {
				continue // one member is the common prefix itself and covers the rest
			}
			parts := splitAt(run, at)
			if len(out)-1+len(parts) > maxGroups {
				continue
			}
			out = append(out[:i], append(parts, out[i+1:]...)...)
			split = true
			break
		}
		if !split {
			return out
		}
	}
}

// splitAt groups sorted prefixes (each longer than at) by their byte at at.
func splitAt(sorted []string, at int) [][]string {
	var out [][]string
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j][at] == sorted[i][at] {
			j++
		}
		out = append(out, sorted[i:j])
		i = j
	}
	return out
}

// WatchCapExceeded reports, for a grouping by GroupKeys, how many watches it
// opens and whether that is more than maxGroups (lock keys beginning with
// more distinct characters than maxGroups).
func WatchCapExceeded(assign map[string]string, maxGroups int) (int, bool) {
	prefixes := map[string]bool{}
	for _, p := range assign {
		prefixes[p] = true
	}
	return len(prefixes), len(prefixes) > max(maxGroups, 1)
}

func commonPrefix(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	p := ss[0]
	for _, s := range ss[1:] {
		for !strings.HasPrefix(s, p) {
			p = p[:len(p)-1]
		}
	}
	for !utf8.ValidString(p) { // never cut a character in two
		p = p[:len(p)-1]
	}
	return p
}
