package faults

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault is one kind of fault the nemesis injects, shaped as etcd's
// robustness failpoints (tests/robustness/failpoint): one type, in a
// fault_*_test.go file of its own, that says what the schedule needs of
// it (Spec, Draw, and Occupy where it keeps more busy than its group) and
// how it strikes (Inject). The registry, nemesisFaults, lists each once;
// the schedule, the injector and the summary read it. A new fault is its
// file plus one line in nemesisFaults.
type Fault interface {
	scheduledFault
	// Inject strikes sh on n's cluster and workloads: undo (nil: none) is
	// run sh.s.For later, or at the end of the schedule; !ok counts the
	// step skipped (no holder at that moment, a cluster not healthy, a
	// replica down already). A FaultSpec.AtExit fault is injected as the
	// run-once command sh.end ends.
	Inject(n *nemesis, sh shot) (undo func(), ok bool)
}

// shot is one injection: step i of the schedule, s, the run's wait group
// (for what the fault leaves running), and for an AtExit fault the end of
// the run-once command it strikes at.
type shot struct {
	i   int
	s   Step
	wg  *sync.WaitGroup
	end Write
}

// nemesisFaults is the registry: every fault the nemesis injects, once.
// Its order is the order of the schedule's draws (reordering it changes
// every seed's schedule: append a new fault at the end) and of the
// summary's rows.
var nemesisFaults = []Fault{
	leaderKill{}, clientFreeze{}, clientKill{}, clientCut{}, runnerFreeze{}, runnerKill{}, keyDelete{},
	sessionDestroy{}, profileChange{}, poolResize{}, controllerKill{}, clockSkew{}, onceExit{}, waiterKill{},
	groupKill{}, runnerAndGuardKill{}, stopAtExit{},
}

// FaultKinds lists every kind, in the registry's order.
var FaultKinds = func() []FaultKind {
	kinds := make([]FaultKind, len(nemesisFaults))
	for i, f := range nemesisFaults {
		kinds[i] = f.Spec().Name
	}
	return kinds
}()

// faultNamed is the registry's fault of kind (nil: none).
func faultNamed(kind FaultKind) Fault {
	for _, f := range nemesisFaults {
		if f.Spec().Name == kind {
			return f
		}
	}
	return nil
}

// Schedule is the nemesis's schedule for seed over the registry's faults
// (scheduleOf): a pure function of its arguments, so that a failing run
// is replayed from its seed.
func Schedule(seed uint64, cfg ScheduleConfig) []Step {
	faults := make([]scheduledFault, len(nemesisFaults))
	for i, f := range nemesisFaults {
		faults[i] = f
	}
	return scheduleOf(seed, cfg, faults)
}

// valueFormatter is a fault whose step's Value is not a plain number.
type valueFormatter interface {
	formatValue(v int) string
}

func (s Step) String() string {
	out := fmt.Sprintf("%8s %-16s %-12s", s.At.Round(time.Millisecond), s.Kind, s.Target)
	if s.For > 0 {
		out += " for " + s.For.Round(time.Millisecond).String()
	}
	if f, ok := faultNamed(s.Kind).(valueFormatter); ok {
		out += " " + f.formatValue(s.Value)
	} else if s.Value != 0 {
		out += " value " + strconv.Itoa(s.Value)
	}
	return strings.TrimRight(out, " ")
}

// FormatSchedule prints a schedule one step a line, with its seed.
func FormatSchedule(seed uint64, steps []Step) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis schedule, seed %d, %d steps (offset, fault, target):\n", seed, len(steps))
	for _, s := range steps {
		b.WriteString("  " + s.String() + "\n")
	}
	return b.String()
}
