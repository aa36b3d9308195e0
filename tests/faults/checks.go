package faults

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is what the checkers found in one store log.
type Report struct {
	Fault string
	// Rounds is the number of faults injected (for the clean phase: runs
	// asked for).
	Rounds int
	// Executions is the number of child runs whose start was accepted.
	Executions int
	// HandOvers counts executions that started with a higher token than
	// the one before: one per acquisition of the lock.
	HandOvers int
	// Overlaps (a) counts pairs of executions whose accepted writes overlap
	// in wall time. Must be zero.
	Overlaps int
	// FencedOverlaps counts pairs where an older execution was still
	// writing (and was rejected) after a newer one started: the overlap
	// that the lock alone did not prevent and fencing stopped.
	FencedOverlaps int
	// MaxFencedOverlap is the longest such overlap: from the newer start
	// to the older execution's last (rejected) write.
	MaxFencedOverlap time.Duration
	// StaleAccepted (b) counts accepted writes whose token was lower than
	// one accepted before. Must be zero.
	StaleAccepted int
	// StaleRejected counts writes the store rejected.
	StaleRejected int
	// MaxGap (c) is the longest time with no holder at work between two
	// executions: from the end of one (its last accepted write, or the
	// fault that interrupted it, whichever is later) to the start of the
	// next. WorstCaseGap is the declared bound, 2 x ttl + lock_delay;
	// GapsOverBound counts gaps above it.
	MaxGap, WorstCaseGap time.Duration
	GapsOverBound        int
	// Gaps are those gaps, one per execution after the first, in start
	// order (their distribution: a stalled hand-over shows); negative
	// where the executions overlap.
	Gaps []time.Duration
	// Completed executions wrote an accepted end. Interrupted (d, lost)
	// executions did not: killed, stopped by lock loss, or fenced; their
	// work must be retried by whoever schedules it.
	Completed, Interrupted int
	// Duplicated (d) counts tokens under which more than one execution
	// started: one acquisition running the job twice. Must be zero.
	Duplicated int
	// Exits counts the runners' exit codes (filled in by the harness).
	Exits map[int]int
}

type execution struct {
	run, worker        string
	token              uint64
	start              time.Time // accepted start
	lastAccepted       time.Time
	lastAttempt        time.Time // including rejected writes
	completed, aborted bool
}

// Check runs the checkers on a store log (in Seq order).
func Check(fault string, log []Write, worstCaseGap time.Duration) Report {
	rep := Report{Fault: fault, WorstCaseGap: worstCaseGap}
	execs, faults := replay(log, &rep)
	slices.SortFunc(execs, func(a, b *execution) int { return a.start.Compare(b.start) })
	rep.Executions = len(execs)
	tokens := map[uint64]int{}
	for i, e := range execs {
		tokens[e.token]++
		if e.completed {
			rep.Completed++
		} else {
			rep.Interrupted++
		}
		if i > 0 && e.token > execs[i-1].token {
			rep.HandOvers++
		}
		for _, earlier := range execs[:i] {
			if e.start.Before(earlier.lastAccepted) {
				rep.Overlaps++
			} else if e.start.Before(earlier.lastAttempt) {
				rep.FencedOverlaps++
				rep.MaxFencedOverlap = max(rep.MaxFencedOverlap, earlier.lastAttempt.Sub(e.start))
			}
		}
		if i == 0 {
			continue
		}
		prev := execs[i-1]
		from := prev.lastAccepted
		if !prev.completed && !prev.aborted {
			// Interrupted without a word: it stopped working at the last
			// fault injected while it held the lock, if any.
			for _, f := range faults {
				if f.After(from) && f.Before(e.start) {
					from = f
				}
			}
		}
		gap := e.start.Sub(from)
		rep.Gaps = append(rep.Gaps, gap)
		rep.MaxGap = max(rep.MaxGap, gap)
		if gap > worstCaseGap {
			rep.GapsOverBound++
		}
	}
	for _, n := range tokens {
		if n > 1 {
			rep.Duplicated += n - 1
		}
	}
	return rep
}

