package status

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return dash(id)
}

func kindText(l Lock) string {
	if l.Kind == "semaphore" {
		return fmt.Sprintf("semaphore %d", l.Limit)
	}
	return "mutex"
}

func verdict(l Lock) string {
	switch {
	case l.Pending && l.Compliant:
		return "pending"
	case l.Compliant:
		return "yes"
	case l.State != "held" && l.AlwaysHeld && len(l.Findings) == 0:
		return "NO: unheld"
	}
	var rs []string
	for _, f := range l.Findings {
		r := f.Kind
		if len(f.Reasons) > 0 {
			r = strings.Join(f.Reasons, ",")
		}
		rs = append(rs, r)
	}
	return "NO: " + strings.Join(rs, ";")
}

// renderTable prints one row per holder (one per lock without a holder).
func renderTable(w io.Writer, rep *Report) {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tKEY\tKIND\tSTATE\tNODE\tSESSION\tHELD FOR\tTOKEN\tLOCKINDEX\tWAITING\tPROFILE\tMAX HOLD\tSINCE HANDOVER\tLAST RUN\tRUN STATE\tNEXT SLOT\tCOMPLIANT")
	for _, l := range rep.Locks {
		waiting := "-"
		if l.Contenders != nil {
			waiting = fmt.Sprint(*l.Contenders)
		} else if l.Queue != nil {
			waiting = fmt.Sprint(waitingInQueue(l.Queue))
		}
		since := "-"
		if l.SinceHandover != nil {
			since = *l.SinceHandover
		}
		state := l.State
		if l.Kind == "semaphore" && l.State != "missing" {
			state = fmt.Sprintf("%s %d/%d", l.State, len(l.Holders), l.Limit)
		}
		if l.Paused != nil {
			state += " PAUSED (" + l.Paused.Reason + ")"
		}
		lead := fmt.Sprintf("%s\t%s\t%s\t%s", l.Name, l.Key, kindText(l), state)
		next := "-"
		if l.NextSlot != nil {
			next = *l.NextSlot
		}
		tail := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", l.LockIndex, waiting, dash(l.SessionDefaults), dash(l.MaxHold), since, lastRunText(l.LastRun), runStateText(l.RunState), next, verdict(l))
		if len(l.Holders) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", lead, tail)
			continue
		}
		for i, h := range l.Holders {
			if i > 0 {
				lead, tail = "\t\t\t", "\t\t\t\t\t\t\t\t"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", lead, dash(h.Node), short(h.Session), dash(h.HeldFor), h.FencingToken, tail)
		}
	}
	_ = tw.Flush()
	for _, line := range strings.SplitAfter(table.String(), "\n") {
		fmt.Fprint(w, strings.TrimRight(line, " \n")+strings.Repeat("\n", strings.Count(line, "\n")))
	}
	for _, u := range rep.Undeclared {
		fmt.Fprintf(w, "undeclared lock-like key %s (session %s, flags %s)\n", u.Key, dash(u.Session), u.Flags)
	}
	for _, b := range rep.BadRecords {
		fmt.Fprintf(w, "unreadable record %s: %s\n", b.Key, b.Error)
	}
	s := rep.Summary
	pending := ""
	if s.Pending > 0 {
		pending = fmt.Sprintf(", pending an apply: %d", s.Pending)
	}
	fmt.Fprintf(w, "%d locks, %d held, findings: %d, always-held without a holder: %d%s (%d Consul requests)\n",
		s.Locks, s.Held, s.Violations, s.Unheld, pending, rep.ConsulRequests)
}

