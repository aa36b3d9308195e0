package faults

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// The nemesis: a randomized fault schedule, a pure function of its seed, and
// the checkers that read the whole history it leaves (the guarded store's
// log, the runners' exit codes, the controller replicas' logs). The test
// that drives it against a real cluster is nemesis_test.go.

// FaultKind is one kind of fault the nemesis injects: the name of a
// Fault in the nemesis's registry (nemesisFaults, nemesis_faults_test.go),
// whose file (fault_*_test.go) says what it does.
type FaultKind string

// NemesisOnceProfile is the run-once lock's session profile and
// NemesisOnceGrace its runners' -grace: StopAtExitWindow is theirs.
var NemesisOnceProfile = lockmodel.SessionProfile{TTL: 10 * time.Second, LockDelay: time.Second}

const NemesisOnceGrace = 2 * time.Second

// StopAtExitWindow is how long FaultStopAtExit keeps a runner of profile
// and grace stopped: from a second past its guard's kill-by (the guard
// has acted, with the command exited) to halfway from there to 2 x ttl
// (the session still lives when the runner wakes, so the run is the
// runner's to record).
func StopAtExitWindow(profile lockmodel.SessionProfile, grace time.Duration) (lo, hi time.Duration) {
	killBy := lockmodel.NewStopRule(profile.Resolve(), grace).GuardKillAfter()
	return killBy + time.Second, killBy + (2*profile.TTL-killBy)/2
}

// StopAtExitJudged is how long after a stopped runner is woken its run
// must see no other fault for its strike to be judged.
const StopAtExitJudged = 2 * time.Second

// OnceExitArmed is how long an armed FaultOnceExit waits for a run-once
// command to end; one that saw none is skipped.
const OnceExitArmed = 10 * time.Second

// Step is one fault of a schedule: at At after the start, Kind on Target,
// undone For later (faults that are undone), with Value for the faults that
// rewrite a declaration.
type Step struct {
	At     time.Duration
	Kind   FaultKind
	Target string
	For    time.Duration
	Value  int
}

// UnexpectedExits counts the exits whose code is not in allowed.
func UnexpectedExits(exits map[int]int, allowed []int) (n int, codes []int) {
	for _, code := range slices.Sorted(maps.Keys(exits)) {
		if !slices.Contains(allowed, code) {
			n += exits[code]
			codes = append(codes, code)
		}
	}
	return n, codes
}

// LimitChange is a semaphore limit in force from At.
type LimitChange struct {
	At    time.Time
	Limit int
}

// LimitAt returns the limit a start at t is held to: the highest limit in
// force at any time in [t-grace, t]. A contender admitted under the old
// limit just before a shrink writes its start a moment later; grace covers
// that lag.
func LimitAt(changes []LimitChange, t time.Time, grace time.Duration) int {
	limit := 0
	for i, c := range changes {
		end := time.Time{}
		if i+1 < len(changes) {
			end = changes[i+1].At
		}
		if c.At.After(t) {
			break
		}
		if end.IsZero() || end.After(t.Add(-grace)) {
			limit = max(limit, c.Limit)
		}
	}
	return limit
}

// RunnerSpawn is when the harness started one `consullock run` process:
// no admission of that runner can come before it.
type RunnerSpawn struct {
	Worker string
	PID    int
	At     time.Time // on the store's clock (the test process's)
}