// replay walks the log: the executions (runs whose start was accepted) with
// their last writes, the fault times, and the stale writes counted in rep.
func replay(log []Write, rep *Report) ([]*execution, []time.Time) {
	byRun := map[string]*execution{}
	var execs []*execution
	var faults []time.Time
	var highest uint64
	for _, w := range log {
		if w.Kind == KindFault {
			faults = append(faults, w.At)
			continue
		}
		// (b) recomputed from the log, independently of the store's
		// decision: an accepted token below one accepted earlier.
		if w.Accepted {
			if w.Token < highest {
				rep.StaleAccepted++
			}
			highest = max(highest, w.Token)
		} else {
			rep.StaleRejected++
		}
		e := byRun[w.Run]
		if e == nil {
			if w.Kind != KindStart || !w.Accepted {
				continue // a run whose start was refused never worked
			}
			e = &execution{run: w.Run, worker: w.Worker, token: w.Token, start: w.At}
			byRun[w.Run] = e
			execs = append(execs, e)
		}
		e.lastAttempt = w.At
		if w.Accepted {
			e.lastAccepted = w.At
			switch w.Kind {
			case KindEnd:
				e.completed = true
			case KindAbort:
				e.aborted = true
			}
		}
	}
	return execs, faults
}

// Table renders reports as a Markdown table, with a total row.
func Table(reports []Report) string {
	var b strings.Builder
	b.WriteString("| fault | rounds | executions | hand-overs | overlaps (accepted) | overlaps stopped by fencing | longest fenced overlap | stale accepted | stale rejected | completed | interrupted | duplicated | max gap | worst_case_gap | gaps over bound | runner exits |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	var total Report
	total.Fault = "**total**"
	for _, r := range reports {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %d | %d | %d | %d | %d | %s | %s | %d | %s |\n",
			r.Fault, r.Rounds, r.Executions, r.HandOvers, r.Overlaps, r.FencedOverlaps, r.MaxFencedOverlap.Round(time.Millisecond), r.StaleAccepted, r.StaleRejected,
			r.Completed, r.Interrupted, r.Duplicated, r.MaxGap.Round(10*time.Millisecond), r.WorstCaseGap, r.GapsOverBound, exits(r.Exits))
		total.Rounds += r.Rounds
		total.Executions += r.Executions
		total.HandOvers += r.HandOvers
		total.Overlaps += r.Overlaps
		total.FencedOverlaps += r.FencedOverlaps
		total.StaleAccepted += r.StaleAccepted
		total.StaleRejected += r.StaleRejected
		total.Completed += r.Completed
		total.Interrupted += r.Interrupted
		total.Duplicated += r.Duplicated
		total.GapsOverBound += r.GapsOverBound
	}
	fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | | %d | %d | %d | %d | %d | | | %d | |\n",
		total.Fault, total.Rounds, total.Executions, total.HandOvers, total.Overlaps, total.FencedOverlaps, total.StaleAccepted,
		total.StaleRejected, total.Completed, total.Interrupted, total.Duplicated, total.GapsOverBound)
	return b.String()
}

func exits(m map[int]int) string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d×%d", code, m[code]))
	}
	return strings.Join(parts, " ")
}

// semaphoreExecution is one run in a semaphore workload's store log (its
// writes are not fenced, so none is refused): the child's note (its own
// "token=N", see newSemaphoreFront), its first and last write, and when it
// completed (zero when it did not).
type semaphoreExecution struct {
	run, note   string
	worker      string
	runnerPID   int
	start, last time.Time
	end         time.Time
}

// semaphoreExecutions rebuilds the executions of a semaphore's log, in
// the order they started writing.
func semaphoreExecutions(log []Write) []*semaphoreExecution {
	byRun := map[string]*semaphoreExecution{}
	var execs []*semaphoreExecution
	for _, w := range log {
		if w.Kind == KindFault {
			continue
		}
		e := byRun[w.Run]
		if e == nil {
			if w.Kind != KindStart {
				continue
			}
			e = &semaphoreExecution{run: w.Run, note: w.Note, worker: w.Worker, runnerPID: w.RunnerPID, start: w.At}
			byRun[w.Run] = e
			execs = append(execs, e)
		}
		e.last = w.At
		if w.Kind == KindEnd {
			e.end = w.At
		}
	}
	return execs
}
