package runner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// permutations returns every ordering of events.
func permutations(events []string) [][]string {
	if len(events) <= 1 {
		return [][]string{append([]string(nil), events...)}
	}
	var out [][]string
	for i := range events {
		rest := append(append([]string(nil), events[:i]...), events[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{events[i]}, p...))
		}
	}
	return out
}

// Issue 44, hole 3: the outcome is decided once, from what reached the
// command before it exited, in every order the events can arrive. Each
// ordering is a sequence of what happened at the command, as the guard
// reports it: "exit" (the command exited with code 0), "expire" (the
// guard's kill-by passed and it killed the tree), "deliver" (the guard
// delivered the runner's stop signal). The runner sent a stop (of cause
// stopCause) whenever "deliver" is in the sequence, or when the loss
// judge's verdict came after the exit ("verdict-late": sent, never
// delivered). The want is the rule: lost (or timed_out) only if a stop
// reached the command before its exit; its own exit code otherwise.
func TestDecideOutcome_everyOrdering(t *testing.T) {
	zero := 0
	for _, cause := range []stopCause{stopLoss, stopDeadline, stopCancel} {
		for _, events := range [][]string{
			{"exit"},
			{"exit", "expire"},
			{"exit", "deliver"},
			{"exit", "expire", "deliver"},
			{"exit", "verdict-late"},
			{"exit", "expire", "verdict-late"},
		} {
			for _, order := range permutations(events) {
				name := fmt.Sprintf("%d/%s", cause, strings.Join(order, ","))
				t.Run(name, func(t *testing.T) {
					var r commandReports
					var sent []stopSent
					seq := int64(0)
					for _, e := range order {
						switch e {
						case "exit":
							r.see(msgExited, 0)
						case "expire":
							r.see(msgExpired, 1)
						case "deliver":
							seq++
							sent = append(sent, stopSent{cause: cause, seq: seq})
							r.see(msgDelivered, seq) // the guard reports a delivery only before the exit, but see must cope
						case "verdict-late":
							seq++
							sent = append(sent, stopSent{cause: cause, seq: seq}) // the guard found the command gone: no report
						}
					}
					var want ledger.RunOutcome
					first, expired := "", false
					for _, e := range order {
						if e == "exit" {
							break
						}
						expired = expired || e == "expire"
						if first == "" && e == "deliver" {
							first = e
						}
					}
					switch {
					case expired: // the guard's kill ended it, whatever else was on its way
						want = ledger.RunLost
					case first == "deliver" && cause == stopLoss:
						want = ledger.RunLost
					case first == "deliver" && cause == stopDeadline:
						want = ledger.RunTimedOut
					default:
						want = ledger.RunSucceeded
					}
					got, code := decideOutcome(true, &zero, stopBeforeExit(r, sent, true), 125)
					if got != want {
						t.Fatalf("outcome %s, want %s", got, want)
					}
					if want == ledger.RunSucceeded && (code == nil || *code != 0) {
						t.Fatalf("exit code %v, want the command's own 0", code)
					}
				})
			}
		}
	}
}

// The cases without a guard and before a start.
func TestDecideOutcome_unguardedAndNotStarted(t *testing.T) {
	one := 1
	for _, tc := range []struct {
		name    string
		started bool
		own     *int
		stop    stopCause
		want    ledger.RunOutcome
		code    int // -1: none
	}{
		{"never started", false, nil, stopNone, ledger.RunFailed, 125},
		{"lost before the start", false, nil, stopLoss, ledger.RunLost, -1},
		{"failed by itself", true, &one, stopNone, ledger.RunFailed, 1},
		{"cancelled: its own code", true, &one, stopCancel, ledger.RunFailed, 1},
		{"stopped for the loss", true, &one, stopLoss, ledger.RunLost, -1},
		{"stopped at max_runtime", true, &one, stopDeadline, ledger.RunTimedOut, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code := decideOutcome(tc.started, tc.own, tc.stop, 125)
			if got != tc.want {
				t.Fatalf("outcome %s, want %s", got, tc.want)
			}
			if (tc.code < 0) != (code == nil) || (code != nil && *code != tc.code) {
				t.Fatalf("exit code %v, want %d", code, tc.code)
			}
		})
	}
	// Without a guard a stop sent before the exit was seen counts.
	if got := stopBeforeExit(commandReports{}, []stopSent{{cause: stopLoss}}, false); got != stopLoss {
		t.Fatalf("unguarded stop: %d, want stopLoss", got)
	}
}
