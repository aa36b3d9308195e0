package lockmodel

import (
	"errors"
	"fmt"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Single-attribute checks for the provider's validators. Each runs
// Lock.Validate on a lock that is valid except for the one field, so the rule
// and its words live in one place (Lock.Validate) and cannot drift apart.

// validLockBase is a lock that passes Validate; the helpers below change one
// field of it.
var validLockBase = Lock{Name: "x", Prefix: "x"}

// ValidateMaxHold checks a lock's max_hold (0 = no limit, else at least
// MinMaxHold) and reports a *FieldError for field.
func ValidateMaxHold(field string, d time.Duration) error {
	l := validLockBase
	l.MaxHold = d
	return onlyField(l.Validate(), "max_hold", field)
}

// ValidateDescription checks a lock description (valid UTF-8, at most
// MaxDescriptionLength characters) and reports a *FieldError for field.
func ValidateDescription(field, s string) error {
	l := validLockBase
	l.Description = s
	return onlyField(l.Validate(), "description", field)
}

// ValidateLimit checks a lock limit (1 to MaxSemaphoreLimit) and reports a
// *FieldError for field.
func ValidateLimit(field string, limit int) error {
	l := validLockBase
	l.Limit = limit
	if limit == 0 {
		// Validate reads 0 as "unset, means 1"; a declared 0 is an error
		// with the same words as any other limit out of range.
		l.Limit = -1
	}
	err := onlyField(l.Validate(), "limit", field)
	var fe *validation.FieldError
	if limit == 0 && errors.As(err, &fe) {
		fe.Value = "0"
	}
	return err
}

// KeyPlacementError reports only the rule that ties key to prefix and limit:
// a semaphore's key must be <prefix>/.lock, a mutex's key must be the prefix
// or under it. It returns nil when prefix or key are not valid paths, since
// their own checks (NormalizeKeyPath) report those.
func (l Lock) KeyPlacementError() error {
	if _, pathErr := l.Normalize(); pathErr != nil {
		return nil //nolint:nilerr // path errors are the path checks' to report
	}
	probe := l
	probe.Name, probe.SessionDefaults, probe.MaxHold, probe.Description = "x", "", 0, ""
	if probe.Limit < 0 || probe.Limit > MaxSemaphoreLimit {
		probe.Limit = 1
	}
	return onlyField(probe.Validate(), "key", "key")
}

// onlyField keeps the field errors of err about from, renamed to field.
func onlyField(err error, from, field string) error {
	var out validation.FieldErrors
	for _, fe := range validation.AsFieldErrors(err) {
		if fe.Field == from {
			c := *fe
			c.Field = field
			out = append(out, &c)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return out.Err()
}

// SemaphoreValueWithLimit returns a semaphore key's value with its Limit set
// to limit and its Holders kept, as api.Semaphore would write it. An empty
// value stays empty: api.Semaphore then starts from its own limit, and there
// are no holders to keep.
func SemaphoreValueWithLimit(value []byte, limit int) ([]byte, error) {
	if err := ValidateLimit("limit", limit); err != nil {
		return nil, err
	}
	s, err := DecodeSemaphoreState(value)
	if err != nil {
		return nil, err
	}
	if s.Limit == 0 {
		return value, nil
	}
	s.Limit = limit
	return EncodeSemaphoreState(s)
}

// LockKindText names a lock's kind for messages: "mutex" or
// "semaphore (limit N)".
func (l Lock) LockKindText() string {
	if l.IsSemaphore() {
		return fmt.Sprintf("semaphore (limit %d)", l.Limit)
	}
	return "mutex"
}
