package compliance

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// Mode is how far the controller goes when live Consul differs from the
// declarations.
type Mode string

const (
	// ModeObserve only reports.
	ModeObserve Mode = "observe"
	// ModeRepair fixes configuration drift (lock keys, semaphore limits, ACL
	// rules) and never touches holders.
	ModeRepair Mode = "repair"
	// ModeEnforce repairs and also ends the sessions of holders that violate
	// their declared session profile or hold longer than max_hold.
	ModeEnforce Mode = "enforce"
)

// ParseMode parses the -mode flag.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeObserve, ModeRepair, ModeEnforce:
		return m, nil
	}
	return "", fmt.Errorf("-mode: %q is not allowed; use observe, repair or enforce", s)
}

// LivePolicy is an ACL policy as Consul returned it.
type LivePolicy struct {
	ID, Name    string
	Rules       string
	Description string
	Datacenters []string
	ModifyIndex uint64
	// Hash is the policy's Hash (hex), for the controller to read again
	// only the policies that changed; Decide does not look at it.
	Hash string
}

// State is everything the decision needs: the declarations and what the
// watches last saw. It is a value; Decide does not keep it.
type State struct {
	// Declarations, by name; the profiles as their decoder resolved them.
	Locks    map[string]lockmodel.Lock
	Profiles map[string]lockmodel.Profile
	Policies map[string]record.ACLPolicySpec

	// Keys holds the live lock keys by key, and the keys right under a
	// semaphore's prefix (its contender keys <prefix>/<session>); a
	// declared key that is absent here does not exist, unless it is in
	// UnknownKeys.
	Keys map[string]lockmodel.KeyEntry
	// UnknownKeys are keys whose watch has not answered yet (or failed):
	// their absence from Keys proves nothing.
	UnknownKeys map[string]bool

	// Sessions are the live sessions by ID; nil when the session watch
	// has not answered yet.
	Sessions map[string]lockmodel.ObservedSession

	// LivePolicies are the live ACL policies by ID; nil when the policy
	// watch has not answered (or the token may not read policies).
	LivePolicies map[string]LivePolicy

	// HeldSince is when each hold began, by lockmodel.HoldStart: the
	// "started" the holder wrote, bounded by what this controller saw
	// itself (TrackHolds), or its first sight when the holder wrote none.
	// max_hold is measured from it.
	HeldSince map[LockSession]time.Time

	// ProfileIndex is the ModifyIndex (a Raft index) of each session
	// profile's record, by profile name. A holder session created before
	// it (a lower CreateIndex) predates the profile in force: it is
	// reported, not ended, for breaking it. Raft indexes, not clocks, so
	// clock skew between nodes cannot move the line.
	ProfileIndex map[string]uint64
	// ProfileSwitched is, by lock name, the ModifyIndex of the lock record
	// that made the lock name another profile, when this controller saw
	// that happen; it moves the line the same way.
	ProfileSwitched map[string]uint64

	// Settling are the pending declarations (by SettlingKey: "locks/<name>",
	// "acl-policies/<name>"; see Pending): the apply that wrote them may
	// not have written the live object yet, or this observer has seen the
	// live write before the declaration write. Their objects are neither
	// judged nor acted on until Pending no longer holds.
	Settling map[string]bool

	Now time.Time
}

// Kind names what a decision is about; stable for metrics labels and logs.
type Kind string

// Kinds that change configuration (repair mode and up).
const (
	KindRecreateKey     Kind = "recreate_key"
	KindRestoreFlags    Kind = "restore_flags"
	KindRestoreLimit    Kind = "restore_semaphore_limit"
	KindRestoreACLRules Kind = "restore_acl_rules"
)

// Kinds that end a holder's session (enforce mode only).
const (
	KindEndSession Kind = "end_session"
)

// Kinds that are only ever reported: the controller cannot fix them without
// touching a holder or inventing an object Terraform owns.
const (
	KindHeldKeyDrift       Kind = "held_key_drift"
	KindUnusableKey        Kind = "unusable_key"
	KindACLPolicyMissing   Kind = "acl_policy_missing"
	KindProfileMissing     Kind = "session_defaults_missing"
	KindHolderNonCompliant Kind = "holder_non_compliant"
	// KindHolderPredatesProfile is a holder whose session breaks its
	// profile but was created before the profile last changed: it may
	// finish (max_hold still applies), in every mode.
	KindHolderPredatesProfile Kind = "holder_predates_profile"
)

// IsDrift reports whether the decision is about a declared object itself
// (a lock key or an ACL policy) differing from its declaration, rather than
// about a holder: what Pending applies to, what consullock_drift_total counts.
func (d Decision) IsDrift() bool { return d.Kind.IsDrift() }