// renderDetail prints one lock with its holders' sessions and findings.
func renderDetail(w io.Writer, l Lock) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Lock:", l.Name)
	row("Key:", l.Key)
	row("Kind:", kindText(l))
	row("State:", l.State)
	if l.Paused != nil {
		by := l.Paused.By
		if l.Paused.Accessor != "" {
			by += " (token " + l.Paused.Accessor + ")"
		}
		row("Paused:", fmt.Sprintf("PAUSED by %s at %s: %s (new runs do not start; resume with consullock resume -lock %s)", by, l.Paused.At, l.Paused.Reason, l.Name))
	}
	if l.FencingToken != nil {
		row("Fencing token:", fmt.Sprint(*l.FencingToken))
	} else {
		row("Fencing token:", "- (no holder)")
	}
	row("LockIndex:", fmt.Sprint(l.LockIndex))
	if l.Contenders != nil {
		row("Waiting:", fmt.Sprint(*l.Contenders))
	}
	if l.Queue != nil {
		row("Waiters:", fmt.Sprintf("%s (%d waiting)", l.Waiters, waitingInQueue(l.Queue)))
	}
	row("Session profile:", dash(l.SessionDefaults))
	row("Worst-case gap:", dash(l.WorstCaseGap))
	row("Max hold:", dash(l.MaxHold))
	row("Always held:", fmt.Sprint(l.AlwaysHeld))
	if l.SinceHandover != nil {
		row("Since hand-over:", *l.SinceHandover)
	}
	if l.RunState != nil {
		row("Run state:", runStateText(l.RunState))
	}
	row("Compliant:", verdict(l))
	_ = tw.Flush()
	for _, h := range l.Holders {
		fmt.Fprintf(w, "\nHolder %s\n", h.Session)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
		row("Node:", dash(h.Node))
		row("Session name:", dash(h.SessionName))
		row("Fencing token:", fmt.Sprint(h.FencingToken))
		if h.HeldFor != "" {
			row("Held for:", h.HeldFor+" (from the start time the holder wrote, not after now)")
		} else {
			row("Held for:", "unknown (the holder value carries no start time, as `consul lock`'s)")
		}
		row("TTL:", dash(h.TTL))
		row("Lock delay:", dash(h.LockDelay))
		row("Behavior:", dash(h.Behavior))
		row("Node checks:", dash(strings.Join(h.NodeChecks, ", ")))
		row("Service checks:", dash(strings.Join(h.ServiceCheck, ", ")))
		row("Value:", dash(h.Value))
		if s := h.Service; s != nil {
			row("Service:", fmt.Sprintf("%s (%s:%d, %s; %s.service.consul)", s.ID, s.Address, s.Port, s.Status, s.Name))
		}
		if h.Compliant {
			row("Compliant:", "yes")
		} else {
			row("Compliant:", "NO: "+strings.Join(h.Violations, ", "))
		}
		_ = tw.Flush()
	}
	renderQueue(w, l.Waiters, l.Queue)
	renderRuns(w, l.Runs)
	renderSlots(w, l)
	if len(l.Findings) > 0 {
		fmt.Fprintln(w, "\nFindings (the controller's Decide, observe mode):")
		for _, f := range l.Findings {
			fmt.Fprintf(w, "  %s: %s\n", f.Kind, f.Detail)
		}
	}
}

// runStateText is the RUN STATE column: the run state in capitals
// (EXHAUSTED, PAUSED, MISSED, RUNNING, FAILED, SUCCEEDED, ...), "-" without.
func runStateText(s *string) string {
	if s == nil {
		return "-"
	}
	return strings.ToUpper(*s)
}

// lastRunText is the LAST RUN column: run ID, outcome, attempts/max.
func lastRunText(r *LockRun) string {
	if r == nil {
		return "-"
	}
	if r.NotBefore != nil {
		return fmt.Sprintf("%s %s %d/%d, next not before %s", r.RunID, r.Outcome, r.Attempts, r.MaxAttempts, *r.NotBefore)
	}
	return fmt.Sprintf("%s %s %d/%d", r.RunID, r.Outcome, r.Attempts, r.MaxAttempts)
}

