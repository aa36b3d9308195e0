package status

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// SchemaVersion is the version of the -json document. Fields are only
// added within a version; a removal or a change of meaning raises it.
const SchemaVersion = 1

// Report is the -json document.
type Report struct {
	SchemaVersion  int            `json:"schema_version"`
	RegistryPrefix string         `json:"registry_prefix"`
	Time           time.Time      `json:"time"`
	Locks          []Lock         `json:"locks"`
	Undeclared     []Undeclared   `json:"undeclared_keys"`
	BadRecords     []BadRecord    `json:"bad_records"`
	Summary        Summary        `json:"summary"`
	ConsulRequests int            `json:"consul_requests"`
	declared       map[string]int // lock name -> index in Locks
}

// Summary is the verdict, the same as the exit code.
type Summary struct {
	Locks      int `json:"locks"`
	Held       int `json:"held"`
	Pending    int `json:"pending"`
	Violations int `json:"violations"`
	Unheld     int `json:"always_held_unheld"`
	// Exhausted and Missed count the locks whose run_state is
	// "exhausted" and "missed": runs that need attention.
	Exhausted int  `json:"runs_exhausted"`
	Missed    int  `json:"runs_missed"`
	Compliant bool `json:"compliant"`
	ExitCode  int  `json:"exit_code"`
}

// Lock is one declared lock.
type Lock struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	// Kind is "mutex" or "semaphore".
	Kind  string `json:"kind"`
	Limit int    `json:"limit"`
	// State is "held", "unheld" or "missing" (the key does not exist).
	State        string      `json:"state"`
	Holders      []holderRow `json:"holders"`
	FencingToken *uint64     `json:"fencing_token"`
	LockIndex    uint64      `json:"lock_index"`
	ModifyIndex  uint64      `json:"modify_index"`
	// Contenders are semaphore contender keys whose session does not hold
	// a slot (waiting); null for a mutex (see Queue for a queued one's).
	Contenders *int `json:"contenders"`
	// Waiters is a mutex's declared waiters, "race", "queue" or "handoff"
	// (absent for a semaphore). Queue, only for the queued modes ("queue"
	// and "handoff"), is its waiter queue in line, stale entries last ([]
	// when none waits; absent for a lock whose waiters race, which leave no
	// trace).
	Waiters         string        `json:"waiters,omitempty"`
	Queue           []QueueWaiter `json:"queue,omitzero"`
	SessionDefaults string        `json:"session_defaults"`
	WorstCaseGap    string        `json:"worst_case_gap"`
	MaxHold         string        `json:"max_hold"`
	AlwaysHeld      bool          `json:"always_held"`
	SinceHandover   *string       `json:"since_handover"`
	// Pending is true while the lock's declaration has just changed
	// (compliance.Pending): its key is left to the apply that changed it
	// and not judged, as the controller does; a difference still there
	// after the apply grace is drift.
	Pending   bool `json:"pending"`
	Compliant bool `json:"compliant"`
	// Findings are the controller's findings about the lock, from the same
	// Decide the controller runs (in observe mode).
	Findings    []Finding `json:"findings"`
	Description string    `json:"description"`
	// Paused is the lock's pause (consullock pause, consullock_lock.paused):
	// who, when and why; null when it is not paused.
	Paused *Pause `json:"paused"`
	// LastRun is the most recently begun run of the lock's run ledger
	// (run once); null when the lock has no ledger.
	LastRun *LockRun `json:"last_run"`
	// Runs is the ledger's history, newest first, each run with its
	// attempts: only in `status -lock NAME -json`.
	Runs []LockRun `json:"runs,omitempty"`
	runs []LockRun
	// NextSlot is the run ID of the lock's next run_once slot (its period
	// or schedule, lockmodel RunOnce.NextSlot); null without run_once.
	NextSlot *string `json:"next_slot"`
	// RunState is what the lock's runs need, by runState: "exhausted",
	// "paused", "missed", "running", or the last run's outcome (a
	// ledger.RunOutcome, as consullock_lock_runs_total's outcome
	// label); null for a lock with neither run_once nor a run ledger.
	RunState *string `json:"run_state"`
	// MissedSlots is the run IDs of past slots with no run in the ledger,
	// oldest first (lockmodel RunOnce.MissedSlots): backfill one with
	// `consullock run -lock NAME -run-id ID`. Absent when none.
	MissedSlots []string `json:"missed_slots,omitempty"`
}