// IsDrift reports whether findings of kind k are drift (see Decision.IsDrift).
func (k Kind) IsDrift() bool {
	switch k {
	case KindRecreateKey, KindRestoreFlags, KindRestoreLimit, KindRestoreACLRules,
		KindHeldKeyDrift, KindUnusableKey, KindACLPolicyMissing:
		return true
	}
	return false
}

// ReasonMaxHoldExceeded is the violation reason of a holder that has held
// longer than its lock's max_hold (the others are lockmodel.Violation*).
const ReasonMaxHoldExceeded = "max_hold_exceeded"

// ReasonPredatesProfile accompanies the profile violations of a holder whose
// session was created before its profile last changed.
const ReasonPredatesProfile = "predates_profile_change"

// Decision is one difference between declared and live state, and whether
// the mode allows the controller to act on it.
type Decision struct {
	Kind Kind
	// Act is true when the actuator should carry the decision out; false
	// means report only (observe mode, or a kind that is never acted on).
	Act bool

	Lock    string // lock name, "" for ACL policies
	Policy  string // ACL policy name
	Key     string // the lock key
	Session string // for session decisions

	// Reasons are the violation reasons (end_session, holder_non_compliant).
	Reasons []string
	Detail  string
	// Before and After describe the change, for logs.
	Before, After string

	// What to write: for key kinds the flags and value, with CAS index
	// ModifyIndex (0 = create only); for ACL rules the policy ID and rules.
	Flags       uint64
	Value       []byte
	ModifyIndex uint64
	PolicyID    string
	Rules       string
}

// ID identifies the finding across reconciles, to log and count it once.
func (d Decision) ID() string {
	return strings.Join([]string{string(d.Kind), d.Lock, d.Policy, d.Key, d.Session, strings.Join(d.Reasons, ",")}, "\x00")
}

// Decide compares the declarations with the live state and returns what
// differs, in a stable order (locks by name, then policies by name). It acts
// only on what is declared now: a live object without a declaration is
// never touched, whatever it looks like ("never fight Terraform").
//
//   - A declared lock key that does not exist is recreated create-only (CAS
//     0) with the declared flags, and for a semaphore {"Limit":N,"Holders":{}}.
//   - An existing key with other flags is rewritten by CAS, if no session
//     holds it; a held key is only reported.
//   - A semaphore key whose Limit differs gets its Limit back by CAS,
//     keeping Holders as they are; a value that is not a semaphore table is
//     only reported (rewriting it would drop the holders).
//   - ACL policy rules that do not grant what the declaration grants are put
//     back; a live text that does not parse counts as different, a merely
//     reformatted one does not.
//   - In enforce mode, the session of a holder that violates its lock's
//     session profile or has held longer than max_hold is ended. In the
//     other modes the same finding is reported only.
//   - A holder session created before its profile last changed (by Raft
//     index: State.ProfileIndex, State.ProfileSwitched) is not a violator
//     of the new profile: it is reported as holder_predates_profile and
//     left to finish in every mode; max_hold still ends it.
//
// A lock or policy whose declaration is pending (State.Settling, by
// Pending) is skipped: the provider writes the declaration just before the
// live object, and acting in between would take the apply's write from it.
// Nothing is acted on in observe mode.
func Decide(st State, mode Mode) []Decision {
	var out []Decision
	for _, name := range sortedKeys(st.Locks) {
		out = append(out, DecideLock(st, name, mode)...)
	}
	return FirstEnds(append(out, DecidePolicies(st, mode)...))
}

// DecideLock is Decide's verdict on the one lock name of st.Locks, with
// every holder's end_session (Decide keeps the first of a session's, by
// FirstEnds). It reads only what that lock rests on: its declaration and
// profile, its keys, its holders' sessions and holds, and the settling
// state of its declaration. A controller that keeps each lock's verdict
// decides again only the locks a change touched, and joins the verdicts
// in Decide's order (locks by name, then DecidePolicies) before FirstEnds:
// the same decisions as Decide on the whole state.
func DecideLock(st State, name string, mode Mode) []Decision {
	repair := mode == ModeRepair || mode == ModeEnforce
	enforce := mode == ModeEnforce
	l, err := st.Locks[name].Normalize()
	if err != nil {
		return nil // the decoder validated it; never act on a lock we cannot read
	}
	if st.UnknownKeys[l.Key] || st.Settling[SettlingKey(lockmodel.KindLock, name)] {
		return nil
	}
	live, exists := st.Keys[l.Key]
	if !exists {
		return []Decision{recreateKey(l, repair)}
	}
	out := keyDrift(l, live, repair)
	for _, h := range HolderSessions(l, st.Keys, st.Sessions) {
		out = append(out, judgeHolder(st, l, h, enforce)...)
	}
	return out
}

