package lockmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Lock is a declared lock (consullock_lock): a mutex when Limit is 1, a
// semaphore when it is more.
type Lock struct {
	Name string
	// Prefix is the KV prefix the lock lives under, as `consul lock <prefix>`.
	Prefix string
	// Key is the KV key holders acquire; "" means DefaultLockKey(Prefix).
	Key string
	// Limit is the number of concurrent holders; 0 means 1.
	Limit int
	// SessionDefaults names the SessionProfile holders use; "" for none.
	SessionDefaults string
	// MaxHold is how long one holder may keep the lock; 0 means no limit.
	MaxHold     time.Duration
	Description string
	// AlwaysHeld declares that the lock must always have a holder (a
	// singleton daemon run with `consullock run`): status exits 1 and the
	// ConsulLockUnheld alert fires when it has none.
	AlwaysHeld bool
	// RunOnce, for a mutex, makes `consullock run` run its command once per
	// run ID (package ledger); nil for none.
	RunOnce *ledger.RunOnce
	// HolderService, when set, puts each holder into Consul's catalog and
	// DNS while it holds (package holdersvc); nil for none.
	HolderService *holdersvc.Service
	// Waiters is how waiters take the lock at a release: WaitersRace,
	// WaitersQueue or WaitersHandOff (waiters.go); "" means WaitersRace and is kept as "",
	// so that locks declared before waiters existed compare equal.
	Waiters string
}

// DefaultLockKey is the key api.Lock, api.Semaphore and `consul lock` use
// under prefix: <prefix>/.lock.
func DefaultLockKey(prefix string) string {
	return prefix + "/" + LockKeyName
}

// Normalize returns l with Prefix and Key normalised by NormalizeKeyPath
// (fields "prefix" and "key"), an empty Key replaced by DefaultLockKey and a
// zero Limit replaced by 1. On error it reports every path problem and returns
// l unchanged.
func (l Lock) Normalize() (Lock, error) {
	var errs validation.FieldErrors
	n := l
	var err error
	if n.Prefix, err = NormalizeKeyPath("prefix", l.Prefix); err != nil {
		errs = append(errs, validation.AsFieldErrors(err)...)
	}
	if l.Key != "" {
		if n.Key, err = NormalizeKeyPath("key", l.Key); err != nil {
			errs = append(errs, validation.AsFieldErrors(err)...)
		}
	}
	if len(errs) > 0 {
		return l, errs
	}
	if n.Key == "" {
		n.Key = DefaultLockKey(n.Prefix)
	}
	if n.Limit == 0 {
		n.Limit = 1
	}
	if l.RunOnce != nil {
		r := l.RunOnce.WithDefaults()
		n.RunOnce = &r
	}
	return n, nil
}

// limitAllowed is the Allowed text of a limit error.
var limitAllowed = fmt.Sprintf("an integer from 1 to %d (1 is a mutex, more is a semaphore)", MaxSemaphoreLimit)

// maxHoldAllowed is the Allowed text of a max_hold error.
var maxHoldAllowed = fmt.Sprintf("0s (no limit) or a duration of at least %s", MinMaxHold)

