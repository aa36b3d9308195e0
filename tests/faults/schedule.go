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

// Schedule is the nemesis's schedule for seed: a pure function of its
// arguments, so that a failing run is replayed from its seed. Faults on
// the servers never overlap (a second leader kill before the first
// server is back would leave no quorum), nor do faults on client nodes (a
// node faulted twice at once is not two faults), nor two kills or skews
// of controller replicas (both replicas down leaves nothing to check),
// nor two clock skews. The faults on one holder (kill, freeze, session
// destroyed, key deleted) pick the mutex, the semaphore, the run-once
// lock or the hand-off mutex; freezes only the fenced ones (the mutexes,
// run once); a group kill any of them; a kill of runner and guard
// together only TreeKill's. A waiter kill picks one of the queued
// mutexes. A stop at a run-once command's exit, like a fault on the
// servers timed to it, keeps the servers free while armed and in force;
// it also keeps the client nodes, the clocks and the run-once lock free
// until StopAtExitJudged after its wake-up, so that its run is judged.
func Schedule(seed uint64, cfg ScheduleConfig) []Step {
	sc := newScheduler(seed, cfg)
	var steps []Step
	for at := sc.between(cfg.MinGap, cfg.MaxGap); at <= cfg.Length; at += sc.between(cfg.MinGap, cfg.MaxGap) {
		kind, group := sc.pick(at)
		s := sc.step(at, kind)
		sc.occupy(at, group, s)
		steps = append(steps, s)
	}
	return steps
}

// weighted is a fault kind's chance in a schedule and the group of
// targets it keeps busy ("" for none).
type weighted struct {
	kind   FaultKind
	weight int
	group  string
}

// scheduler holds one schedule's draw: its random source (the order of
// its draws is the seed's meaning: never reorder them), when each group
// of targets is free again, and the semaphore's current limit.
type scheduler struct {
	r       *rand.Rand
	cfg     ScheduleConfig
	weights []weighted
	busy    map[string]time.Duration
	limit   int
}