// renderRuns prints the run history of -lock NAME, newest first, one line
// per attempt.
func renderRuns(w io.Writer, runs []LockRun) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nRuns (the run ledger, newest first):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RUN ID\tOUTCOME\tATTEMPT\tNODE\tTOKEN\tSTARTED\tFINISHED\tEXIT\tREASON")
	for _, r := range runs {
		for i, a := range r.AttemptList {
			id, outcome := r.RunID, r.Outcome
			if i > 0 {
				id, outcome = "", ""
			}
			finished, exit := "-", "-"
			if a.Finished != nil {
				finished = *a.Finished
			}
			if a.ExitCode != nil {
				exit = fmt.Sprint(*a.ExitCode)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d/%d %s\t%s\t%d\t%s\t%s\t%s\t%s\n", id, outcome, a.Attempt, r.MaxAttempts, a.Outcome,
				dash(a.Node), a.FencingToken, a.Started, finished, exit, terminalSafe(reasonText(a)))
		}
		if r.NotBefore != nil {
			fmt.Fprintf(tw, "  \tnext attempt not before %s (run_once.retry_after)\n", *r.NotBefore)
		}
	}
	_ = tw.Flush()
	renderOutputs(w, runs)
}

// reasonText is an attempt's REASON: why it was lost, or who released it
// and why; "-" when unknown.
func reasonText(a LockRunAttempt) string {
	if a.ReleasedBy != "" {
		by := a.ReleasedBy
		if a.ReleasedByAccessor != "" {
			by += " (token " + a.ReleasedByAccessor + ")"
		}
		return "released by " + by + ": " + a.Reason
	}
	return dash(a.Reason)
}

// renderOutputs prints the stdout and stderr tails the attempts kept
// (-keep-output), each line indented, after the history.
func renderOutputs(w io.Writer, runs []LockRun) {
	for _, r := range runs {
		for _, a := range r.AttemptList {
			for _, o := range []struct{ name, text string }{{"Stdout", a.Stdout}, {"Stderr", a.Output}} {
				if o.text == "" {
					continue
				}
				fmt.Fprintf(w, "\n%s of %s attempt %d (its last %d bytes):\n", o.name, r.RunID, a.Attempt, len(o.text))
				for _, line := range strings.Split(strings.TrimRight(o.text, "\n"), "\n") {
					fmt.Fprintf(w, "  | %s\n", terminalSafe(line))
				}
			}
		}
	}
}

// renderSlots prints a run_once lock's next slot and its missed slots.
func renderSlots(w io.Writer, l Lock) {
	if l.NextSlot == nil {
		return
	}
	fmt.Fprintf(w, "\nNext slot: %s\n", *l.NextSlot)
	if len(l.MissedSlots) == 0 {
		return
	}
	fmt.Fprintf(w, "Missed slots (no run in the ledger; run them with consullock backfill -lock %s -from T1 -to T2 -- CMD):\n", l.Name)
	for _, id := range l.MissedSlots {
		fmt.Fprintf(w, "  %s\n", id)
	}
}

// renderQueue prints a queued mutex's waiters in line, the stale entries
// (their session gone) last; nothing for a lock whose waiters race. The
// heading says what position 0 gets at the next release: with "handoff"
// the releasing runner gives it the lock, with "queue" it tries for it.
func renderQueue(w io.Writer, waiters string, q []QueueWaiter) {
	if len(q) == 0 {
		return
	}
	next := "tries for the lock next"
	if waiters == lockmodel.WaitersHandOff {
		next = "is next, handed the lock by a releasing runner"
	}
	fmt.Fprintf(w, "\nWaiting (%s, in line; position 0 %s):\n", waiters, next)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  POSITION\tSESSION\tNODE\tPID")
	for _, e := range q {
		position, pid := "stale", "-"
		if e.Position != nil {
			position = fmt.Sprint(*e.Position)
		}
		if e.PID != 0 {
			pid = fmt.Sprint(e.PID)
		}
		note := ""
		if e.Stale {
			note = "  (session gone: the next waiter to list the queue deletes the entry)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s%s\n", position, e.Session, dash(e.Node), pid, note)
	}
	_ = tw.Flush()
}

// terminalSafe is s with control characters other than tab shown as '?', so
// that a command's stderr cannot drive the terminal status prints to.
func terminalSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			return '?'
		}
		return r
	}, s)
}