// Validate reports every problem of l as FieldErrors, with field names as
// users write them. It judges l as Normalize would make it: paths may carry
// surrounding slashes, an empty key means <prefix>/.lock and limit 0 means 1.
func (l Lock) Validate() error {
	var errs validation.FieldErrors
	add := func(err error) {
		errs = append(errs, validation.AsFieldErrors(err)...)
	}
	add(ValidateName("name", l.Name))
	n, err := l.Normalize()
	add(err)
	if l.Limit < 0 || l.Limit > MaxSemaphoreLimit {
		errs = append(errs, &validation.FieldError{Field: "limit", Value: strconv.Itoa(l.Limit), Allowed: limitAllowed})
	}
	if err == nil {
		switch {
		case n.IsSemaphore() && n.Key != DefaultLockKey(n.Prefix):
			errs = append(errs, &validation.FieldError{Field: "key", Value: l.Key, Allowed: fmt.Sprintf(
				"for a semaphore (limit > 1) the key must be %q, where api.Semaphore and `consul lock -n` keep the holder table; leave key unset",
				DefaultLockKey(n.Prefix))})
		case n.Key != n.Prefix && !strings.HasPrefix(n.Key, n.Prefix+"/"):
			errs = append(errs, &validation.FieldError{Field: "key", Value: l.Key, Allowed: fmt.Sprintf(
				"a key equal to the prefix %q or under it (%q), so that ACL rules written for the prefix cover it",
				n.Prefix, n.Prefix+"/")})
		default:
			errs = append(errs, n.validateKeyOutsideQueue()...)
		}
	}
	if l.SessionDefaults != "" {
		add(ValidateName("session_defaults", l.SessionDefaults))
	}
	if l.MaxHold < 0 || (l.MaxHold > 0 && l.MaxHold < MinMaxHold) {
		errs = append(errs, &validation.FieldError{Field: "max_hold", Value: FormatDuration(l.MaxHold), Allowed: maxHoldAllowed})
	}
	if l.RunOnce != nil {
		add(l.RunOnce.Validate())
		if l.Limit > 1 {
			errs = append(errs, &validation.FieldError{Field: ledger.FieldRunOnce, Value: fmt.Sprintf("run_once with limit %d", l.Limit), Allowed: "run_once only on a mutex (limit 1): " +
				"once per run means one holder, and a semaphore admits several at a time"})
		}
	}
	if l.HolderService != nil {
		add(l.HolderService.Validate())
	}
	errs = append(errs, l.validateWaiters()...)
	if c := utf8.RuneCountInString(l.Description); c > MaxDescriptionLength || !utf8.ValidString(l.Description) {
		errs = append(errs, &validation.FieldError{Field: "description", Value: validation.Truncate(l.Description, 40), Allowed: fmt.Sprintf(
			"valid UTF-8 text of at most %d characters (got %d)", MaxDescriptionLength, c)})
	}
	return errs.Err()
}

// ProfileWarnings returns advice about using profile p for lock l.
func (l Lock) ProfileWarnings(p Profile) []validation.Warning {
	if l.IsSemaphore() && p.Behavior != BehaviorDelete {
		return []validation.Warning{{
			Field:   "session_defaults",
			Summary: "Semaphore with a release session profile",
			Detail: fmt.Sprintf("Semaphore contenders hold a key <prefix>/<session> each; with behavior %q those keys stay behind "+
				"when a session ends. api.Semaphore and `consul lock -n` use behavior \"delete\".", p.Behavior),
		}}
	}
	return nil
}

// IsSemaphore reports whether l allows more than one holder.
func (l Lock) IsSemaphore() bool {
	return l.Limit > 1
}

// Flags is the KV Flags value of l's key: LockFlagValue for a mutex,
// SemaphoreFlagValue for a semaphore.
func (l Lock) Flags() uint64 {
	if l.IsSemaphore() {
		return SemaphoreFlagValue
	}
	return LockFlagValue
}

// FormatFlags renders KV flags as fixed-width hex ("0x2ddccbc058a50c18"):
// they exceed what JSON numbers (and Terraform numbers read as float64) hold
// exactly.
func FormatFlags(f uint64) string {
	return fmt.Sprintf("0x%016x", f)
}

// ParseFlags parses FormatFlags output ("0x" and 1 to 16 hex digits).
func ParseFlags(s string) (uint64, error) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok || h == "" || len(h) > 16 {
		return 0, fmt.Errorf("flags %q: want \"0x\" followed by 1 to 16 hex digits", s)
	}
	f, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("flags %q: want \"0x\" followed by 1 to 16 hex digits", s)
	}
	return f, nil
}

// SemaphoreState is the value of a semaphore's <prefix>/.lock key, exactly
// the JSON of api.Semaphore's semaphoreLock (consul api/semaphore.go).
type SemaphoreState struct {
	Limit   int             `json:"Limit"`
	Holders map[string]bool `json:"Holders"`
}

// NewSemaphoreValue is the value of a fresh semaphore key:
// {"Limit":N,"Holders":{}}. Holders must be an object, not null:
// api.Semaphore adds itself to the map it decodes.
func NewSemaphoreValue(limit int) []byte {
	b, _ := EncodeSemaphoreState(SemaphoreState{Limit: limit})
	return b
}

// EncodeSemaphoreState renders s as api.Semaphore does, with a nil Holders
// written as {} and holders in sorted order.
func EncodeSemaphoreState(s SemaphoreState) ([]byte, error) {
	if s.Holders == nil {
		s.Holders = map[string]bool{}
	}
	return json.Marshal(s)
}

