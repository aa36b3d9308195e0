package record

import (
	"fmt"
	"slices"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// RecordKindRunLedger is the kind of a run ledger record, stored at
// RunLedgerKey(registry, lock name). It is not a declaration: the holders
// of the lock write it, the provider, the controller and status only read
// it.
const RecordKindRunLedger = "run_ledger"

// RunLedgerKey is the KV key of lock's run ledger:
// <registryPrefix>/runs/<lock>.
func RunLedgerKey(registryPrefix, lock string) string {
	return lockmodel.RegistryKey(registryPrefix, lockmodel.KindRuns, lock)
}

// LedgerSpec is the spec of a "run_ledger" record.
type LedgerSpec struct {
	Lock string    `json:"lock"`
	Runs []RunSpec `json:"runs"`
	// Pruned and Forgotten are absent while empty: a ledger that never
	// pruned a done run is what earlier versions wrote.
	Pruned    []PrunedRunSpec `json:"pruned,omitempty"`
	Forgotten *ForgottenSpec  `json:"forgotten,omitempty"`
}

// PrunedRunSpec is one pruned run in a LedgerSpec.
type PrunedRunSpec struct {
	RunID   string `json:"run_id"`
	Outcome string `json:"outcome"`
}

// ForgottenSpec is a LedgerSpec's Forgotten; through is null when no
// forgotten run ID was a time.
type ForgottenSpec struct {
	Runs    int     `json:"runs"`
	Through *string `json:"through"`
}

// RunSpec is one run in a LedgerSpec.
type RunSpec struct {
	RunID    string        `json:"run_id"`
	Outcome  string        `json:"outcome"`
	Attempts []AttemptSpec `json:"attempts"`
	// NotBefore (RFC 3339, UTC): no attempt starts before it
	// (retry_after); absent when the next may start at once.
	NotBefore string `json:"not_before,omitempty"`
}

// AttemptSpec is one attempt in a RunSpec. Times are RFC 3339 in UTC;
// finished is null while running; exit_code is null when there is none.
type AttemptSpec struct {
	Attempt      int     `json:"attempt"`
	Node         string  `json:"node"`
	Session      string  `json:"session"`
	FencingToken uint64  `json:"fencing_token"`
	Started      string  `json:"started"`
	Finished     *string `json:"finished"`
	ExitCode     *int    `json:"exit_code"`
	Outcome      string  `json:"outcome"`
	// Output and Stdout are the tails of the command's stderr and stdout
	// (-keep-output); absent when not kept.
	Output string `json:"output,omitempty"`
	Stdout string `json:"stdout,omitempty"`
	// Reason: why a lost attempt was lost (absent when unknown), or why a
	// released attempt was released. ReleasedBy: who released it
	// ("released" only). Both absent otherwise.
	Reason     string `json:"reason,omitempty"`
	ReleasedBy string `json:"released_by,omitempty"`
	// ReleasedByAccessor: the releasing token's accessor ID ("released"
	// only; absent when unknown).
	ReleasedByAccessor string `json:"released_by_accessor,omitempty"`
}

// maxLedgerRuns bounds what a decoder accepts: a ledger pruned to the
// largest keep, plus the run being written.
const maxLedgerRuns = ledger.MaxRunKeep + 1

// EncodeLedger renders l as a "run_ledger" record. It refuses a ledger
// that DecodeLedger would refuse.
func EncodeLedger(l ledger.Ledger) ([]byte, error) {
	spec := LedgerSpec{Lock: l.Lock, Runs: make([]RunSpec, 0, len(l.Runs))}
	for _, r := range l.Runs {
		rs := RunSpec{RunID: r.ID, Outcome: string(r.Outcome), Attempts: make([]AttemptSpec, 0, len(r.Attempts))}
		if !r.NotBefore.IsZero() {
			rs.NotBefore = r.NotBefore.UTC().Format(time.RFC3339Nano)
		}
		for _, a := range r.Attempts {
			as := AttemptSpec{
				Attempt: a.Number, Node: a.Node, Session: a.Session, FencingToken: a.FencingToken,
				Started: a.Started.UTC().Format(time.RFC3339Nano), ExitCode: a.ExitCode, Outcome: string(a.Outcome),
				Reason: a.Reason, ReleasedBy: a.ReleasedBy, ReleasedByAccessor: a.ReleasedByAccessor, Output: a.Output, Stdout: a.Stdout,
			}
			if !a.Finished.IsZero() {
				f := a.Finished.UTC().Format(time.RFC3339Nano)
				as.Finished = &f
			}
			rs.Attempts = append(rs.Attempts, as)
		}
		spec.Runs = append(spec.Runs, rs)
	}
	for _, p := range l.Pruned {
		spec.Pruned = append(spec.Pruned, PrunedRunSpec{RunID: p.ID, Outcome: string(p.Outcome)})
	}
	if l.Forgotten.Runs > 0 || !l.Forgotten.Through.IsZero() {
		spec.Forgotten = &ForgottenSpec{Runs: l.Forgotten.Runs}
		if !l.Forgotten.Through.IsZero() {
			th := l.Forgotten.Through.UTC().Format(time.RFC3339Nano)
			spec.Forgotten.Through = &th
		}
	}
	if _, err := ledgerFromSpec(spec); err != nil {
		return nil, err
	}
	b, err := encodeRecord(RecordKindRunLedger, l.Lock, spec)
	// Too big (attempts kept output under a larger -keep-output, or
	// max_attempts was raised): the oldest outputs go first.
	for i := len(spec.Runs) - 1; err == nil && len(b) > ledger.MaxLedgerBytes && i >= 0; i-- {
		dropped := false
		for j := range spec.Runs[i].Attempts {
			at := &spec.Runs[i].Attempts[j]
			dropped = dropped || at.Output != "" || at.Stdout != ""
			at.Output, at.Stdout = "", ""
		}
		if dropped {
			b, err = encodeRecord(RecordKindRunLedger, l.Lock, spec)
		}
	}
	if err == nil && len(b) > ledger.MaxLedgerBytes {
		return nil, &validation.FieldError{Field: ledger.FieldRunOnceKeep, Value: fmt.Sprintf("%d runs (%d bytes)", len(l.Runs), len(b)),
			Allowed: fmt.Sprintf("a ledger of at most %d bytes, Consul's limit on a KV value: lower run_once.keep", ledger.MaxLedgerBytes)}
	}
	return b, err
}

// DecodeLedger parses and validates a "run_ledger" record. Every field is
// checked: a corrupted or hand-written ledger is an error naming the field
// (runs[2].attempts[0].outcome), never a guess, because a runner decides
// from it whether to run a command.
func DecodeLedger(data []byte) (ledger.Ledger, error) {
	var spec LedgerSpec
	if err := decodeRecord(data, RecordKindRunLedger, &spec, func() string { return spec.Lock }); err != nil {
		return ledger.Ledger{}, err
	}
	return ledgerFromSpec(spec)
}

func ledgerFromSpec(spec LedgerSpec) (ledger.Ledger, error) {
	var e specErrors
	e.add(lockmodel.ValidateName("lock", spec.Lock))
	if len(spec.Runs) > maxLedgerRuns {
		e.bad("runs", fmt.Sprintf("%d runs", len(spec.Runs)), fmt.Sprintf("at most %d runs (keep is at most %d)", maxLedgerRuns, ledger.MaxRunKeep))
	}
	l := ledger.Ledger{Lock: spec.Lock, Runs: make([]ledger.Run, 0, len(spec.Runs))}
	seen := map[string]bool{}
	for i, rs := range spec.Runs {
		rf := fmt.Sprintf("runs[%d]", i)
		e.add(ledger.ValidateRunIDField(rf+".run_id", rs.RunID))
		if seen[rs.RunID] {
			e.bad(rf+".run_id", rs.RunID, "each run ID at most once")
		}
		seen[rs.RunID] = true
		l.Runs = append(l.Runs, runFromSpec(rf, rs, &e))
	}
	if len(spec.Pruned) > ledger.MaxPrunedRuns {
		e.bad("pruned", fmt.Sprintf("%d runs", len(spec.Pruned)), fmt.Sprintf("at most %d pruned runs", ledger.MaxPrunedRuns))
	}
	for i, ps := range spec.Pruned {
		pf := fmt.Sprintf("pruned[%d]", i)
		e.add(ledger.ValidateRunIDField(pf+".run_id", ps.RunID))
		if seen[ps.RunID] {
			e.bad(pf+".run_id", ps.RunID, "each run ID at most once, in runs or pruned")
		}
		seen[ps.RunID] = true
		o := ledger.RunOutcome(ps.Outcome)
		if o != ledger.RunSucceeded && o != ledger.RunExhausted {
			e.bad(pf+".outcome", ps.Outcome, outcomesAllowed([]ledger.RunOutcome{ledger.RunSucceeded, ledger.RunExhausted}))
		}
		l.Pruned = append(l.Pruned, ledger.PrunedRun{ID: ps.RunID, Outcome: o})
	}
	if f := spec.Forgotten; f != nil {
		if f.Runs < 1 {
			e.bad("forgotten.runs", fmt.Sprint(f.Runs), "1 or more (absent when none was forgotten)")
		}
		l.Forgotten.Runs = f.Runs
		if f.Through != nil {
			t, err := time.Parse(time.RFC3339Nano, *f.Through)
			if err != nil {
				e.bad("forgotten.through", validation.Truncate(*f.Through, 40), "an RFC 3339 time such as \"2026-12-01T00:00:00Z\", or null")
			}
			l.Forgotten.Through = t.UTC()
		}
	}
	if len(e) > 0 {
		return ledger.Ledger{}, recordError(RecordKindRunLedger, spec.Lock, validation.FieldErrors(e))
	}
	return l, nil
}

// specErrors collects what a decoded record breaks, field by field.
type specErrors validation.FieldErrors

func (e *specErrors) add(err error) { *e = append(*e, validation.AsFieldErrors(err)...) }

func (e *specErrors) bad(field, value, allowed string) {
	*e = append(*e, &validation.FieldError{Field: field, Value: value, Allowed: allowed})
}

// runFromSpec is run rs of a ledger record (field rf), its errors added to e.
func runFromSpec(rf string, rs RunSpec, e *specErrors) ledger.Run {
	run := ledger.Run{ID: rs.RunID, Outcome: ledger.RunOutcome(rs.Outcome)}
	if rs.NotBefore != "" {
		t, err := time.Parse(time.RFC3339Nano, rs.NotBefore)
		if err != nil {
			e.bad(rf+".not_before", validation.Truncate(rs.NotBefore, 40), "an RFC 3339 time such as \"2026-12-01T00:05:00Z\", or absent")
		}
		run.NotBefore = t.UTC()
	}
	if !slices.Contains(ledger.RunOutcomes, run.Outcome) {
		e.bad(rf+".outcome", rs.Outcome, outcomesAllowed(ledger.RunOutcomes))
	}
	if len(rs.Attempts) == 0 || len(rs.Attempts) > ledger.MaxMaxAttempts {
		e.bad(rf+".attempts", fmt.Sprintf("%d attempts", len(rs.Attempts)), fmt.Sprintf("1 to %d attempts", ledger.MaxMaxAttempts))
	}
	for j, as := range rs.Attempts {
		af := fmt.Sprintf("%s.attempts[%d]", rf, j)
		a, aerrs := attemptFromSpec(af, as)
		*e = append(*e, aerrs...)
		if as.Attempt != j+1 {
			e.bad(af+".attempt", fmt.Sprint(as.Attempt), fmt.Sprintf("%d: attempts are numbered from 1 in order", j+1))
		}
		if a.Outcome == ledger.RunRunning && j != len(rs.Attempts)-1 {
			e.bad(af+".outcome", as.Outcome, "an outcome other than \"running\": only the latest attempt may still run")
		}
		if a.Outcome == ledger.RunSucceeded && j != len(rs.Attempts)-1 {
			e.bad(af+".outcome", as.Outcome, "\"succeeded\" only on the latest attempt: no attempt starts after a success")
		}
		run.Attempts = append(run.Attempts, a)
	}
	if n := len(rs.Attempts); n > 0 && n <= ledger.MaxMaxAttempts {
		last := ledger.RunOutcome(rs.Attempts[n-1].Outcome)
		want := last
		if last.Retried() && run.Outcome == ledger.RunExhausted {
			want = ledger.RunExhausted
		}
		if run.Outcome != want && slices.Contains(ledger.RunOutcomes, run.Outcome) {
			allowed := fmt.Sprintf("%q, the latest attempt's outcome", last)
			if last.Retried() {
				allowed += fmt.Sprintf(", or %q", ledger.RunExhausted)
			}
			e.bad(rf+".outcome", rs.Outcome, allowed)
		}
	}
	return run
}

func attemptFromSpec(field string, as AttemptSpec) (ledger.Attempt, validation.FieldErrors) {
	var errs validation.FieldErrors
	bad := func(f, value, allowed string) {
		errs = append(errs, &validation.FieldError{Field: field + "." + f, Value: value, Allowed: allowed})
	}
	a := ledger.Attempt{Number: as.Attempt, Node: as.Node, Session: as.Session, FencingToken: as.FencingToken, Outcome: ledger.RunOutcome(as.Outcome),
		Reason: as.Reason, ReleasedBy: as.ReleasedBy, ReleasedByAccessor: as.ReleasedByAccessor, Output: as.Output, Stdout: as.Stdout}
	if len(as.Output) > ledger.MaxKeepOutput {
		bad("output", fmt.Sprintf("%d bytes", len(as.Output)), fmt.Sprintf("at most %d bytes of the command's stderr", ledger.MaxKeepOutput))
	}
	if len(as.Stdout) > ledger.MaxKeepOutput {
		bad("stdout", fmt.Sprintf("%d bytes", len(as.Stdout)), fmt.Sprintf("at most %d bytes of the command's stdout", ledger.MaxKeepOutput))
	}
	switch {
	case a.Outcome == ledger.RunReleased && (as.ReleasedBy == "" || ValidateReason(field+".reason", as.Reason) != nil):
		bad("released_by", validation.Truncate(as.ReleasedBy, 40), "who released the holder, and a reason, for a \"released\" attempt")
	case a.Outcome != ledger.RunReleased && as.ReleasedBy != "":
		bad("released_by", validation.Truncate(as.ReleasedBy, 40), "absent unless the attempt is \"released\"")
	case as.ReleasedByAccessor != "" && (a.Outcome != ledger.RunReleased || !IsUUID(as.ReleasedByAccessor)):
		bad("released_by_accessor", validation.Truncate(as.ReleasedByAccessor, 40), "a token accessor ID (a UUID), only on a \"released\" attempt")
	case as.Reason != "" && a.Outcome != ledger.RunLost && a.Outcome != ledger.RunReleased && !a.Outcome.Superseded():
		bad("reason", validation.Truncate(as.Reason, 40), fmt.Sprintf("absent: only a %q, %q, %q or %q attempt has a reason", ledger.RunLost, ledger.RunReleased, ledger.RunSkipped, ledger.RunReplaced))
	case len(as.Reason) > ledger.MaxAttemptReason:
		bad("reason", validation.Truncate(as.Reason, 40), fmt.Sprintf("at most %d bytes", ledger.MaxAttemptReason))
	}
	if as.Node == "" || len(as.Node) > 256 {
		bad("node", validation.Truncate(as.Node, 40), "the holder's node name, 1 to 256 bytes")
	}
	switch {
	case a.Outcome == ledger.RunSkipped && (as.Session != "" || as.FencingToken != 0):
		bad("session", validation.Truncate(as.Session, 40), "absent, with no fencing_token, for a \"skipped\" attempt: it never held the lock")
	case a.Outcome == ledger.RunSkipped:
	case !uuidRE.MatchString(as.Session):
		bad("session", validation.Truncate(as.Session, 40), "the holder's session ID (a UUID)")
	case as.FencingToken == 0:
		bad("fencing_token", "0", "the holder's fencing token, a Raft index above 0")
	}
	var err error
	if a.Started, err = time.Parse(time.RFC3339Nano, as.Started); err != nil {
		bad("started", validation.Truncate(as.Started, 40), "an RFC 3339 time such as \"2026-12-01T00:05:00Z\"")
	}
	if !slices.Contains(ledger.AttemptOutcomes, a.Outcome) {
		bad("outcome", as.Outcome, outcomesAllowed(ledger.AttemptOutcomes))
	}
	switch {
	case a.Outcome == ledger.RunRunning && as.Finished != nil:
		bad("finished", *as.Finished, "null while the attempt is running")
	case a.Outcome != ledger.RunRunning && as.Finished == nil:
		bad("finished", "null", "the time the outcome was recorded, once it is not running")
	case as.Finished != nil:
		if a.Finished, err = time.Parse(time.RFC3339Nano, *as.Finished); err != nil {
			bad("finished", validation.Truncate(*as.Finished, 40), "an RFC 3339 time such as \"2026-12-01T00:05:00Z\"")
		}
	}
	switch {
	case as.ExitCode != nil && (a.Outcome == ledger.RunRunning || a.Outcome == ledger.RunCrashed || a.Outcome == ledger.RunReleased || a.Outcome.Superseded()):
		bad("exit_code", fmt.Sprint(*as.ExitCode), fmt.Sprintf("null for a %q attempt", a.Outcome))
	case as.ExitCode == nil && (a.Outcome == ledger.RunSucceeded || a.Outcome == ledger.RunFailed):
		bad("exit_code", "null", fmt.Sprintf("the command's exit code for a %q attempt", a.Outcome))
	case as.ExitCode != nil && a.Outcome == ledger.RunSucceeded && *as.ExitCode != 0:
		bad("exit_code", fmt.Sprint(*as.ExitCode), "0 for a \"succeeded\" attempt")
	case as.ExitCode != nil && a.Outcome == ledger.RunFailed && *as.ExitCode == 0:
		bad("exit_code", "0", "a non-zero exit code for a \"failed\" attempt")
	case as.ExitCode != nil && (*as.ExitCode < 0 || *as.ExitCode > 255):
		bad("exit_code", fmt.Sprint(*as.ExitCode), "an exit code from 0 to 255")
	}
	if as.ExitCode != nil {
		c := *as.ExitCode
		a.ExitCode = &c
	}
	return a, errs
}

func outcomesAllowed(os []ledger.RunOutcome) string {
	s := "one of"
	for i, o := range os {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf(" %q", o)
	}
	return s
}
