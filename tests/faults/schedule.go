package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// ScheduleConfig shapes a schedule.
type ScheduleConfig struct {
	Length           time.Duration // no step starts after it
	MinGap, MaxGap   time.Duration // between two steps
	Clients          int           // client nodes client-1..client-N
	Controllers      int           // controller replicas controller-1..controller-N
	Limits           []int         // the semaphore limits a resize picks from
	ProfileVariants  int           // profile variants a profile change picks from (1..N)
	MinFor, MaxFor   time.Duration // how long an undone fault lasts
	MinSkew, MaxSkew time.Duration // how far a clock skew moves a clock, either way
	Mutex, Semaphore string        // the two locks' targets
	Once             string        // the run-once lock's target
	// HandOff is the target of the mutex whose waiters hand off ("" for
	// none): its holders are faulted as the mutex's are, and its profile
	// changes.
	HandOff string
	// Queued are the mutexes whose waiters queue: a waiter kill picks one
	// (none: no waiter kills).
	Queued []string
	// TreeKill is the target of runner-and-guard-kill, the workload whose
	// runners run with -tree-protection pid-namespace ("" for none: no
	// such kills).
	TreeKill string
	// MinStop, MaxStop: how long stop-at-once-exit keeps a run-once runner
	// stopped (StopAtExitWindow).
	MinStop, MaxStop time.Duration
}

// NemesisConfig is TestNemesis's schedule shape for a run of length: a
// fault every 1 to 4s (over 600 in 30 minutes), undone after 1 to 15s,
// on 3 client nodes and 2 controller replicas, a semaphore resized
// between limits 2 and 3, clocks moved by 30s to 3 minutes either way,
// two queued mutexes (waiters = "queue" and "handoff"), the hand-off
// mutex's runners in PID namespaces (runner-and-guard-kill's target), and
// run-once runners stopped at their command's exit for StopAtExitWindow.
func NemesisConfig(length time.Duration) ScheduleConfig {
	minStop, maxStop := StopAtExitWindow(NemesisOnceProfile, NemesisOnceGrace)
	return ScheduleConfig{
		Length: length, MinGap: time.Second, MaxGap: 4 * time.Second,
		Clients: 3, Controllers: 2, Limits: []int{2, 3}, ProfileVariants: 2,
		MinFor: time.Second, MaxFor: 15 * time.Second, MinSkew: 30 * time.Second, MaxSkew: 3 * time.Minute,
		Mutex: "mutex", Semaphore: "semaphore", Once: "once", HandOff: "handoff", Queued: []string{"mutex", "handoff"},
		TreeKill: "handoff", MinStop: minStop, MaxStop: maxStop,
	}
}

// FaultSpec is what a schedule knows of a kind of fault besides how it
// draws its step: its name, its chance against the other kinds', the
// group of targets it keeps busy until undone, and when it can be drawn.
type FaultSpec struct {
	Name   FaultKind
	Weight int
	// Group is the group of targets it keeps busy until it is undone and
	// MinGap after ("" for none): no two faults of a group overlap.
	Group string
	// Needs reports whether a configuration has its target (nil: every
	// configuration has).
	Needs func(ScheduleConfig) bool
	// AtExit: it strikes not at its step's time but as the next run-once
	// command ends, within OnceExitArmed (skipped when none does).
	AtExit bool
	// OnCluster: a fault on the servers or a client node, which may slow
	// every hand-over while in force (other faults' marks name it).
	OnCluster bool
}

// scheduledFault is the part of a fault the schedule reads: the nemesis's
// Fault (nemesis_faults_test.go) adds how it is injected.
type scheduledFault interface {
	Spec() FaultSpec
	// Draw draws the step's target, duration and value from sc, whose
	// lock, fenced and profiled are the step's choices (lock drawn).
	Draw(sc *scheduler, s *Step)
}

// occupier is a fault that keeps more busy than its group, or longer.
type occupier interface {
	Occupy(sc *scheduler, s Step)
}

// scheduleOf is the schedule for seed over faults (in the order of their
// draws: reordering them changes every seed's schedule): a pure function
// of its arguments, so that a failing run is replayed from its seed. A
// fault is drawn among those whose group is free (FaultSpec.Group, plus
// what an occupier keeps busy). Faults on the servers never overlap (a
// second leader kill before the first server is back would leave no
// quorum), nor do faults on client nodes (a node faulted twice at once is
// not two faults), nor two kills or skews of controller replicas (both
// replicas down leaves nothing to check), nor two clock skews. A fault on
// one holder picks among sc's locks: the mutex, the semaphore, the
// run-once lock or the hand-off mutex; its fenced ones (the mutexes, run
// once) for the faults that need a fencing token; the run-once lock is
// left out while the "once" group is busy (a stop at a run-once command's
// exit is judged only with no other fault on its run).
func scheduleOf(seed uint64, cfg ScheduleConfig, faults []scheduledFault) []Step {
	sc := newScheduler(seed, cfg, faults)
	var steps []Step
	for at := sc.between(cfg.MinGap, cfg.MaxGap); at <= cfg.Length; at += sc.between(cfg.MinGap, cfg.MaxGap) {
		f := sc.pick(at)
		s := sc.step(at, f)
		sc.occupy(f, s)
		steps = append(steps, s)
	}
	return steps
}