// SemaphoreTokenInversions checks, in a semaphore's log (children's own
// tokens in Note as "token=N", see newSemaphoreFront), that every holder's
// token is its own admission's: an execution's token is above the token of
// every execution that had started writing before its runner was spawned
// (spawns). Returns the count and one line of evidence per violation.
//
// The guarantee is on admissions, not on commands: a token is the Raft
// index of its holder's admission, so tokens grow with admission order.
// An execution A that started writing had been admitted before; a runner
// spawned after that was admitted after A, so its token must be higher.
// The order in which commands start is not the admission order: semaphore
// holders are concurrent, and a runner learns of its admission only when
// the answer reaches it (a client node cut off right after the admission
// committed delivers it seconds later; a command slow to start writes its
// first line late), so a holder admitted earlier may start its command
// after a later holder's command has ended. An execution whose runner has
// no spawn record is not judged; judged counts those that were.
func SemaphoreTokenInversions(log []Write, spawns []RunnerSpawn) (n, judged int, examples []string) {
	execs := semaphoreExecutions(log)
	token := func(e *semaphoreExecution) uint64 {
		t, _ := strconv.ParseUint(strings.TrimPrefix(e.note, "token="), 10, 64)
		return t
	}
	// spawned: when e's runner was spawned, the latest spawn of its worker
	// and runner PID at or before its first write.
	spawned := func(e *semaphoreExecution) (time.Time, bool) {
		var at time.Time
		for _, s := range spawns {
			if s.Worker == e.worker && s.PID == e.runnerPID && !s.At.After(e.start) && s.At.After(at) {
				at = s.At
			}
		}
		return at, !at.IsZero()
	}
	for _, e := range execs {
		from, ok := spawned(e)
		if !ok {
			continue
		}
		judged++
		for _, before := range execs {
			if before == e || !before.start.Before(from) {
				continue
			}
			if token(before) >= token(e) {
				n++
				examples = append(examples, fmt.Sprintf("%s (runner %s pid %d spawned at %s) has token %d, not above %d of %s, which had started writing at %s, before that runner existed",
					e.run, e.worker, e.runnerPID, from.Format(time.RFC3339Nano), token(e), token(before), before.run, before.start.Format(time.RFC3339Nano)))
				break
			}
		}
	}
	return n, judged, examples
}

// ControllerEvent is one line of a controller process's history: from its
// JSON log (leadership gained or lost, a write begun or done) or from the
// nemesis (the process killed).
type ControllerEvent struct {
	At      time.Time
	Replica string // controller-N
	// Process is the one process of Replica the event is about (the
	// harness starts a new one after each kill): leadership is a
	// process's, and two processes of one replica are two contenders.
	Process string
	Kind    string // one of the Ctl* kinds
	Detail  string
}

// Controller event kinds.
const (
	CtlBecameLeader = "became leader"
	CtlLostLeader   = "lost leadership"     // also "released leadership"
	CtlKilled       = "killed"              // by the nemesis: nothing after it
	CtlWriting      = "repair writing"      // logged right before a write
	CtlRepaired     = "repaired"            // a write done
	ctlReleased     = "released leadership" // read as CtlLostLeader
)

