package compliance

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// DefaultMaxLockWatches is the default cap on lock key watches (the
// controller's -max-lock-watches, the key lists `consullock status` reads
// at most).
const DefaultMaxLockWatches = 8

// GroupKeys assigns each lock key to the prefix of the blocking query that
// watches it. Such a query lists every key under its prefix, values
// included, and answers again on every write there, so a prefix must cover
// its locks and as little else as possible:
//
//   - keys that share a first path segment share one watch, on the deepest
//     path they all share ("t/1/locks/a/.lock" and "t/1/locks/b/.lock" ->
//     "t/1/locks/"); a key alone in its first segment is watched by itself
//     ("svc/job/.lock" lists that key only, not the semaphore contenders
//     or application keys beside it);
//   - only when that gives more than maxGroups watches are groups merged,
//     into watches on the longest prefix their keys share: groups are
//     first taken together by their first character and then split again
//     (largest first) as long as the count stays within maxGroups. Groups
//     whose keys begin with different characters share no prefix but ""
//     (the whole KV store) and are never merged: with more distinct first
//     characters than maxGroups there is one watch per first character,
//     more than maxGroups (see WatchCapExceeded).
//
// The number of watches therefore does not grow with the number of locks.
func GroupKeys(keys []string, maxGroups int) map[string]string {
	maxGroups = max(maxGroups, 1)
	bySegment := map[string][]string{}
	for _, k := range keys {
		seg := k
		if i := strings.IndexByte(k, '/'); i >= 0 {
			seg = k[:i+1]
		}
		bySegment[seg] = append(bySegment[seg], k)
	}
	base := make(map[string][]string, len(bySegment)) // watch prefix -> keys
	for _, ks := range bySegment {
		p := ks[0]
		if len(ks) > 1 {
			p = commonPrefix(ks)
			p = p[:strings.LastIndexByte(p, '/')+1] // they share the first segment
		}
		base[p] = append(base[p], ks...)
	}
	var watches [][]string // each: the sorted base prefixes one watch covers
	if len(base) > maxGroups {
		watches = mergeGroups(sortedKeys(base), maxGroups)
	} else {
		for _, p := range sortedKeys(base) {
			watches = append(watches, []string{p})
		}
	}
	out := make(map[string]string, len(keys))
	for _, members := range watches {
		prefix := commonPrefix(members)
		for _, m := range members {
			for _, k := range base[m] {
				out[k] = prefix
			}
		}
	}
	return out
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
