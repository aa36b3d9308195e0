package lockmodel

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// SessionProfile is a named set of session settings as declared
// (consullock_session_defaults): the shape the provider's schema maps, with
// unset fields at their zero values. Validate and Warnings judge it; Resolve
// applies its defaults and gives the Profile that lock holders create their
// Consul sessions from and the controller checks live sessions against.
type SessionProfile struct {
	Name string
	// TTL is the session TTL. Zero is not "no TTL" here: Resolve turns it
	// into DefaultSessionTTL and Validate refuses it.
	TTL time.Duration
	// LockDelay is how long Consul keeps a key unacquirable after the holder's
	// session is invalidated. Zero means no delay and is never defaulted.
	LockDelay time.Duration
	// Behavior is what happens to held keys when the session is invalidated;
	// "" means BehaviorRelease, as in Consul.
	Behavior Behavior
	// NodeChecks are the node health checks the session is bound to. nil means
	// the default [DefaultNodeCheck]; a non-nil empty slice means none.
	NodeChecks []string
	// ServiceChecks are service health checks the session is bound to.
	ServiceChecks []ServiceCheck
	// RenewEvery is how often a holder renews the session; 0 means
	// DefaultRenewEvery(TTL).
	RenewEvery time.Duration
}

// ServiceCheck names a service health check for a session (Consul's
// ServiceCheck{ID, Namespace} in api/session.go).
type ServiceCheck struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace,omitempty"`
}

// DefaultRenewEvery is the renewal interval used when none is declared: a
// third of the TTL, so two renewals may fail before the TTL lapses.
func DefaultRenewEvery(ttl time.Duration) time.Duration {
	return ttl / 3
}

// DefaultNodeChecks returns a fresh copy of the default node checks.
func DefaultNodeChecks() []string {
	return []string{DefaultNodeCheck}
}

// Profile is a SessionProfile with its defaults applied (Resolve): what
// sessions are created from (lockproto.CreateSession), and what the stop
// rule (NewStopRule), the worst-case gap, the holder check and the
// compliance check (Violations) read. The decoders hand it out
// (record.DecodeSessionProfileRecord, lockproto.ReadDeclaration), so a
// declaration read from the registry is resolved once, where it is read;
// the type, not a convention, says that the defaults were applied.
//
// Make one with Resolve: a Profile literal applies no defaults. The
// embedded SessionProfile keeps field access (p.TTL) and the declared
// type's methods (Validate, Warnings).
type Profile struct{ SessionProfile }

// Resolve applies p's defaults: TTL 0 becomes DefaultSessionTTL, Behavior
// "" becomes BehaviorRelease, nil NodeChecks becomes [DefaultNodeCheck] and
// RenewEvery 0 becomes DefaultRenewEvery(TTL). LockDelay is left alone: zero
// is a meaningful choice there, so its default (DefaultLockDelay) belongs to
// the caller's schema. Slices are copied, never shared with p, and empty
// ServiceChecks become nil. Resolve does not validate: call Validate on the
// declaration first (a TTL of 0 is refused there, not replaced).
func (p SessionProfile) Resolve() Profile {
	if p.TTL == 0 {
		p.TTL = DefaultSessionTTL
	}
	if p.Behavior == "" {
		p.Behavior = BehaviorRelease
	}
	if p.NodeChecks == nil {
		p.NodeChecks = DefaultNodeChecks()
	} else {
		p.NodeChecks = slices.Clone(p.NodeChecks)
	}
	if len(p.ServiceChecks) == 0 {
		p.ServiceChecks = nil
	} else {
		p.ServiceChecks = slices.Clone(p.ServiceChecks)
	}
	if p.RenewEvery == 0 {
		p.RenewEvery = DefaultRenewEvery(p.TTL)
	}
	return Profile{p}
}

// ttlAllowed is the Allowed text of a ttl error.
var ttlAllowed = fmt.Sprintf("a duration from %s to %s (Consul's session TTL range)", MinSessionTTL, MaxSessionTTL)

// lockDelayAllowed is the Allowed text of a lock_delay error.
var lockDelayAllowed = fmt.Sprintf("a duration from 0s to %s; Consul silently clamps longer lock delays to %s", MaxLockDelay, MaxLockDelay)

// behaviorAllowed is the Allowed text of a behavior error.
var behaviorAllowed = `one of "release" or "delete"`

// ValidateTTL checks a session TTL. Zero is refused: Consul reads it as "no
// TTL", and a session without one outlives a crashed holder indefinitely.
func ValidateTTL(field string, ttl time.Duration) error {
	if ttl < MinSessionTTL || ttl > MaxSessionTTL {
		return &validation.FieldError{Field: field, Value: FormatDuration(ttl), Allowed: ttlAllowed}
	}
	return nil
}