func newScheduler(seed uint64, cfg ScheduleConfig) *scheduler {
	weights := []weighted{
		{FaultLeaderKill, 2, "servers"},
		{FaultClientFreeze, 2, "clients"},
		{FaultClientKill, 2, "clients"},
		{FaultClientCut, 2, "clients"},
		{FaultRunnerFreeze, 2, ""},
		{FaultRunnerKill, 3, ""},
		{FaultKeyDelete, 2, ""},
		{FaultSessionDestroy, 3, ""},
		{FaultProfileChange, 1, ""},
		{FaultPoolResize, 1, ""},
		{FaultControllerKill, 2, "controllers"},
		{FaultClockSkew, 2, "skews"},
		{FaultOnceExit, 2, "servers"},
		{FaultWaiterKill, 2, ""},
		{FaultGroupKill, 1, ""},
		{FaultTreeKill, 1, ""},
		{FaultStopAtExit, 2, "servers"},
	}
	drop := func(kinds ...FaultKind) {
		weights = slices.DeleteFunc(weights, func(w weighted) bool { return slices.Contains(kinds, w.kind) })
	}
	if len(cfg.Queued) == 0 {
		drop(FaultWaiterKill)
	}
	if cfg.Once == "" {
		drop(FaultOnceExit, FaultStopAtExit)
	}
	if cfg.TreeKill == "" {
		drop(FaultTreeKill)
	}
	sc := &scheduler{
		r:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cfg:     cfg,
		weights: weights,
		busy:    map[string]time.Duration{},
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

// pick draws the kind of the fault at at among those whose group is free.
func (sc *scheduler) pick(at time.Duration) (FaultKind, string) {
	free := func(w weighted) bool { return w.group == "" || sc.busy[w.group] <= at }
	total := 0
	for _, w := range sc.weights {
		if free(w) {
			total += w.weight
		}
	}
	pick := sc.r.IntN(total)
	for _, w := range sc.weights {
		if !free(w) {
			continue
		}
		if pick < w.weight {
			return w.kind, w.group
		}
		pick -= w.weight
	}
	return "", ""
}

// step draws the target, duration and value of a fault of kind at at.
func (sc *scheduler) step(at time.Duration, kind FaultKind) Step {
	cfg, r := sc.cfg, sc.r
	s := Step{At: at, Kind: kind}
	locks := []string{cfg.Mutex, cfg.Semaphore}
	fenced := []string{cfg.Mutex}
	profiled := []string{cfg.Mutex, cfg.Semaphore}
	if cfg.Once != "" {
		locks, fenced = append(locks, cfg.Once), append(fenced, cfg.Once)
	}
	if cfg.HandOff != "" {
		locks, fenced, profiled = append(locks, cfg.HandOff), append(fenced, cfg.HandOff), append(profiled, cfg.HandOff)
	}
	if sc.busy["once"] > at {
		// A stop at a run-once command's exit is in force: its run
		// is judged only with no other fault on the run-once lock.
		locks = slices.DeleteFunc(locks, func(l string) bool { return l == cfg.Once })
		fenced = slices.DeleteFunc(fenced, func(l string) bool { return l == cfg.Once })
	}
	lock := locks[r.IntN(len(locks))]
	switch kind {
	case FaultLeaderKill:
		s.Target, s.For = "raft-leader", sc.between(cfg.MinFor, cfg.MaxFor)
	case FaultClientFreeze, FaultClientKill, FaultClientCut:
		s.Target, s.For = fmt.Sprintf("client-%d", 1+r.IntN(cfg.Clients)), sc.between(cfg.MinFor, cfg.MaxFor)
	case FaultRunnerFreeze:
		// A fenced holder only: a semaphore's slots have no fencing
		// token the store could check, and a frozen command wakes up
		// to write whatever it was about to. Up to three times the
		// longest other fault: past 2 x TTL the session is gone and
		// another holder takes over while it sleeps.
		s.Target, s.For = fenced[r.IntN(len(fenced))], sc.between(cfg.MinFor, 3*cfg.MaxFor)
	case FaultRunnerKill, FaultKeyDelete, FaultSessionDestroy, FaultGroupKill:
		s.Target = lock
	case FaultTreeKill:
		s.Target = cfg.TreeKill
	case FaultStopAtExit:
		s.Target, s.For = cfg.Once, sc.between(cfg.MinStop, cfg.MaxStop)
	case FaultProfileChange:
		// The mutexes' or the semaphore's profile (the run-once
		// lock's stays).
		s.Target, s.Value = profiled[r.IntN(len(profiled))], 1+r.IntN(max(1, cfg.ProfileVariants))
	case FaultPoolResize:
		next := sc.limit
		for len(cfg.Limits) > 1 && next == sc.limit {
			next = cfg.Limits[r.IntN(len(cfg.Limits))]
		}
		sc.limit = next
		s.Target, s.Value = cfg.Semaphore, next
	case FaultControllerKill:
		s.Target, s.For = sc.controller(), sc.between(cfg.MinFor, cfg.MaxFor)
	case FaultClockSkew:
		sc.skew(&s)
	case FaultWaiterKill:
		s.Target = cfg.Queued[r.IntN(len(cfg.Queued))]
	case FaultOnceExit:
		s.Target, s.For = "leader-kill", sc.between(cfg.MinFor, cfg.MaxFor)
		if sc.busy["clients"] <= at && r.IntN(2) == 1 {
			s.Target = "client-freeze"
		}
	}
	return s
}

func (sc *scheduler) controller() string {
	return fmt.Sprintf("controller-%d", 1+sc.r.IntN(max(1, sc.cfg.Controllers)))
}

// skew draws a clock skew. Skews last longer than other faults (up to
// 3 x MaxFor): max_hold and the hold's start are judged over seconds.
func (sc *scheduler) skew(s *Step) {
	cfg, r := sc.cfg, sc.r
	s.For = sc.between(cfg.MinFor, 3*cfg.MaxFor)
	skew := sc.between(cfg.MinSkew, cfg.MaxSkew).Round(time.Second)
	if r.IntN(2) == 1 {
		skew = -skew
	}
	s.Value = int(skew / time.Second)
	if sc.busy["controllers"] <= s.At && r.IntN(2) == 1 {
		// A replica restarted skewed: no kill of a replica meanwhile.
		s.Target = sc.controller()
		sc.busy["controllers"] = s.At + s.For + cfg.MinGap
	} else {
		s.Target = fmt.Sprintf("runner-%d", 1+r.IntN(cfg.Clients))
	}
}

// occupy marks the targets of s busy. A group is busy until the fault is
// undone and a little after: a restarted server must be promoted to voter
// again. A once-exit or stop-at-once-exit fault strikes up to
// OnceExitArmed after At: the servers (and, for a freeze, the clients)
// are busy until it is undone.
func (sc *scheduler) occupy(at time.Duration, group string, s Step) {
	if group != "" {
		sc.busy[group] = max(sc.busy[group], at+s.For+sc.cfg.MinGap)
	}
	if s.Kind == FaultOnceExit || s.Kind == FaultStopAtExit {
		end := at + OnceExitArmed + s.For + sc.cfg.MinGap
		sc.busy["servers"] = max(sc.busy["servers"], end)
		if s.Target == "client-freeze" {
			sc.busy["clients"] = max(sc.busy["clients"], end)
		}
	}
	if s.Kind == FaultStopAtExit {
		// Judged only when nothing else touches the run: no fault on
		// the cluster, the client nodes, the clocks or the run-once
		// lock from the stop to StopAtExitJudged after the wake-up.
		end := at + OnceExitArmed + s.For + StopAtExitJudged + sc.cfg.MinGap
		for _, g := range []string{"servers", "clients", "skews", "once"} {
			sc.busy[g] = max(sc.busy[g], end)
		}
	}
}