// DecidePolicies is Decide's verdict on the declared ACL policies, by name.
func DecidePolicies(st State, mode Mode) []Decision {
	if st.LivePolicies == nil {
		return nil
	}
	repair := mode == ModeRepair || mode == ModeEnforce
	var out []Decision
	for _, name := range sortedKeys(st.Policies) {
		if st.Settling[SettlingKey(lockmodel.KindACLPolicy, name)] {
			continue
		}
		if d, ok := policyDrift(st.Policies[name], st.LivePolicies, repair); ok {
			out = append(out, d)
		}
	}
	return out
}

// FirstEnds drops every end_session decision but the first for its
// session: a session holding several locks is ended once, for the first
// of them in ds's order. It filters ds in place.
func FirstEnds(ds []Decision) []Decision {
	var ended map[string]bool
	out := ds[:0]
	for _, d := range ds {
		if d.Kind == KindEndSession {
			if ended[d.Session] {
				continue
			}
			if ended == nil {
				ended = map[string]bool{}
			}
			ended[d.Session] = true
		}
		out = append(out, d)
	}
	return out
}

func recreateKey(l lockmodel.Lock, repair bool) Decision {
	d := Decision{
		Kind: KindRecreateKey, Act: repair, Lock: l.Name, Key: l.Key,
		Detail: fmt.Sprintf("lock key %s of lock %q does not exist", l.Key, l.Name),
		Before: "absent", Flags: l.Flags(), ModifyIndex: 0,
	}
	if l.IsSemaphore() {
		d.Value = lockmodel.NewSemaphoreValue(l.Limit)
	}
	d.After = fmt.Sprintf("flags=%s value=%q", lockmodel.FormatFlags(d.Flags), d.Value)
	return d
}

// keyDrift compares an existing key with its declaration.
func keyDrift(l lockmodel.Lock, live lockmodel.KeyEntry, repair bool) []Decision {
	if live.Flags != l.Flags() {
		d := Decision{
			Kind: KindRestoreFlags, Act: repair, Lock: l.Name, Key: l.Key,
			Detail: fmt.Sprintf("lock key %s of lock %q has flags %s; Consul's lock clients need %s",
				l.Key, l.Name, lockmodel.FormatFlags(live.Flags), lockmodel.FormatFlags(l.Flags())),
			Before: "flags=" + lockmodel.FormatFlags(live.Flags), After: "flags=" + lockmodel.FormatFlags(l.Flags()),
			Flags: l.Flags(), Value: live.Value, ModifyIndex: live.ModifyIndex,
		}
		if live.Session != "" {
			// A plain write would reset LockIndex, the holder's fencing
			// token: leave a held key to its holder and report.
			d.Kind, d.Act = KindHeldKeyDrift, false
			d.Detail += fmt.Sprintf(" and is held by session %s; not rewritten while held", live.Session)
		}
		return []Decision{d}
	}
	if !l.IsSemaphore() || len(strings.TrimSpace(string(live.Value))) == 0 {
		// An empty semaphore value is a fresh semaphore: api.Semaphore
		// writes its limit on first acquire.
		return nil
	}
	s, err := lockmodel.DecodeSemaphoreState(live.Value)
	if err != nil {
		return []Decision{{
			Kind: KindUnusableKey, Lock: l.Name, Key: l.Key,
			Detail: fmt.Sprintf("lock key %s of lock %q: %v; not rewritten, that would drop its holders", l.Key, l.Name, err),
			Before: fmt.Sprintf("value=%q", live.Value),
		}}
	}
	if s.Limit == l.Limit {
		return nil
	}
	want := s
	want.Limit = l.Limit
	value, _ := lockmodel.EncodeSemaphoreState(want)
	return []Decision{{
		Kind: KindRestoreLimit, Act: repair, Lock: l.Name, Key: l.Key,
		Detail: fmt.Sprintf("semaphore %s of lock %q has Limit %d; declared %d", l.Key, l.Name, s.Limit, l.Limit),
		Before: fmt.Sprintf("Limit=%d", s.Limit), After: fmt.Sprintf("Limit=%d", l.Limit),
		Flags: live.Flags, Value: value, ModifyIndex: live.ModifyIndex,
	}}
}