// ValidateLockDelay checks a session lock-delay.
func ValidateLockDelay(field string, d time.Duration) error {
	if d < 0 || d > MaxLockDelay {
		return &validation.FieldError{Field: field, Value: FormatDuration(d), Allowed: lockDelayAllowed}
	}
	return nil
}

// ValidateBehavior checks a session behavior ("" is accepted as release).
func ValidateBehavior(field string, b Behavior) error {
	if b == "" || b.Valid() {
		return nil
	}
	return &validation.FieldError{Field: field, Value: string(b), Allowed: behaviorAllowed}
}

// ValidateRenewEvery checks a renewal interval against the TTL it renews:
// above zero and below ttl/2, so one renewal may fail before the session
// lapses. Zero is accepted and means DefaultRenewEvery(ttl).
func ValidateRenewEvery(field string, renew, ttl time.Duration) error {
	if renew == 0 || (renew > 0 && renew < ttl/2) {
		return nil
	}
	return &validation.FieldError{Field: field, Value: FormatDuration(renew), Allowed: fmt.Sprintf(
		"a duration above 0s and below ttl/2 (%s for ttl %s); leave it unset for ttl/3 (%s)",
		FormatDuration(ttl/2), FormatDuration(ttl), FormatDuration(DefaultRenewEvery(ttl)))}
}

// Validate reports every problem of p as FieldErrors, with field names as
// users write them (name, ttl, lock_delay, behavior, node_checks,
// service_checks, renew_every). The zero values Resolve fills are
// accepted, except TTL: a zero TTL means "no TTL" to Consul, so it is refused
// rather than silently replaced.
func (p SessionProfile) Validate() error {
	var errs validation.FieldErrors
	add := func(err error) {
		errs = append(errs, validation.AsFieldErrors(err)...)
	}
	add(ValidateName("name", p.Name))
	add(ValidateTTL("ttl", p.TTL))
	add(ValidateLockDelay("lock_delay", p.LockDelay))
	add(ValidateBehavior("behavior", p.Behavior))
	add(ValidateRenewEvery("renew_every", p.RenewEvery, p.TTL))
	seen := map[string]bool{}
	for _, c := range p.NodeChecks {
		if why := checkIDProblem(c); why != "" {
			errs = append(errs, &validation.FieldError{Field: "node_checks", Value: c, Allowed: why})
		} else if seen[c] {
			errs = append(errs, &validation.FieldError{Field: "node_checks", Value: c, Allowed: "each check ID at most once"})
		}
		seen[c] = true
	}
	seenSvc := map[ServiceCheck]bool{}
	for _, c := range p.ServiceChecks {
		if why := checkIDProblem(c.ID); why != "" {
			errs = append(errs, &validation.FieldError{Field: "service_checks", Value: c.ID, Allowed: why})
		} else if seenSvc[c] {
			errs = append(errs, &validation.FieldError{Field: "service_checks", Value: c.ID, Allowed: "each check ID and namespace at most once"})
		}
		if !utf8.ValidString(c.Namespace) || strings.ContainsFunc(c.Namespace, badCheckRune) {
			errs = append(errs, &validation.FieldError{Field: "service_checks", Value: c.Namespace, Allowed: "a namespace of valid UTF-8 without spaces or control characters"})
		}
		seenSvc[c] = true
	}
	return errs.Err()
}

func badCheckRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r)
}

func checkIDProblem(id string) string {
	if id == "" {
		return "a non-empty check ID"
	}
	if !utf8.ValidString(id) || strings.ContainsFunc(id, badCheckRune) {
		return "a check ID of valid UTF-8 without spaces or control characters"
	}
	return ""
}

// Warnings returns advice about choices that are valid but risky.
func (p SessionProfile) Warnings() []validation.Warning {
	var ws []validation.Warning
	if p.LockDelay == 0 {
		ws = append(ws, validation.Warning{
			Field:   "lock_delay",
			Summary: "lock_delay of 0s",
			Detail: "Without a lock delay the next holder may acquire the moment Consul invalidates a session. " +
				"That is only safe for idempotent work: a holder whose session was invalidated may still be running " +
				"when the next one acquires. Check the fencing token (CONSUL_LOCK_FENCING_TOKEN) where the work writes, or keep a lock delay.",
		})
	}
	if p.NodeChecks != nil && len(p.NodeChecks) == 0 {
		ttl := p.TTL
		if ttl == 0 {
			ttl = DefaultSessionTTL
		}
		ws = append(ws, validation.Warning{
			Field:   "node_checks",
			Summary: "Session not bound to node health",
			Detail: fmt.Sprintf("With node_checks empty the lock survives node failure until the TTL lapses, "+
				"up to 2 x ttl (%s) before Consul invalidates the session.", FormatDuration(SessionTTLMultiplier*ttl)),
		})
	}
	return ws
}

