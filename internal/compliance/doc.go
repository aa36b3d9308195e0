// Package compliance is the pure decision of the consullock controller:
// given the declarations and what was last seen of live Consul (State), it
// says what differs and what the mode allows to be done about it (Decide).
// It also holds the rules the controller and `consullock status` must apply
// alike: when a difference is an apply in progress (Pending), how lock keys
// are grouped into watches (GroupKeys), and how holds are tracked
// (TrackHolds). Nothing here talks to Consul.
//
// # Lock key watches
//
// The cap on lock key watches (AutoLockWatches) grows with the number of
// keys, and stops growing. Why it grows: Consul answers a blocking query
// with every key under its prefix, so the cost of one change is the size of
// its watch's listing (about 18 ms for 10,000 keys, 0.2 ms for 100, measured
// with curl on a dev agent); a cap that grows with the fleet keeps that
// listing near LocksPerWatch keys, and one change costs the same at 10 locks
// as at 10,000. Why it stops: each watch holds one HTTP connection for as
// long as it blocks, and the agent admits http_max_conns_per_client (200 by
// default) connections from one client address, shared with everything else
// on the controller's host: MaxAutoLockWatches leaves room for the
// controller's other watches and writes and for its neighbours.
//
// GroupKeys assigns each lock key to the prefix of the blocking query that
// watches it. Such a query lists every key under its prefix, values
// included, and answers again on every write there, so a prefix must cover
// its locks and as little else as possible, and one change should list few
// keys:
//
//   - keys that share a first path segment share one watch, on the deepest
//     path they all share ("t/1/locks/a/.lock" and "t/1/locks/b/.lock" ->
//     "t/1/locks/"); a key alone in its first segment is watched by itself
//     ("svc/job/.lock" lists that key only, not the semaphore contenders
//     or application keys beside it), unless it is the beginning of
//     other keys ("job" and "job-a/.lock"), which then share its watch;
//   - only when that gives more than maxGroups watches are groups merged,
//     into watches on the longest prefix their keys share: groups are
//     first taken together by their first character and then split again
//     (largest first) as long as the count stays within maxGroups. Groups
//     whose keys begin with different characters share no prefix but ""
//     (the whole KV store) and are never merged: with more distinct first
//     characters than maxGroups there is one watch per first character,
//     more than maxGroups (see WatchCapExceeded);
//   - then, while the count allows, the watch with the most keys (more
//     than MinSplitKeys) is split on its keys' longest common prefix by
//     the character that follows it ("b/1..." and "b/2..." under "b/"),
//     each part watched on its own keys' common prefix; a watch whose
//     parts would take the count over maxGroups is passed over, and one
//     whose common prefix is one of its keys (it covers the rest) cannot
//     be split. One change then lists about len(keys)/maxGroups keys
//     where the characters after the common prefixes allow: 10,000 keys
//     numbered in decimal under one prefix make 100 watches of at most
//     111 keys under a cap of 128, 10 of at most 1,111 under a cap of 16,
//     and stay one watch under a cap of 8 (ten digits, ten parts).
//
// Each watch's keys are a contiguous run of the sorted keys, and its
// prefix covers no key of another watch: keys with a given prefix are
// contiguous in sorted order, a first-segment prefix covers only keys of
// that segment, a key that begins the keys beside it is merged with them,
// and merged or split parts are runs that differ in the character after
// their parent's common prefix, each watched on a prefix that includes
// that character. A key added or removed changes only its own watch, or
// splits it into its parts (or merges them back), unless it changes which
// watch is the largest that fits under the cap (2 of 400 single-key
// changes in TestGroupKeys_aKeyAddedOrRemovedMovesOnlyItsWatch).
//
// The number of watches therefore does not grow with the number of locks.
package compliance