// LockRun is one run of a run-once lock, as its ledger records it. Node,
// fencing token, times and exit code are its latest attempt's.
type LockRun struct {
	RunID   string `json:"run_id"`
	Outcome string `json:"outcome"`
	// Attempts is how many attempts the run had; MaxAttempts the
	// declaration's max_attempts (3 when it declares no run_once).
	Attempts     int     `json:"attempts"`
	MaxAttempts  int     `json:"max_attempts"`
	Node         string  `json:"node"`
	FencingToken uint64  `json:"fencing_token"`
	Started      string  `json:"started"`
	Finished     *string `json:"finished"`
	ExitCode     *int    `json:"exit_code"`
	// NotBefore is when the run's next attempt may start
	// (run_once.retry_after); null when it may start at once.
	NotBefore *string `json:"not_before"`
	// AttemptList is every attempt, oldest first (only with -lock).
	AttemptList []LockRunAttempt `json:"attempt_list,omitempty"`
}

// Pause is a paused lock's pause record.
type Pause struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
	At     string `json:"at"` // RFC 3339, UTC
	// Accessor is the pausing token's accessor ID; absent when unknown.
	Accessor string `json:"accessor,omitempty"`
}

// LockRunAttempt is one attempt of a run.
type LockRunAttempt struct {
	Attempt      int     `json:"attempt"`
	Outcome      string  `json:"outcome"`
	Node         string  `json:"node"`
	Session      string  `json:"session"`
	FencingToken uint64  `json:"fencing_token"`
	Started      string  `json:"started"`
	Finished     *string `json:"finished"`
	ExitCode     *int    `json:"exit_code"`
	// Output and Stdout are the tails of the command's stderr and stdout
	// (-keep-output); absent when not kept.
	Output string `json:"output,omitempty"`
	Stdout string `json:"stdout,omitempty"`
	// Reason: why a "lost" attempt was lost, or why a "released" one was
	// released. ReleasedBy and ReleasedByAccessor (the releasing token's
	// accessor ID, when known): a "released" attempt only.
	ReleasedBy         string `json:"released_by,omitempty"`
	ReleasedByAccessor string `json:"released_by_accessor,omitempty"`
	Reason             string `json:"reason,omitempty"`
}

// setRuns fills LastRun (and the history -lock shows) from the lock's run
// ledger, when it has one.
func (out *Lock) setRuns(l lockmodel.Lock, ledgers map[string]ledger.Ledger) {
	led, ok := ledgers[l.Name]
	if !ok || len(led.Runs) == 0 {
		return
	}
	ro := ledger.RunOnce{}
	if l.RunOnce != nil {
		ro = *l.RunOnce
	}
	out.runs = runsOf(led, ro.WithDefaults().MaxAttempts)
	last := out.runs[0]
	last.AttemptList = nil
	out.LastRun = &last
}

// setSlots fills NextSlot and MissedSlots of a run_once lock at now.
func (out *Lock) setSlots(l lockmodel.Lock, ledgers map[string]ledger.Ledger, now time.Time) {
	if l.RunOnce == nil {
		return
	}
	if next, ok := l.RunOnce.NextSlot(now); ok {
		id, _, _ := l.RunOnce.Slot(next)
		out.NextSlot = &id
	}
	out.MissedSlots = l.RunOnce.MissedSlots(ledgers[l.Name], now)
}

