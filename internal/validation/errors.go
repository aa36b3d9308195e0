package validation

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// FieldError says which input is wrong, what it was, and what is allowed.
// The provider maps Field to an attribute path; the controller and the runner
// print Error() as is.
type FieldError struct {
	Field   string // attribute name as users write it, e.g. "lock_delay"
	Value   string // the offending value as given
	Allowed string // what would be accepted, e.g. "a duration from 0s to 60s"
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %q is not allowed; %s", e.Field, e.Value, e.Allowed)
}

// FieldErrors collects every problem of one declaration so that users fix
// them in one round.
type FieldErrors []*FieldError

func (es FieldErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Err returns nil when there are no errors, so callers can `return errs.Err()`.
func (es FieldErrors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// AsFieldErrors unpacks err into its field errors (nil when err has none).
func AsFieldErrors(err error) FieldErrors {
	var many FieldErrors
	if errors.As(err, &many) {
		return many
	}
	var one *FieldError
	if errors.As(err, &one) {
		return FieldErrors{one}
	}
	return nil
}

// Warning is advice that does not block a plan (e.g. lock_delay = 0).
type Warning struct {
	Field   string
	Summary string
	Detail  string
}

// Truncate shortens s to about n bytes for an error message, at a rune
// boundary when s is valid UTF-8.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