// ParseControllerLog reads one process's JSON log lines (slog's JSON
// handler: "time", "msg") into events of that process of replica; other
// lines are skipped.
func ParseControllerLog(replica, process string, r io.Reader) ([]ControllerEvent, error) {
	var events []ControllerEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Kind   string    `json:"kind"`
			Reason string    `json:"reason"`
			Lock   string    `json:"lock"`
			Detail string    `json:"detail"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		kind := line.Msg
		switch line.Msg {
		case CtlBecameLeader, CtlLostLeader, CtlWriting, CtlRepaired:
		case ctlReleased:
			kind = CtlLostLeader
		default:
			continue
		}
		events = append(events, ControllerEvent{At: line.Time, Replica: replica, Process: process, Kind: kind, Detail: strings.Join(strings.Fields(strings.Join([]string{line.Kind, line.Reason, line.Lock, line.Detail}, " ")), " ")})
	}
	return events, sc.Err()
}

// ControllerWritesAfterLoss checks the controller processes' histories
// for writes made without leadership: a write (begun or done) by a process
// that by its own log does not lead (it never became leader, or lost
// leadership, or was killed, since), and a write begun after another
// process (of any replica) became leader later than this one did (the
// leader key had then passed on, whatever this process believed). A done
// write with no begun line before it is judged by when it was done.
// Leadership is judged per process, never per replica: a replica's
// processes each contend for the leader key on their own, and a kill of
// one says nothing of another that may still run. The times are the
// processes' own log times: their wall clocks are the host's (a clock skew
// moves only the clock they compare with holders' values, not their log
// lines). Returns the count and one line of evidence per violation.
func ControllerWritesAfterLoss(events []ControllerEvent) (n int, evidence []string) {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(a, b ControllerEvent) int { return a.At.Compare(b.At) })
	proc := func(e ControllerEvent) string { return cmp.Or(e.Process, e.Replica) }
	leading := map[string]bool{}
	since := map[string]time.Time{} // process -> start of its current term
	begun := map[string]time.Time{} // process -> its write in progress
	var takeovers []ControllerEvent // every became-leader event, in order
	check := func(e ControllerEvent, from time.Time) {
		p := proc(e)
		if !leading[p] {
			n++
			evidence = append(evidence, fmt.Sprintf("%s %s %q (%s) while not leading by its own log", e.At.Format(time.RFC3339Nano), p, e.Kind, e.Detail))
			return
		}
		for _, t := range takeovers {
			if proc(t) != p && t.At.After(since[p]) && t.At.Before(from) {
				n++
				evidence = append(evidence, fmt.Sprintf("%s %s %q (%s) begun at %s, after %s became leader at %s",
					e.At.Format(time.RFC3339Nano), p, e.Kind, e.Detail, from.Format(time.RFC3339Nano), proc(t), t.At.Format(time.RFC3339Nano)))
				return
			}
		}
	}
	for _, e := range events {
		p := proc(e)
		switch e.Kind {
		case CtlBecameLeader:
			leading[p], since[p] = true, e.At
			takeovers = append(takeovers, e)
		case CtlLostLeader, CtlKilled:
			leading[p] = false
			delete(begun, p)
		case CtlWriting:
			begun[p] = e.At
			check(e, e.At)
		case CtlRepaired:
			from, ok := begun[p]
			if !ok {
				from = e.At
			}
			delete(begun, p)
			// A write begun within the term was judged when it began;
			// judge it again only by what it began after.
			if ok && leading[p] {
				continue
			}
			check(e, from)
		}
	}
	return n, evidence
}

// The run-once workload's store log: each child writes as worker
// "<run ID>/<runner>" (OnceWorker), and the store's front (the job's own
// guard, as in examples/run-once) applies a run's effect, the accepted
// end of its command, once per run ID: an end of a run already done is
// logged with OnceRepeatNote and not applied again.
const (
	OnceEffectNote = "effect applied"
	OnceRepeatNote = "run already done: effect not applied again"
)

// OnceWorker is the worker name of run-once runner runner for run id.
func OnceWorker(id, runner string) string { return id + "/" + runner }

// OnceRunID is the run ID of a run-once worker name ("" when it is not one).
func OnceRunID(worker string) string {
	id, _, ok := strings.Cut(worker, "/")
	if !ok {
		return ""
	}
	return id
}

// OnceRun is what the history says of one run ID of the run-once
// workload.
type OnceRun struct {
	ID string
	// Effects counts the run's effects the guarded store applied: the
	// accepted ends of its commands (the command exited 0 right after).
	// More than one is a command run to success twice.
	Effects int
	// Repeats counts commands that succeeded after the run's effect was
	// applied, which the job's guard kept from applying it again: the one
	// window the runner guide documents (a command succeeded, its runner
	// died before the release transaction recorded it).
	Repeats int
	// Outcome and the attempt counts are the run ledger's, read after the
	// run's runners exited ("" when it was not read).
	Outcome           string
	Attempts          int
	SucceededAttempts int
	// AttemptOutcomes are the ledger's outcomes of the run's attempts, in
	// order.
	AttemptOutcomes []string
	Exits           map[int]int // the run's runners' exit codes
	Waves           int         // how many times its runners were started
	LedgerError     string      // why the ledger could not be read
	// Stopped: the end of the test stopped its runners (SIGTERM).
	Stopped bool
}

// OnceEffects fills in Effects and Repeats of runs (by run ID) from the
// run-once store's log, adding the run IDs the log names.
func OnceEffects(log []Write, runs map[string]*OnceRun) {
	for _, w := range log {
		id := OnceRunID(w.Worker)
		if w.Kind != KindEnd || !w.Accepted || id == "" {
			continue
		}
		r := runs[id]
		if r == nil {
			r = &OnceRun{ID: id}
			runs[id] = r
		}
		switch w.Note {
		case OnceRepeatNote:
			r.Repeats++
		default:
			r.Effects++
		}
	}
}

// RunOnceViolations checks "exactly one success per run ID": no run
// whose effect was applied more than once, no ledger with two succeeded
// attempts, no ledger that says succeeded without the run's effect in
// the store (a success recorded for a command that did not complete), and
// no more runners exiting 0 (with -exit-code-if-done 122: "the command ran
// and exited 0") than commands that completed.
// Runs that never succeeded (attempts used up, or every runner gone) are
// not violations: the lock promises at most one success, and the ledger
// says which runs missed.
func RunOnceViolations(runs []OnceRun) (n int, evidence []string) {
	for _, r := range runs {
		switch {
		case r.Effects > 1:
			evidence = append(evidence, fmt.Sprintf("run %s: its effect was applied %d times", r.ID, r.Effects))
		case r.SucceededAttempts > 1:
			evidence = append(evidence, fmt.Sprintf("run %s: the ledger records %d succeeded attempts", r.ID, r.SucceededAttempts))
		case r.Outcome == string(ledger.RunSucceeded) && r.Effects == 0:
			evidence = append(evidence, fmt.Sprintf("run %s: the ledger says succeeded, but no command of it completed", r.ID))
		case r.Exits[0] > r.Effects+r.Repeats:
			evidence = append(evidence, fmt.Sprintf("run %s: %d runners exited 0 (ran the command to success), but %d commands completed", r.ID, r.Exits[0], r.Effects+r.Repeats))
		default:
			continue
		}
		n++
	}
	return n, evidence
}

// SuccessExitsNotRecorded checks that a runner that exited 0 (with
// -exit-code-if-done 122: it ran the command, which exited 0) did so for a
// success the run ledger records: no run with more such runners than
// succeeded attempts. One more is a runner that told its scheduler
// "succeeded" while its attempt reads crashed (or running, or lost): the
// next holder then ran the command again, or may. A runner whose outcome
// could not be recorded must exit ExitOutcomeNotRecorded (120) instead.
func SuccessExitsNotRecorded(runs []OnceRun) (n int, evidence []string) {
	for _, r := range runs {
		if r.Exits[0] > r.SucceededAttempts && r.LedgerError == "" {
			n++
			evidence = append(evidence, fmt.Sprintf("run %s: %d runners exited 0, the ledger records %d succeeded attempts (attempts: %s)",
				r.ID, r.Exits[0], r.SucceededAttempts, strings.Join(r.AttemptOutcomes, ", ")))
		}
	}
	return n, evidence
}

// StopAtExitStrike is one FaultStopAtExit that struck: the run and the
// runner stopped as its command exited, the runner's exit code, and
// whether it is judged (no other fault on the run-once workload or the
// cluster was in force or injected while the runner was stopped).
type StopAtExitStrike struct {
	RunID, Worker string
	Exit          int // -1: not seen (the runner still ran at the end)
	Judged        bool
}

// StopAtExitViolations checks the judged strikes: the command exited by
// itself with 0 while its runner was stopped, so the runner must exit 0
// (the command's code) and the run's ledger must record it succeeded, in
// one succeeded attempt, with the run's effect applied once (not lost and
// run again). Returns the count, the strikes judged and one line of
// evidence per violation.
func StopAtExitViolations(strikes []StopAtExitStrike, runs []OnceRun) (n, judged int, evidence []string) {
	byID := map[string]OnceRun{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	for _, s := range strikes {
		if !s.Judged {
			continue
		}
		judged++
		r := byID[s.RunID]
		if s.Exit == 0 && r.Outcome == string(ledger.RunSucceeded) && r.SucceededAttempts == 1 && r.Effects == 1 {
			continue
		}
		n++
		evidence = append(evidence, fmt.Sprintf("run %s: runner %s stopped as its command exited 0 exited %d; ledger %q (attempts: %s), effects applied %d",
			s.RunID, s.Worker, s.Exit, r.Outcome, strings.Join(r.AttemptOutcomes, ", "), r.Effects))
	}
	return n, judged, evidence
}

// GapFigures are the median, the 99th percentile (nearest rank) and the
// longest of gaps; zero when there are none.
func GapFigures(gaps []time.Duration) (p50, p99, longest time.Duration) {
	if len(gaps) == 0 {
		return 0, 0, 0
	}
	d := slices.Clone(gaps)
	slices.Sort(d)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(d)))) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	return rank(0.50), rank(0.99), d[len(d)-1]
}

// QueueLeftovers counts the entries of a waiter queue read when no waiter
// runs any more: gone, those whose session has ended (Consul cleared the
// entry's session, or live says the session no longer exists), which the
// next waiter deletes when it lists the queue; alive, those whose session
// still lives (a waiter killed before its session expired).
func QueueLeftovers(entries []lockmodel.QueueEntry, live func(session string) bool) (gone, alive int) {
	for _, e := range entries {
		if e.Session == "" || !live(e.Session) {
			gone++
		} else {
			alive++
		}
	}
	return gone, alive
}

// QueueCounts are the waiter queue events in runners' logs (lockproto's
// queue.go messages).
type QueueCounts struct {
	First   int // "first in the waiter queue": the waiter tries for the lock
	Behind  int // "waiting in the queue": the waiter waits behind another
	NoGrant int // the token lacks the queue grant: the runner raced instead
	Refused int // Consul refused the entry: the runner raced instead
	// HandedIn counts waiters that woke holding the lock a releasing
	// holder handed them (waiters = "handoff"); HandedOut the holders'
	// side, the releases that handed the lock to the first in line.
	HandedIn, HandedOut int
}

// Queued is how many waits began in the queue.
func (q QueueCounts) Queued() int { return q.First + q.Behind }

// CountQueueLines adds the queue events of a runner's log (slog text
// lines) to q.
func CountQueueLines(r io.Reader, q *QueueCounts) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, `msg="first in the waiter queue`):
			q.First++
		case strings.Contains(line, `msg="waiting in the queue"`):
			q.Behind++
		case strings.Contains(line, `msg="cannot queue for the lock`):
			q.NoGrant++
		case strings.Contains(line, `msg="Consul refused this runner's waiter queue entry`):
			q.Refused++
		case strings.Contains(line, `msg="the previous holder handed the lock to this runner"`):
			q.HandedIn++
		case strings.Contains(line, `msg="lock handed to the first waiter in line"`):
			q.HandedOut++
		}
	}
	return sc.Err()
}

