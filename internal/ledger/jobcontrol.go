package ledger

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// Job control of a run-once lock: a runtime deadline (max_runtime), retries
// that wait (retry_after, retry_backoff: the run's NotBefore in the ledger)
// and the tail of each attempt's stderr kept in the ledger (-keep-output).
//
// Retries that wait: after a retried outcome (failed, lost, crashed,
// timed_out, released) of attempt n, the run's NotBefore is the outcome's
// time plus RetryAfter x RetryBackoff^(n-1), at most MaxRetryWait (for a
// released attempt, from the release's time: Run.NotBeforeUnder). No
// holder starts attempt n+1 before it (Begin answers BeginWait); a waiter
// sleeps until it without a session. NotBefore is on the clock of the
// holder (or operator) that recorded the outcome and is compared on the
// next holder's: a holder whose clock is k ahead starts up to k early (as
// HoldStart, keep clocks by NTP).
//
// max_runtime and max_hold: max_runtime stops the command (SIGTERM at the
// deadline counted from the command's start, SIGKILL after -grace) and the
// attempt counts as "timed_out"; max_hold is the lock's longest hold,
// counted from the acquisition, reported by the controller (or ended in
// enforce mode by destroying the session, which the runner sees as a lost
// lock). A max_runtime + -grace below max_hold makes the runner stop the
// job before the controller would.

// Field names of the job-control attributes and flags.
const (
	FieldRunOnceMaxRuntime   = "run_once.max_runtime"
	FieldRunOnceRetryAfter   = "run_once.retry_after"
	FieldRunOnceRetryBackoff = "run_once.retry_backoff"
	FlagMaxRuntime           = "-max-runtime"
	FlagKeepOutput           = "-keep-output"
)

// Job-control limits and defaults.
const (
	// MinMaxRuntime is the shortest max_runtime.
	MinMaxRuntime = time.Second
	// MaxMaxRuntime is the longest max_runtime (as the longest period).
	MaxMaxRuntime = MaxRunPeriod
	// MaxRetryAfter is the longest retry_after, and MaxRetryWait the cap of
	// every wait between two attempts, retry_backoff included.
	MaxRetryAfter = 24 * time.Hour
	MaxRetryWait  = 24 * time.Hour
	// DefaultRetryBackoff doubles the wait after each retried attempt (as
	// a Kubernetes Job's back-off); 1 keeps it at retry_after.
	DefaultRetryBackoff = 2.0
	// MaxRetryBackoff is the largest retry_backoff.
	MaxRetryBackoff = 10.0

	// MaxKeepOutput is the largest -keep-output, in bytes; the largest a
	// lock allows is lower when keep x max_attempts attempts would not fit
	// the ledger (KeepOutputBudget).
	MaxKeepOutput = 64 * 1024
	// DefaultKeepOutput is off: stderr may carry secrets, and the ledger is
	// read by every worker token and by status.
	DefaultKeepOutput = 0

	// Upper bounds of a ledger record's parts other than kept output, in
	// encoded bytes: an attempt (a 256-byte node name and a 512-byte loss
	// reason, each escaped to at most twice its size as runners write them,
	// without control characters; session, token, two times, exit code,
	// outcome, keys), a run (a 128-byte run ID, outcome, not_before, keys),
	// the full list of pruned runs and the record's envelope.
	ledgerAttemptOverhead = 2048
	ledgerRunOverhead     = 512
	ledgerPrunedBytes     = MaxPrunedRuns * (MaxRunIDLength + 40)
	ledgerEnvelope        = 1024
)

var (
	maxRuntimeAllowed   = fmt.Sprintf("a duration from %s to %s, or unset for no deadline", MinMaxRuntime, MaxMaxRuntime.String())
	retryAfterAllowed   = fmt.Sprintf("a duration from 0s (retry at once) to %s", MaxRetryAfter.String())
	retryBackoffAllowed = fmt.Sprintf("a factor from 1 (the same wait each time) to %g", MaxRetryBackoff)
)

// validateJobControl reports the problems of r's max_runtime, retry_after
// and retry_backoff (0 is the default).
func (r RunOnce) validateJobControl() validation.FieldErrors {
	var errs validation.FieldErrors
	if err := ValidateMaxRuntime(FieldRunOnceMaxRuntime, r.MaxRuntime); err != nil {
		errs = append(errs, validation.AsFieldErrors(err)...)
	}
	if r.RetryAfter < 0 || r.RetryAfter > MaxRetryAfter {
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceRetryAfter, Value: r.RetryAfter.String(), Allowed: retryAfterAllowed})
	}
	if b := r.RetryBackoff; b != 0 && (math.IsNaN(b) || b < 1 || b > MaxRetryBackoff) {
		errs = append(errs, &validation.FieldError{Field: FieldRunOnceRetryBackoff, Value: fmt.Sprint(b), Allowed: retryBackoffAllowed})
	}
	return errs
}

// ValidateMaxRuntime checks a max_runtime (0: none) as a *FieldError for
// field (run_once.max_runtime or -max-runtime).
func ValidateMaxRuntime(field string, d time.Duration) error {
	if d != 0 && (d < MinMaxRuntime || d > MaxMaxRuntime) {
		return &validation.FieldError{Field: field, Value: d.String(), Allowed: maxRuntimeAllowed}
	}
	return nil
}

// ValidateRetryAfter and ValidateRetryBackoff check one attribute, for a
// validator that judges one attribute.
func ValidateRetryAfter(field string, d time.Duration) error {
	return renamed(field, RunOnce{RetryAfter: d}.validateJobControl())
}