// runsOf turns a ledger into Runs, newest first, with their attempts.
func runsOf(l ledger.Ledger, maxAttempts int) []LockRun {
	out := make([]LockRun, 0, len(l.Runs))
	for _, r := range l.Runs {
		run := LockRun{RunID: r.ID, Outcome: string(r.OutcomeUnder(maxAttempts)), Attempts: len(r.Attempts), MaxAttempts: maxAttempts}
		if !r.NotBefore.IsZero() {
			nb := r.NotBefore.UTC().Format(time.RFC3339Nano)
			run.NotBefore = &nb
		}
		for _, a := range r.Attempts {
			ra := LockRunAttempt{Attempt: a.Number, Outcome: string(a.Outcome), Node: a.Node, Session: a.Session,
				FencingToken: a.FencingToken, Started: a.Started.UTC().Format(time.RFC3339Nano), ExitCode: a.ExitCode,
				ReleasedBy: a.ReleasedBy, ReleasedByAccessor: a.ReleasedByAccessor, Reason: a.Reason, Output: a.Output, Stdout: a.Stdout}
			if !a.Finished.IsZero() {
				f := a.Finished.UTC().Format(time.RFC3339Nano)
				ra.Finished = &f
			}
			run.AttemptList = append(run.AttemptList, ra)
			run.Node, run.FencingToken, run.Started, run.Finished, run.ExitCode = ra.Node, ra.FencingToken, ra.Started, ra.Finished, ra.ExitCode
		}
		out = append(out, run)
	}
	return out
}

// holderRow is one session holding a lock, as status reports it.
type holderRow struct {
	Session      string `json:"session"`
	SessionName  string `json:"session_name"`
	Node         string `json:"node"`
	FencingToken uint64 `json:"fencing_token"`
	// HeldFor is measured from the start time the holder wrote into its
	// value (the holder's clock, not after now: lockmodel.HoldStart, the
	// controller's rule); "" (unknown) when it wrote none.
	HeldFor      string   `json:"held_for"`
	Started      *string  `json:"started"`
	Value        string   `json:"value"`
	TTL          string   `json:"session_ttl"`
	LockDelay    string   `json:"session_lock_delay"`
	Behavior     string   `json:"session_behavior"`
	NodeChecks   []string `json:"session_node_checks"`
	ServiceCheck []string `json:"session_service_checks"`
	Compliant    bool     `json:"compliant"`
	Violations   []string `json:"violations"`
	// Service is the holder's instance of its lock's holder_service;
	// null when the lock has none or the holder registered none.
	Service *holderInstance `json:"service"`
	started time.Time
}

// holderInstance is a holder's service instance as the catalog shows it.
type holderInstance struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	// Status is the instance's health (its TTL check and its node's):
	// passing, warning or critical; DNS answers it unless critical.
	Status string `json:"status"`
}