// WaiterKillNote begins the store mark of a waiter kill; the mark goes on
// with "; " + FaultsInForceNote + ": " and the faults on the cluster in
// force when it was injected ("none" for none).
const (
	WaiterKillNote    = "nemesis: SIGKILL the first waiter in line"
	FaultsInForceNote = "cluster faults in force"
)

// IsClusterFaultMark reports whether a store mark is a fault on the
// cluster (the Raft leader killed; a client node frozen, killed or cut
// off): one that may slow every hand-over while in force.
func IsClusterFaultMark(note string) bool {
	return strings.HasPrefix(note, "nemesis: kill Raft leader") || strings.HasPrefix(note, "nemesis: client-")
}

// WaiterKillStall is the stall a waiter kill caused: from the kill's mark
// to the next accepted start in the lock's store.
type WaiterKillStall struct {
	At    time.Time
	Stall time.Duration // -1: no holder started after it
	// Judged: no fault on the cluster was in force at the kill or
	// injected before that start, so the stall is the kill's alone.
	Judged bool
}

// WaiterKillStalls finds the waiter kills in a queued mutex's store log
// (marks beginning with WaiterKillNote) and the stall each caused. A kill
// with a cluster fault in force (its note says so) or injected before the
// next start (IsClusterFaultMark) is not judged: an election or a cut-off
// node adds its own delay. Other faults on the lock need not be excluded:
// each ends within 2 x ttl + lock_delay of its own injection, before the
// kill's bound.
func WaiterKillStalls(log []Write) []WaiterKillStall {
	var out []WaiterKillStall
	for i, w := range log {
		if w.Kind != KindFault || !strings.HasPrefix(w.Note, WaiterKillNote) {
			continue
		}
		_, inForce, _ := strings.Cut(w.Note, FaultsInForceNote+": ")
		k := WaiterKillStall{At: w.At, Stall: -1, Judged: inForce == "none"}
		for _, next := range log[i+1:] {
			if next.Kind == KindFault && IsClusterFaultMark(next.Note) {
				k.Judged = false
			}
			if next.Kind == KindStart && next.Accepted {
				k.Stall = next.At.Sub(w.At)
				break
			}
		}
		if k.Stall < 0 {
			k.Judged = false
		}
		out = append(out, k)
	}
	return out
}