// WorstCaseGap is the window after a holder crashes in which nobody runs the
// job, and also the window in which a holder whose session was wrongly
// invalidated may still be running: Consul invalidates an unrenewed session
// after about 2 x TTL, then keeps its keys unacquirable for the lock-delay
// (clamped to MaxLockDelay as Consul does).
func (p Profile) WorstCaseGap() time.Duration {
	return WorstCaseGap(p.TTL, p.LockDelay)
}

// WorstCaseGap is Profile.WorstCaseGap of an explicit TTL and lock-delay
// (the provider's worst_case_gap function, a plan whose profile is still
// partly unknown): 2 x ttl + min(lockDelay, MaxLockDelay).
func WorstCaseGap(ttl, lockDelay time.Duration) time.Duration {
	return SessionTTLMultiplier*ttl + min(lockDelay, MaxLockDelay)
}

// FormatDuration is the canonical text of a duration in plans, state and
// records: Go's time.Duration.String, e.g. "45s", "1m30s", "0s".
func FormatDuration(d time.Duration) string {
	return d.String()
}

// ShortDuration is d as a user writes it: FormatDuration without trailing
// zero minutes and seconds ("1h", "1h30m", "2m", "90s" for 1m30s stays
// "1m30s"; "0s"). It parses back to d. The provider puts it in state read
// back from a record (an import), so that the usual spelling in the
// configuration plans no change.
func ShortDuration(d time.Duration) string {
	s := FormatDuration(d)
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ConsulDuration is the text to send in a session create request. It is
// always explicit ("0s", "15s"): the Go api omits a zero LockDelay and the
// server then applies its 15s default, so "0s" must be written out.
func ConsulDuration(d time.Duration) string {
	return d.String()
}

// ParseConsulTTL parses a session TTL as Consul returns it ("15s"); "" means
// the session has no TTL and yields 0.
func ParseConsulTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("session TTL %q from Consul is not a duration: %w", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("session TTL %q from Consul is negative", s)
	}
	return d, nil
}

// ObservedSession is a live Consul session as the controller sees it.
type ObservedSession struct {
	ID, Name, Node string
	TTL            time.Duration // 0 when the session has no TTL
	LockDelay      time.Duration
	Behavior       Behavior // "" is read as BehaviorRelease
	NodeChecks     []string
	ServiceChecks  []string // service check IDs
	CreateIndex    uint64
}

// Violation reasons, stable for metrics labels and logs.
const (
	ViolationTTLTooLong          = "ttl_too_long"
	ViolationLockDelayTooShort   = "lock_delay_too_short"
	ViolationBehaviorMismatch    = "behavior_mismatch"
	ViolationNodeCheckMissing    = "node_check_missing"
	ViolationServiceCheckMissing = "service_check_missing"
)

// Violation is one way a live session is weaker than its declared profile.
type Violation struct {
	Reason string // one of the Violation* constants
	Detail string // a sentence for logs and reports
}

// Violations compares a live session with the profile and lists where the
// session gives weaker guarantees: a longer (or no) TTL, a shorter
// lock-delay, another behavior, a declared check it is not bound to.
// Stricter settings than declared are not violations.
func (p Profile) Violations(s ObservedSession) []Violation {
	var vs []Violation
	switch {
	case s.TTL == 0:
		vs = append(vs, Violation{ViolationTTLTooLong, fmt.Sprintf(
			"session %s has no TTL; profile %q declares ttl %s", s.ID, p.Name, FormatDuration(p.TTL))})
	case s.TTL > p.TTL:
		vs = append(vs, Violation{ViolationTTLTooLong, fmt.Sprintf(
			"session %s has ttl %s; profile %q declares at most %s", s.ID, FormatDuration(s.TTL), p.Name, FormatDuration(p.TTL))})
	}
	if declared := min(p.LockDelay, MaxLockDelay); s.LockDelay < declared {
		vs = append(vs, Violation{ViolationLockDelayTooShort, fmt.Sprintf(
			"session %s has lock_delay %s; profile %q declares %s", s.ID, FormatDuration(s.LockDelay), p.Name, FormatDuration(declared))})
	}
	got := s.Behavior
	if got == "" {
		got = BehaviorRelease
	}
	if got != p.Behavior {
		vs = append(vs, Violation{ViolationBehaviorMismatch, fmt.Sprintf(
			"session %s has behavior %q; profile %q declares %q", s.ID, got, p.Name, p.Behavior)})
	}
	for _, c := range p.NodeChecks {
		if !slices.Contains(s.NodeChecks, c) {
			vs = append(vs, Violation{ViolationNodeCheckMissing, fmt.Sprintf(
				"session %s is not bound to node check %q declared by profile %q", s.ID, c, p.Name)})
		}
	}
	for _, c := range p.ServiceChecks {
		if !slices.Contains(s.ServiceChecks, c.ID) {
			vs = append(vs, Violation{ViolationServiceCheckMissing, fmt.Sprintf(
				"session %s is not bound to service check %q declared by profile %q", s.ID, c.ID, p.Name)})
		}
	}
	return vs
}