// DecodeSemaphoreState parses a semaphore key's value. An empty value is a
// fresh semaphore with Limit 0 (api.Semaphore then uses its own limit); a
// non-empty one must be a JSON object with a positive Limit.
func DecodeSemaphoreState(b []byte) (SemaphoreState, error) {
	s := SemaphoreState{Holders: map[string]bool{}}
	if len(bytes.TrimSpace(b)) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return SemaphoreState{}, fmt.Errorf("semaphore value is not api.Semaphore's {\"Limit\":N,\"Holders\":{...}}: %w", err)
	}
	if s.Limit < 1 {
		return SemaphoreState{}, fmt.Errorf("semaphore value has Limit %d; api.Semaphore writes a positive limit", s.Limit)
	}
	if s.Holders == nil {
		s.Holders = map[string]bool{}
	}
	return s, nil
}

// ErrIncompatibleKey marks the errors of CheckCompatible.
var ErrIncompatibleKey = errors.New("existing key is not compatible with the declared lock")

// CheckCompatible decides whether an existing KV key with the given flags and
// value can be adopted as lock l without breaking api.Lock, api.Semaphore or
// `consul lock`: a mutex needs exactly LockFlagValue (api.Lock refuses any
// other, including 0); a semaphore needs SemaphoreFlagValue and a value that
// is empty or a semaphore table with the same limit. The error wraps
// ErrIncompatibleKey and says what was found in words.
func CheckCompatible(l Lock, flags uint64, value []byte) error {
	key := l.Key
	if key == "" {
		key = DefaultLockKey(strings.Trim(l.Prefix, "/"))
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: key %q %s", ErrIncompatibleKey, key, fmt.Sprintf(format, args...))
	}
	want := l.Flags()
	if flags != want {
		what := "a plain KV key"
		switch flags {
		case LockFlagValue:
			what = "an api.Lock mutex"
		case SemaphoreFlagValue:
			what = "an api.Semaphore semaphore"
		}
		kind := "a mutex (limit 1)"
		if l.IsSemaphore() {
			kind = fmt.Sprintf("a semaphore (limit %d)", l.Limit)
		}
		return fail("has flags %s (%s) but the lock is declared as %s, which needs flags %s; "+
			"Consul's lock clients refuse a key with other flags", FormatFlags(flags), what, kind, FormatFlags(want))
	}
	if !l.IsSemaphore() {
		return nil
	}
	s, err := DecodeSemaphoreState(value)
	if err != nil {
		return fail("has semaphore flags but its value cannot be used: %v", err)
	}
	if len(bytes.TrimSpace(value)) > 0 && s.Limit != l.Limit {
		return fail("is a semaphore with limit %d but the lock declares limit %d; "+
			"api.Semaphore refuses to run with a different limit", s.Limit, l.Limit)
	}
	return nil
}

// HolderValue is the value the runner writes into the key it acquires, so
// that operators and the data source can see who holds a lock.
type HolderValue struct {
	Node    string    `json:"node"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Lock    string    `json:"lock,omitempty"`
	// LockDelay is the holder session's lock-delay (a Go duration
	// string), written at acquisition (a mutex) or admission (a
	// semaphore) for waiters, which then need not (or cannot) read its
	// session (WithLockDelay, DeadHolderLockDelay).
	LockDelay string `json:"lock_delay,omitempty"`
}

// RunOncePeriodWarnings advises on a run_once period shorter than the
// session profile's worst_case_gap: a holder that vanishes is replaced only
// after up to worst_case_gap, so a crashed run may not be taken over within
// its own period.
func RunOncePeriodWarnings(r ledger.RunOnce, p Profile) []validation.Warning {
	gap := p.WorstCaseGap()
	if r.Period <= 0 || r.Period >= gap {
		return nil
	}
	return []validation.Warning{{
		Field:   ledger.FieldRunOncePeriod,
		Summary: "Run Period Shorter Than Worst-Case Gap",
		Detail: fmt.Sprintf("run_once.period is %s but the session profile %q has worst_case_gap %s: when a holder "+
			"vanishes mid-run, the next node may acquire only after up to %s, so a crashed run may not be "+
			"taken over within its period. Use a longer period or a profile with a shorter ttl and lock_delay.",
			FormatDuration(r.Period), p.Name, FormatDuration(gap), FormatDuration(gap)),
	}}
}
