package controller

import (
	"context"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// cache is what the watches saw, each field written by the one watch
// named beside it (under Controller.mu, except the fields a watch owns
// alone); the reconciler only reads it. A watch that changes it marks the
// reconciler's view dirty in the same critical section.
type cache struct {
	// Registry watch (pollRegistry, setDeclarations).
	locks        map[string]lockmodel.Lock
	profiles     map[string]lockmodel.Profile
	policies     map[string]record.ACLPolicySpec
	declSeen     map[string]declVersion // compliance.SettlingKey -> version last listed
	badRecords   map[string]uint64      // key -> ModifyIndex already reported
	registrySync bool
	// profileSwitched is, by lock name, the record ModifyIndex at which
	// this controller saw the lock start naming another profile.
	profileSwitched map[string]uint64
	// records are the registry's records as last listed, by key: a record
	// whose ModifyIndex did not move is not decoded again. Owned by the
	// registry watch (no lock), as is registryListed, its last answer.
	records        map[string]listedRecord
	registryListed []listed

	// Registry watch (regrouping in setDeclarations); each group's live
	// and synced are written by that group's lock key watch (pollGroup).
	groups   map[string]*group // by watch prefix
	keyGroup map[string]string // lock key -> watch prefix

	// Session watch (pollSessions).
	sessions map[string]lockmodel.ObservedSession

	// ACL policy watch (pollPolicies); livePolicies also by the reads of
	// declared policies (fetchPolicies), from the watch and from reconcile.
	policyHashes map[string]string // live policy ID -> Hash from the list
	livePolicies map[string]compliance.LivePolicy
	policySync   bool
}

func newCache() cache {
	return cache{
		locks:           map[string]lockmodel.Lock{},
		profiles:        map[string]lockmodel.Profile{},
		policies:        map[string]record.ACLPolicySpec{},
		declSeen:        map[string]declVersion{},
		badRecords:      map[string]uint64{},
		profileSwitched: map[string]uint64{},
		records:         map[string]listedRecord{},
		groups:          map[string]*group{},
		keyGroup:        map[string]string{},
	}
}

// declVersion is the version of a declaration record the registry watch
// last listed, and when this controller saw it change (zero for records
// that already existed when it started).
type declVersion struct {
	index   uint64
	changed time.Time
}

// group is one blocking query on a prefix covering a set of lock keys.
type group struct {
	prefix string
	keys   map[string]bool
	live   map[string]lockmodel.KeyEntry
	// listed is the watch's last answer, every key in it (owned by the
	// watch's goroutine): the next answer is walked alongside it.
	listed []listed
	synced bool
	gen    uint64
	cancel context.CancelFunc
}

// lockStatus feeds the per-lock metrics.
type lockStatus struct {
	held         bool
	holders      map[string]bool
	lockIndex    uint64
	seen         bool
	lastHandover time.Time
	unheldSince  time.Time
	handovers    uint64
}

// reconState is what the reconciler derives from the cache, tracks across
// reconciles and reports (under Controller.mu). The view is kept
// incrementally: the watches mark it dirty, the snapshot derives it.
type reconState struct {
	heldSince map[compliance.LockSession]compliance.Sighting
	// holdStart is when each hold began (lockmodel.HoldStart), as of the
	// last snapshot; lastLook is when each lock's state was last known.
	holdStart  map[compliance.LockSession]time.Time
	lastLook   map[string]time.Time
	lockStatus map[string]*lockStatus // per-lock metrics
	reported   map[string]string      // Decision.ID of findings already logged -> SettlingKey of their object
	declReads  map[string]declRead    // confirmDrift's consistent reads, for the acts of the same reconcile (reconcile loop only)
	retries    map[string]retry       // Decision.ID of failed repairs -> their back-off (actOn; reconcile loop only)
	// view keeps each lock's verdict and what it rests on (incremental.go).
	view view
}

func newReconState() reconState {
	return reconState{
		heldSince:  map[compliance.LockSession]compliance.Sighting{},
		holdStart:  map[compliance.LockSession]time.Time{},
		lastLook:   map[string]time.Time{},
		lockStatus: map[string]*lockStatus{},
		reported:   map[string]string{},
		view:       newView(),
	}
}