// judgeHolder checks one holder against the lock's profile and max_hold.
// Profile violations of a session created before the profile last changed
// are reported apart (holder_predates_profile) and never acted on; the
// rest is acted on in enforce mode.
func judgeHolder(st State, l lockmodel.Lock, s lockmodel.ObservedSession, enforce bool) []Decision {
	var out []Decision
	var reasons, details, exempt, exemptDetails []string
	if l.SessionDefaults != "" {
		if p, ok := st.Profiles[l.SessionDefaults]; !ok {
			out = append(out, Decision{
				Kind: KindProfileMissing, Lock: l.Name, Key: l.Key, Session: s.ID,
				Detail: fmt.Sprintf("lock %q names session_defaults %q, which is not declared; holder session %s is not checked against a profile",
					l.Name, l.SessionDefaults, s.ID),
			})
		} else {
			changed := max(st.ProfileIndex[p.Name], st.ProfileSwitched[l.Name])
			predates := s.CreateIndex != 0 && s.CreateIndex < changed
			for _, v := range p.Violations(s) {
				rs, ds := &reasons, &details
				if predates {
					rs, ds = &exempt, &exemptDetails
				}
				if !slices.Contains(*rs, v.Reason) {
					*rs = append(*rs, v.Reason)
				}
				*ds = append(*ds, v.Detail)
			}
			if len(exempt) > 0 {
				out = append(out, Decision{
					Kind: KindHolderPredatesProfile, Lock: l.Name, Key: l.Key, Session: s.ID,
					Reasons: append(exempt, ReasonPredatesProfile),
					Detail: fmt.Sprintf("%s; session %s was created at index %d, before profile %q last changed (index %d): left to finish, not ended",
						strings.Join(exemptDetails, "; "), s.ID, s.CreateIndex, p.Name, changed),
					Before: describeSession(s),
				})
			}
		}
	}
	if l.MaxHold > 0 {
		if since, ok := st.HeldSince[LockSession{Lock: l.Name, Session: s.ID}]; ok {
			if held := st.Now.Sub(since); held > l.MaxHold {
				reasons = append(reasons, ReasonMaxHoldExceeded)
				details = append(details, fmt.Sprintf("session %s has held lock %q for %s (from the start its holder value gives, bounded by what this controller saw, else from its first sight); max_hold is %s",
					s.ID, l.Name, held.Round(time.Second), lockmodel.FormatDuration(l.MaxHold)))
			}
		}
	}
	if len(reasons) == 0 {
		return out
	}
	d := Decision{
		Kind: KindHolderNonCompliant, Lock: l.Name, Key: l.Key, Session: s.ID,
		Reasons: reasons, Detail: strings.Join(details, "; "), Before: describeSession(s),
	}
	if enforce {
		d.Kind, d.Act, d.After = KindEndSession, true, "session destroyed; its keys are under lock-delay"
	}
	return append(out, d)
}

func describeSession(s lockmodel.ObservedSession) string {
	return fmt.Sprintf("session %s (node %s, ttl %s, lock_delay %s, behavior %s, node_checks %v, create_index %d)",
		s.ID, s.Node, lockmodel.FormatDuration(s.TTL), lockmodel.FormatDuration(s.LockDelay), behaviorOf(s), s.NodeChecks, s.CreateIndex)
}

func behaviorOf(s lockmodel.ObservedSession) lockmodel.Behavior {
	if s.Behavior == "" {
		return lockmodel.BehaviorRelease
	}
	return s.Behavior
}

// policyDrift compares a declared policy with its live counterpart (by ID).
func policyDrift(spec record.ACLPolicySpec, live map[string]LivePolicy, repair bool) (Decision, bool) {
	if spec.ID == "" {
		return Decision{}, false // not created yet: the provider is between writes
	}
	lp, ok := live[spec.ID]
	if !ok {
		return Decision{
			Kind: KindACLPolicyMissing, Policy: spec.Name, PolicyID: spec.ID,
			Detail: fmt.Sprintf("ACL policy %q (%s) is declared but does not exist; re-create it with terraform apply", spec.Name, spec.ID),
		}, true
	}
	same, err := aclrules.RulesEquivalent(spec.Rules, lp.Rules)
	if err != nil {
		if _, derr := aclrules.NormalizeRules(spec.Rules); derr != nil {
			return Decision{}, false // a declaration we cannot read is never enforced
		}
		same = false // live text that does not parse is drift
	}
	if same {
		return Decision{}, false
	}
	detail := fmt.Sprintf("ACL policy %q grants other rules than declared", spec.Name)
	if err != nil {
		detail = fmt.Sprintf("ACL policy %q has rules that do not parse (%v)", spec.Name, err)
	}
	return Decision{
		Kind: KindRestoreACLRules, Act: repair, Policy: spec.Name, PolicyID: spec.ID,
		Detail: detail, Before: lp.Rules, After: spec.Rules, Rules: spec.Rules, ModifyIndex: lp.ModifyIndex,
	}, true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