func ValidateRetryBackoff(field string, b float64) error {
	if b == 0 {
		return &validation.FieldError{Field: field, Value: "0", Allowed: retryBackoffAllowed}
	}
	return renamed(field, RunOnce{RetryBackoff: b}.validateJobControl())
}

func renamed(field string, errs validation.FieldErrors) error {
	if len(errs) == 0 {
		return nil
	}
	c := *errs[0]
	c.Field = field
	return &c
}

// AttemptPolicy is what Begin and Finish need of run_once: max_attempts
// and the retry wait.
type AttemptPolicy struct {
	MaxAttempts  int
	RetryAfter   time.Duration
	RetryBackoff float64 // 0: DefaultRetryBackoff
	// Backfill: a backfill's runner, which runs a run skipped or replaced
	// under run_once.overlap again (BeginWith).
	Backfill bool
}

// Policy is r's AttemptPolicy, with defaults.
func (r RunOnce) Policy() AttemptPolicy {
	d := r.WithDefaults()
	return AttemptPolicy{MaxAttempts: d.MaxAttempts, RetryAfter: d.RetryAfter, RetryBackoff: d.RetryBackoff}
}

// RetryWait is the wait after the retried outcome of attempt n (from 1):
// RetryAfter x RetryBackoff^(n-1), at most MaxRetryWait; 0 without
// RetryAfter.
func (p AttemptPolicy) RetryWait(n int) time.Duration {
	if p.RetryAfter <= 0 {
		return 0
	}
	b := p.RetryBackoff
	if b < 1 {
		b = DefaultRetryBackoff
	}
	w := float64(p.RetryAfter) * math.Pow(b, float64(max(n-1, 0)))
	if w >= float64(MaxRetryWait) || math.IsInf(w, 0) || math.IsNaN(w) {
		return MaxRetryWait
	}
	return time.Duration(w)
}

// notBefore is the run's NotBefore after attempt n ended with a retried
// outcome at now: zero when there is no wait or no attempt left.
func (p AttemptPolicy) notBefore(n int, now time.Time) time.Time {
	w := p.RetryWait(n)
	if w == 0 || (p.MaxAttempts > 0 && n >= p.MaxAttempts) {
		return time.Time{}
	}
	return now.UTC().Add(w)
}

// AttemptResult is how an attempt ended, for FinishWith.
type AttemptResult struct {
	Outcome  RunOutcome
	ExitCode *int   // nil when there is none
	Output   string // TailOutput of the command's stderr; "" when not kept
	Stdout   string // TailOutput of the command's stdout; "" when not kept
	Reason   string // why a lost attempt's lock was lost; "" otherwise
}

// MaxLedgerBytes is the largest encoded ledger: Consul's default limit on a
// KV value (kv_max_value_size, 512 KiB; agent/config/default.go). A ledger
// grows by about 300 bytes per attempt, plus its kept output (at most
// KeepOutputBudget each), so keep x attempts stays below it; past it,
// Consul would refuse the write.
const MaxLedgerBytes = 512 * 1024

// KeepOutputBudget is the largest -keep-output a lock with keep runs of
// maxAttempts attempts allows: keep x maxAttempts attempts with that much
// of stdout and of stderr each, and everything else at its upper bound,
// fit the ledger's MaxLedgerBytes. 0 when nothing fits.
func KeepOutputBudget(keep, maxAttempts int) int {
	keep, maxAttempts = max(keep, 1), max(maxAttempts, 1)
	per := ((MaxLedgerBytes-ledgerEnvelope-ledgerPrunedBytes-keep*ledgerRunOverhead)/(keep*maxAttempts) - ledgerAttemptOverhead) / 2
	return min(max(per, 0), MaxKeepOutput)
}

// ValidateKeepOutput checks a -keep-output of size bytes for a lock with
// keep runs of maxAttempts attempts (0, 0: only the absolute limit).
func ValidateKeepOutput(size, keep, maxAttempts int) error {
	switch {
	case size < 0 || size > MaxKeepOutput:
		return &validation.FieldError{Field: FlagKeepOutput, Value: fmt.Sprint(size), Allowed: fmt.Sprintf("0 (off) to %d bytes", MaxKeepOutput)}
	case keep > 0 && size > KeepOutputBudget(keep, maxAttempts):
		return &validation.FieldError{Field: FlagKeepOutput, Value: fmt.Sprint(size), Allowed: fmt.Sprintf(
			"0 to %d bytes for this lock: run_once.keep %d x max_attempts %d attempts must fit the ledger's %d bytes (lower keep or max_attempts for more)",
			KeepOutputBudget(keep, maxAttempts), keep, maxAttempts, MaxLedgerBytes)}
	}
	return nil
}

// TailOutput is the end of b that, as valid UTF-8 (invalid bytes become
// U+FFFD), takes at most size bytes in the ledger's JSON: what an attempt
// keeps of its command's stderr.
func TailOutput(b []byte, size int) string {
	if size <= 0 || len(b) == 0 {
		return ""
	}
	if len(b) > size+utf8.UTFMax {
		b = b[len(b)-size-utf8.UTFMax:]
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	total, i := 0, len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		n := jsonLen(r, w)
		if total+n > size {
			break
		}
		total += n
		i -= w
	}
	return s[i:]
}

// jsonLen is how many bytes rune r (w bytes of UTF-8) takes in JSON as
// marshal writes it.
func jsonLen(r rune, w int) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '\u2028' || r == '\u2029':
		return 6
	}
	return w
}
