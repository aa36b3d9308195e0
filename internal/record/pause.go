package record

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Pause records.
//
// A paused lock has one record at PauseKey(registry, lock name), kind
// "pause" (PauseSpec). Its presence is the pause: a runner
// that reads it at start does not run the command, a waiter that sees it
// appear leaves, and a holder already running its command is left to
// finish. The record is not part of the lock's declaration so that
// `consullock pause` and `resume` (an incident, no apply) and the
// provider (consullock_lock.paused) write the same, small key, and a
// worker token needs only key read on it.

// RecordKindPause is the kind of a pause record.
const RecordKindPause = "pause"

// MaxPauseReasonLength is the longest pause (and release) reason, in
// characters: a sentence or a ticket link, shown in logs and status.
const MaxPauseReasonLength = 512

// PauseKey is the KV key of lock's pause record:
// <registryPrefix>/pauses/<lock>.
func PauseKey(registryPrefix, lock string) string {
	return lockmodel.RegistryKey(registryPrefix, lockmodel.KindPauses, lock)
}

// Pause is a decoded pause record: who paused the lock, when and why.
type Pause struct {
	Lock   string
	Reason string
	By     string    // who: PausedByTerraform or the CLI's -by (default user@host)
	At     time.Time // when, UTC
	// Accessor is the accessor ID of the token that wrote the pause (never
	// its secret); "" when unknown (ACLs off, or written by Terraform).
	Accessor string
}

// PausedByTerraform is the By of a pause that consullock_lock.paused
// wrote: the next apply writes it again, whoever deletes it.
const PausedByTerraform = "terraform"

// PauseSpec is the spec of a "pause" record.
type PauseSpec struct {
	Lock   string `json:"lock"`
	Reason string `json:"reason"`
	By     string `json:"by"`
	At     string `json:"at"` // RFC 3339, UTC
	// Accessor is the writing token's accessor ID; absent when unknown.
	Accessor string `json:"accessor,omitempty"`
}

// ValidateReason checks a pause or release reason given as field (the
// attribute or flag name, e.g. "paused" or "-reason"): not blank, valid
// UTF-8 of at most MaxPauseReasonLength characters, one line.
func ValidateReason(field, reason string) error {
	shown := reason
	if utf8.RuneCountInString(shown) > 40 {
		shown = string([]rune(shown)[:40]) + "..."
	}
	n := utf8.RuneCountInString(reason)
	switch {
	case strings.TrimSpace(reason) == "":
		return &validation.FieldError{Field: field, Value: reason, Allowed: "a reason is required: say why, e.g. \"INC-1234: downstream outage\""}
	case !utf8.ValidString(reason) || n > MaxPauseReasonLength:
		return &validation.FieldError{Field: field, Value: shown, Allowed: fmt.Sprintf("valid UTF-8 text of at most %d characters (got %d)", MaxPauseReasonLength, n)}
	case strings.ContainsAny(reason, "\r\n"):
		return &validation.FieldError{Field: field, Value: shown, Allowed: "one line of text (no line breaks)"}
	}
	return nil
}

// Validate checks p as a reader and a writer do.
func (p Pause) Validate() error {
	var errs validation.FieldErrors
	for _, err := range []error{lockmodel.ValidateName("lock", p.Lock), ValidateReason("reason", p.Reason)} {
		var fe *validation.FieldError
		if errors.As(err, &fe) {
			errs = append(errs, fe)
		}
	}
	if p.By == "" || utf8.RuneCountInString(p.By) > 256 {
		errs = append(errs, &validation.FieldError{Field: "by", Value: p.By, Allowed: "who paused the lock, 1 to 256 characters"})
	}
	if p.Accessor != "" && !IsUUID(p.Accessor) {
		errs = append(errs, &validation.FieldError{Field: "accessor", Value: validation.Truncate(p.Accessor, 40), Allowed: "a token accessor ID (a UUID), or absent"})
	}
	if p.At.IsZero() {
		errs = append(errs, &validation.FieldError{Field: "at", Value: "", Allowed: "the time of the pause"})
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// EncodePauseRecord validates p and encodes its record.
func EncodePauseRecord(p Pause) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, recordError(RecordKindPause, p.Lock, validation.AsFieldErrors(err))
	}
	return encodeRecord(RecordKindPause, p.Lock, PauseSpec{
		Lock: p.Lock, Reason: p.Reason, By: p.By, At: p.At.UTC().Format(time.RFC3339), Accessor: p.Accessor,
	})
}

// DecodePauseRecord parses and validates a pause record.
func DecodePauseRecord(data []byte) (Pause, error) {
	var s PauseSpec
	if err := decodeRecord(data, RecordKindPause, &s, func() string { return s.Lock }); err != nil {
		return Pause{}, err
	}
	at, err := time.Parse(time.RFC3339, s.At)
	if err != nil {
		return Pause{}, recordError(RecordKindPause, s.Lock, validation.FieldErrors{{Field: "at", Value: s.At, Allowed: "an RFC 3339 time"}})
	}
	p := Pause{Lock: s.Lock, Reason: s.Reason, By: s.By, At: at.UTC(), Accessor: s.Accessor}
	if err := p.Validate(); err != nil {
		return Pause{}, recordError(RecordKindPause, s.Lock, validation.AsFieldErrors(err))
	}
	return p, nil
}

// PausedFor is how long p has been in effect at now (0 for a pause
// dated in the future by clock skew).
func (p Pause) PausedFor(now time.Time) time.Duration {
	return max(now.Sub(p.At), 0)
}

// ExitPaused is `consullock run`'s default exit code when the lock is
// paused: 0, a skipped run is not a failure (a cron or systemd timer stays
// green); -exit-code-if-paused sets another.
const ExitPaused = 0