// scheduler holds one schedule's draw: its random source (the order of
// its draws is the seed's meaning: never reorder them), when each group
// of targets is free again, the semaphore's current limit, and the
// current step's lock choices.
type scheduler struct {
	r      *rand.Rand
	cfg    ScheduleConfig
	faults []scheduledFault
	busy   map[string]time.Duration
	limit  int
	// lock is the step's drawn lock (every step draws one); fenced and
	// profiled the locks a fencing fault or a profile change picks from.
	lock             string
	fenced, profiled []string
}

func newScheduler(seed uint64, cfg ScheduleConfig, faults []scheduledFault) *scheduler {
	faults = slices.DeleteFunc(slices.Clone(faults), func(f scheduledFault) bool {
		needs := f.Spec().Needs
		return needs != nil && !needs(cfg)
	})
	sc := &scheduler{
		r:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cfg:    cfg,
		faults: faults,
		busy:   map[string]time.Duration{},
	}
	if len(cfg.Limits) > 0 {
		sc.limit = cfg.Limits[0]
	}
	return sc
}

func (sc *scheduler) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(sc.r.Int64N(int64(hi-lo)))
}

// intN draws a number in [0, n).
func (sc *scheduler) intN(n int) int { return sc.r.IntN(n) }

// lasting draws how long an undone fault lasts.
func (sc *scheduler) lasting() time.Duration { return sc.between(sc.cfg.MinFor, sc.cfg.MaxFor) }

// free reports whether group is free at at.
func (sc *scheduler) free(group string, at time.Duration) bool { return sc.busy[group] <= at }

// occupyUntil keeps group busy until end at least.
func (sc *scheduler) occupyUntil(group string, end time.Duration) {
	sc.busy[group] = max(sc.busy[group], end)
}

// pick draws the fault at at among those whose group is free.
func (sc *scheduler) pick(at time.Duration) scheduledFault {
	free := func(f scheduledFault) bool { g := f.Spec().Group; return g == "" || sc.free(g, at) }
	total := 0
	for _, f := range sc.faults {
		if free(f) {
			total += f.Spec().Weight
		}
	}
	pick := sc.r.IntN(total)
	for _, f := range sc.faults {
		if !free(f) {
			continue
		}
		w := f.Spec().Weight
		if pick < w {
			return f
		}
		pick -= w
	}
	return nil
}

// step draws the lock of the fault f at at, then f draws its target,
// duration and value.
func (sc *scheduler) step(at time.Duration, f scheduledFault) Step {
	cfg := sc.cfg
	s := Step{At: at, Kind: f.Spec().Name}
	locks := []string{cfg.Mutex, cfg.Semaphore}
	fenced := []string{cfg.Mutex}
	profiled := []string{cfg.Mutex, cfg.Semaphore}
	if cfg.Once != "" {
		locks, fenced = append(locks, cfg.Once), append(fenced, cfg.Once)
	}
	if cfg.HandOff != "" {
		locks, fenced, profiled = append(locks, cfg.HandOff), append(fenced, cfg.HandOff), append(profiled, cfg.HandOff)
	}
	if !sc.free("once", at) {
		// A stop at a run-once command's exit is in force: its run
		// is judged only with no other fault on the run-once lock.
		locks = slices.DeleteFunc(locks, func(l string) bool { return l == cfg.Once })
		fenced = slices.DeleteFunc(fenced, func(l string) bool { return l == cfg.Once })
	}
	sc.lock, sc.fenced, sc.profiled = locks[sc.r.IntN(len(locks))], fenced, profiled
	f.Draw(sc, &s)
	return s
}

// client draws a client node, client-1..client-N.
func (sc *scheduler) client() string { return fmt.Sprintf("client-%d", 1+sc.r.IntN(sc.cfg.Clients)) }

// controller draws a controller replica, controller-1..controller-N.
func (sc *scheduler) controller() string {
	return fmt.Sprintf("controller-%d", 1+sc.r.IntN(max(1, sc.cfg.Controllers)))
}

// occupy marks the targets of s busy. A group is busy until the fault is
// undone and a little after: a restarted server must be promoted to voter
// again. An occupier adds its own.
func (sc *scheduler) occupy(f scheduledFault, s Step) {
	if g := f.Spec().Group; g != "" {
		sc.occupyUntil(g, s.At+s.For+sc.cfg.MinGap)
	}
	if o, ok := f.(occupier); ok {
		o.Occupy(sc, s)
	}
}
