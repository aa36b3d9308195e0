package compliance

import (
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// DefaultApplyGrace is the default apply grace (the controller's
// -apply-grace, the grace `consullock status` applies): far longer than the
// milliseconds between the provider's declaration write and its live
// write, short enough that a failed apply's object converges soon after.
const DefaultApplyGrace = 5 * time.Second

// ValidateApplyGrace checks an apply grace (field: the flag or setting
// that gives it): 0 is none, else a positive duration.
func ValidateApplyGrace(field string, d time.Duration) error {
	if d < 0 {
		return &validation.FieldError{Field: field, Value: lockmodel.FormatDuration(d),
			Allowed: "use 0 (none) or a positive duration, e.g. " + lockmodel.FormatDuration(DefaultApplyGrace)}
	}
	return nil
}

// Pending is the one rule that tells an apply in progress from drift; the
// controller (its logs, metrics and repairs) and `consullock status` both
// apply it. The provider writes a declaration first and its live object
// right after, so for a moment the two differ, and an observer that reads
// them apart (two watches, or one read after the other) can see either
// write first:
//
//   - the new declaration with the old live object: pending while the
//     declaration changed within the apply grace (changed is when this
//     observer saw it change; zero when it has not seen it change);
//   - the old declaration with the new live object: pending when the
//     declaration read consistently now (current; 0 when it is gone) is
//     not the version the observer judged with (judged): it has not seen
//     the apply's first write yet.
//
// A pending difference is not reported, counted or repaired. One still
// there when neither holds is drift: reported once, counted, and repaired
// in repair mode. Grace bounds how long an apply may take between its two
// writes; out-of-band changes to an object whose declaration did not
// change are drift at once.
func Pending(judged, current uint64, changed, now time.Time, grace time.Duration) bool {
	if current != judged {
		return true
	}
	return !changed.IsZero() && now.Before(changed.Add(grace))
}

// SettlingKey is the State.Settling key of the declaration kind/name
// (kind lockmodel.KindLock or lockmodel.KindACLPolicy): "<kind>/<name>".
func SettlingKey(kind, name string) string { return kind + "/" + name }

// SettlingKey is the State.Settling key of the declaration d is about.
func (d Decision) SettlingKey() string {
	if d.Lock != "" {
		return SettlingKey(lockmodel.KindLock, d.Lock)
	}
	return SettlingKey(lockmodel.KindACLPolicy, d.Policy)
}