// Finding is one controller Decision, as status reports it.
type Finding struct {
	Kind    string   `json:"kind"`
	Session string   `json:"session,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	Detail  string   `json:"detail"`
}

// Undeclared is a key that looks like a lock under a listed prefix but is
// not declared.
type Undeclared struct {
	Key     string `json:"key"`
	Session string `json:"session"`
	Flags   string `json:"flags"`
}

// BadRecord is a declaration that does not decode; it is not judged.
type BadRecord struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// build turns one read into a report. A lock must always have a holder when
// its declaration says always_held, and also when alwaysHeld (the
// -always-held flag) names it ("*" = every lock). Compliance is Decide's, in
// observe mode, on the State of what w read (compliance.Observation).
func build(w *world, registry string, alwaysHeld map[string]bool, now time.Time) *Report {
	rep := &Report{SchemaVersion: SchemaVersion, RegistryPrefix: registry, Time: now.UTC().Truncate(time.Second),
		Locks: []Lock{}, Undeclared: []Undeclared{}, BadRecords: []BadRecord{}, declared: map[string]int{}}
	byKey := map[string]*api.KVPair{}
	for _, pairs := range w.pairs {
		for _, p := range pairs {
			byKey[p.Key] = p
		}
	}
	st := w.observation(byKey, now).State()
	contenderKeys := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(w.decl.locks)) {
		l := w.decl.locks[name]
		out := declaredLock(w, l, alwaysHeld, now)
		if p := byKey[l.Key]; p != nil {
			out.setLive(w, l, lockState(w, l, p, byKey, contenderKeys), byKey, st.HeldSince, now)
		} else {
			out.State = "missing"
			if l.Queued() {
				out.Queue = queueOf(w, l, byKey, "")
			}
		}
		rep.add(out)
	}
	rep.addFindings(compliance.Decide(st, compliance.ModeObserve))
	for k, v := range w.decl.bad {
		rep.BadRecords = append(rep.BadRecords, BadRecord{Key: k, Error: v})
	}
	sort.Slice(rep.BadRecords, func(i, j int) bool { return rep.BadRecords[i].Key < rep.BadRecords[j].Key })
	rep.Undeclared = undeclared(w, byKey, contenderKeys)
	rep.summarize()
	return rep
}

// observation is what w read at now, listed keys by key, as compliance
// judges it: a single read keeps no history of holds; a pending lock's
// declaration is settling.
func (w *world) observation(byKey map[string]*api.KVPair, now time.Time) compliance.Observation {
	o := compliance.Observation{Read: compliance.State{Locks: w.decl.locks, Profiles: w.decl.profiles, ProfileIndex: w.decl.profileIndex,
		Keys: make(map[string]lockmodel.KeyEntry, len(byKey)), Sessions: w.sessions, Settling: map[string]bool{}, Now: now}}
	for key, p := range byKey {
		o.Read.Keys[key] = store.KeyEntry(p)
	}
	for name := range w.pending {
		o.Read.Settling[compliance.SettlingKey(lockmodel.KindLock, name)] = true
	}
	return o
}

// declaredLock is what l's declaration (and its run ledger and pause
// record) says of it, before its keys are looked at.
func declaredLock(w *world, l lockmodel.Lock, alwaysHeld map[string]bool, now time.Time) Lock {
	out := Lock{Name: l.Name, Key: l.Key, Kind: "mutex", Limit: max(l.Limit, 1), SessionDefaults: l.SessionDefaults,
		AlwaysHeld: l.AlwaysHeld || alwaysHeld["*"] || alwaysHeld[l.Name], Holders: []holderRow{}, Findings: []Finding{}, Description: l.Description,
		Pending: w.pending[l.Name]}
	if l.IsSemaphore() {
		out.Kind = "semaphore"
	} else {
		out.Waiters = lockmodel.WaitersRace
	}
	if l.Queued() {
		out.Waiters, out.Queue = l.Waiters, []QueueWaiter{}
	}
	if l.MaxHold > 0 {
		out.MaxHold = lockmodel.FormatDuration(l.MaxHold)
	}
	if p, ok := w.decl.profiles[l.SessionDefaults]; ok {
		out.WorstCaseGap = lockmodel.FormatDuration(p.WorstCaseGap())
	}
	out.setRuns(l, w.decl.ledgers)
	if p, ok := w.decl.pauses[l.Name]; ok {
		out.Paused = &Pause{Reason: p.Reason, By: p.By, At: p.At.Format(time.RFC3339), Accessor: p.Accessor}
	}
	out.setSlots(l, w.decl.ledgers, now)
	out.RunState = out.runState(l.RunOnce != nil)
	return out
}

// Run states that are not a run's outcome.
const (
	RunStateMissed = "missed" // a slot passed with no run in the ledger
	RunStatePaused = "paused" // the lock is paused: no run starts
)

// runState is the RUN STATE of a lock (runOnce: it declares run_once),
// the first that holds: its last run exhausted its attempts; it is paused;
// a slot was missed; its last run's outcome (running included). Nil with
// neither run_once nor a run.
func (out *Lock) runState(runOnce bool) *string {
	var s string
	switch {
	case out.LastRun != nil && out.LastRun.Outcome == string(ledger.RunExhausted):
		s = out.LastRun.Outcome
	case out.Paused != nil && (runOnce || out.LastRun != nil):
		s = RunStatePaused
	case len(out.MissedSlots) > 0:
		s = RunStateMissed
	case out.LastRun != nil:
		s = out.LastRun.Outcome
	default:
		return nil
	}
	return &s
}

// exitCode is the lock's own exit code: ExitViolation, else
// ExitRunExhausted or ExitSlotMissed by its run state, else ExitOK.
func (out *Lock) exitCode() int {
	switch {
	case !out.Compliant:
		return ExitViolation
	case out.RunState == nil:
		return ExitOK
	case *out.RunState == string(ledger.RunExhausted):
		return ExitRunExhausted
	case *out.RunState == RunStateMissed:
		return ExitSlotMissed
	}
	return ExitOK
}

// setLive fills in what l's existing key (ls.Entry) and the keys and
// sessions around it show: its holders, each since heldSince (the State's
// HeldSince), a semaphore's waiting contenders, a queue's waiters.
func (out *Lock) setLive(w *world, l lockmodel.Lock, ls lockmodel.LockState, byKey map[string]*api.KVPair, heldSince map[compliance.LockSession]time.Time, now time.Time) {
	out.LockIndex, out.ModifyIndex = ls.Entry.LockIndex, ls.Entry.ModifyIndex
	for _, h := range lockmodel.Holders(ls) {
		start, known := heldSince[compliance.LockSession{Lock: l.Name, Session: h.Session}]
		hd := holder(w, h.Session, h.Entry, start, known, now)
		if l.HolderService != nil {
			hd.Service = w.holderService(l.HolderService.Name, h.Session)
		}
		out.Holders = append(out.Holders, hd)
	}
	if l.IsSemaphore() {
		waiting := len(lockmodel.Waiters(ls))
		out.Contenders = &waiting
	}
	if l.Queued() {
		holding := ""
		if len(out.Holders) > 0 {
			holding = out.Holders[0].Session
		}
		out.Queue = queueOf(w, l, byKey, holding)
	}
	out.State = "unheld"
	if len(out.Holders) > 0 {
		out.State = "held"
	}
}

// addFindings adds the decisions ds to their locks: a holder a decision
// finds non-compliant is marked so, with its reasons.
func (r *Report) addFindings(ds []compliance.Decision) {
	for _, d := range ds {
		i, ok := r.declared[d.Lock]
		if !ok {
			continue
		}
		l := &r.Locks[i]
		l.Findings = append(l.Findings, Finding{Kind: string(d.Kind), Session: d.Session, Reasons: d.Reasons, Detail: d.Detail})
		for j := range l.Holders {
			if h := &l.Holders[j]; h.Session == d.Session && d.Kind == compliance.KindHolderNonCompliant {
				h.Compliant = false
				h.Violations = append(h.Violations, d.Reasons...)
			}
		}
	}
}

func (r *Report) add(l Lock) {
	r.declared[l.Name] = len(r.Locks)
	r.Locks = append(r.Locks, l)
}

// summarize sets each lock's verdict, the fencing token and the summary.
// A finding other than holder_predates_profile (a holder left to finish by
// design) is a violation; so is an always-held lock without a holder.
func (r *Report) summarize() {
	s := Summary{Locks: len(r.Locks)}
	for i := range r.Locks {
		l := &r.Locks[i]
		l.Compliant = true
		for _, f := range l.Findings {
			if f.Kind != string(compliance.KindHolderPredatesProfile) {
				l.Compliant = false
				s.Violations++
			}
		}
		if l.Pending {
			s.Pending++
		}
		if l.State == "held" {
			s.Held++
		} else if l.AlwaysHeld {
			l.Compliant = false
			s.Unheld++
		}
		var newest time.Time
		for _, h := range l.Holders {
			if l.FencingToken == nil || h.FencingToken > *l.FencingToken {
				t := h.FencingToken
				l.FencingToken = &t
			}
			if h.started.After(newest) {
				newest = h.started
			}
		}
		if !newest.IsZero() {
			d := lockmodel.FormatDuration(r.Time.Sub(newest.UTC().Truncate(time.Second)).Round(time.Second))
			l.SinceHandover = &d
		}
	}
	s.Compliant = s.Violations == 0 && s.Unheld == 0
	for _, l := range r.Locks {
		switch {
		case l.RunState == nil:
		case *l.RunState == string(ledger.RunExhausted):
			s.Exhausted++
		case *l.RunState == RunStateMissed:
			s.Missed++
		}
	}
	switch {
	case !s.Compliant:
		s.ExitCode = ExitViolation
	case s.Exhausted > 0:
		s.ExitCode = ExitRunExhausted
	case s.Missed > 0:
		s.ExitCode = ExitSlotMissed
	}
	r.Summary = s
}

// holder describes session id holding key entry e, whose ModifyIndex is
// its fencing token (the shared definition: the Raft index of the hold),
// held since start when known (the State's HeldSince, by
// lockmodel.HoldStart: the holder's start, not after now).
func holder(w *world, id string, e lockmodel.KeyEntry, start time.Time, known bool, now time.Time) holderRow {
	h := holderRow{Session: id, FencingToken: e.ModifyIndex, Compliant: true, Violations: []string{}, Value: printable(e.Value),
		NodeChecks: []string{}, ServiceCheck: []string{}}
	if se := w.raw[id]; se != nil {
		s := w.sessions[id]
		h.SessionName, h.Node = se.Name, se.Node
		h.TTL, h.LockDelay = lockmodel.FormatDuration(s.TTL), lockmodel.FormatDuration(s.LockDelay)
		h.Behavior = string(s.Behavior)
		if h.Behavior == "" {
			h.Behavior = string(lockmodel.BehaviorRelease)
		}
		h.NodeChecks, h.ServiceCheck = s.NodeChecks, s.ServiceChecks
	}
	if known {
		h.started = start
		t := start.UTC().Format(time.RFC3339)
		h.Started = &t
		h.HeldFor = lockmodel.FormatDuration(now.Sub(start).Round(time.Second))
	}
	var hv lockmodel.HolderValue
	if h.Node == "" && json.Unmarshal(e.Value, &hv) == nil {
		h.Node = hv.Node
	}
	return h
}

// lockState describes lock l whose key is p for lockmodel.Holders, the
// rule the controller, the data source and the protocol apply too: for a
// semaphore with the keys right under its prefix (its contender keys
// <prefix>/<session>, whose ModifyIndex is each holder's token), which it
// marks in contenderKeys; with the sessions status read after the keys.
func lockState(w *world, l lockmodel.Lock, p *api.KVPair, byKey map[string]*api.KVPair, contenderKeys map[string]bool) lockmodel.LockState {
	ls := lockmodel.LockState{Key: l.Key, Semaphore: l.IsSemaphore(), Keys: map[string]lockmodel.KeyEntry{}, Sessions: w.sessions,
		Entry: new(store.KeyEntry(p))}
	if !ls.Semaphore {
		return ls
	}
	prefix := lockmodel.SemaphorePrefix(l.Key) + "/"
	for key, kp := range byKey {
		if !strings.HasPrefix(key, prefix) || key == l.Key || strings.Contains(strings.TrimPrefix(key, prefix), "/") {
			continue
		}
		contenderKeys[key] = true
		ls.Keys[key] = store.KeyEntry(kp)
	}
	return ls
}

// undeclared lists keys under the listed prefixes that look like locks (a
// lock client's flags, the name .lock, or a session holding them) and are
// neither a declared key, nor a declared semaphore's contender key, nor an
// entry of a declared lock's waiter queue.
func undeclared(w *world, byKey map[string]*api.KVPair, contenderKeys map[string]bool) []Undeclared {
	declared := map[string]bool{}
	for _, l := range w.decl.locks {
		declared[l.Key] = true
	}
	folders := w.decl.queueFolders()
	out := []Undeclared{}
	for key, p := range byKey {
		if declared[key] || contenderKeys[key] || w.registryKey(key) || inQueueFolder(key, folders) {
			continue
		}
		looks := p.Flags == lockmodel.LockFlagValue || p.Flags == lockmodel.SemaphoreFlagValue ||
			path.Base(key) == lockmodel.LockKeyName || p.Session != ""
		if looks {
			out = append(out, Undeclared{Key: key, Session: p.Session, Flags: lockmodel.FormatFlags(p.Flags)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// registryKey is true for keys that belong to the registry (the
// controller's own leader key included), which a broad list prefix covers.
func (w *world) registryKey(key string) bool {
	return w.registry != "" && strings.HasPrefix(key, w.registry+"/")
}

// printable returns v as text when it is UTF-8 without control bytes, and
// a byte count otherwise.
func printable(v []byte) string {
	s := string(v)
	for _, r := range s {
		if r == 0xFFFD || (r < 0x20 && r != '\t') {
			return fmt.Sprintf("(%d bytes of binary data)", len(v))
		}
	}
	return s
}
