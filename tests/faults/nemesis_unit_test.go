package faults

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

var unitScheduleConfig = NemesisConfig(30 * time.Minute)

func TestSchedule_isAPureFunctionOfTheSeed(t *testing.T) {
	a, b := Schedule(42, unitScheduleConfig), Schedule(42, unitScheduleConfig)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two schedules from seed 42 differ: a failing run could not be replayed")
	}
	if c := Schedule(43, unitScheduleConfig); reflect.DeepEqual(a, c) {
		t.Error("seeds 42 and 43 give the same schedule")
	}
}

func TestSchedule_coversEveryKindAndKeepsItsRules(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		steps := Schedule(seed, unitScheduleConfig)
		if len(steps) < 500 {
			t.Errorf("seed %d: %d steps in 30 minutes; the long variant needs 500 faults", seed, len(steps))
		}
		seen := map[FaultKind]bool{}
		targets := map[FaultKind]bool{} // "kind target-without-number"
		busyUntil := map[string]time.Duration{}
		limit := unitScheduleConfig.Limits[0]
		var last, stopUntil time.Duration
		for _, s := range steps {
			seen[s.Kind] = true
			if s.At < last || s.At > unitScheduleConfig.Length {
				t.Fatalf("seed %d: step %s out of order or past the end", seed, s)
			}
			last = s.At
			groups := map[FaultKind][]string{
				FaultLeaderKill: {"servers"}, FaultClientFreeze: {"clients"}, FaultClientKill: {"clients"},
				FaultClientCut: {"clients"}, FaultControllerKill: {"controllers"}, FaultClockSkew: {"skews"},
			}[s.Kind]
			if s.Kind == FaultClockSkew && strings.HasPrefix(s.Target, "controller-") {
				groups = append(groups, "controllers") // a replica restarted skewed
			}
			until := s.At + s.For
			if s.Kind == FaultOnceExit || s.Kind == FaultStopAtExit {
				// It strikes up to OnceExitArmed after At, on the servers'
				// leader, on a client agent or on a run-once runner;
				// either way no other fault on the servers meanwhile (nor
				// two armed at once).
				groups, until = []string{"servers"}, s.At+OnceExitArmed+s.For
				if s.Target == "client-freeze" {
					groups = append(groups, "clients")
				}
			}
			if s.At < stopUntil && (slices.ContainsFunc(groups, func(g string) bool { return g != "controllers" }) || s.Target == "once") {
				// A stop at a run-once command's exit is judged only
				// with nothing else on the cluster, the clocks or the run
				// (a controller replica killed is not in its store).
				t.Fatalf("seed %d: %s while a %s is in force or judged (until %s)", seed, s, FaultStopAtExit, stopUntil)
			}
			for _, group := range groups {
				if s.At < busyUntil[group] {
					t.Fatalf("seed %d: %s overlaps an earlier fault on the %s", seed, s, group)
				}
				busyUntil[group] = until
			}
			if s.Kind == FaultStopAtExit {
				stopUntil = s.At + OnceExitArmed + s.For + StopAtExitJudged
			}
			targets[s.Kind+" "+FaultKind(strings.TrimRight(s.Target, "0123456789"))] = true
			switch s.Kind {
			case FaultRunnerFreeze:
				if s.Target != "mutex" && s.Target != "handoff" && s.Target != "once" {
					t.Errorf("seed %d: %s: only fenced holders (the mutexes, run once) are frozen", seed, s)
				}
			case FaultProfileChange:
				if s.Target != "mutex" && s.Target != "handoff" && s.Target != "semaphore" {
					t.Errorf("seed %d: %s: the run-once lock's profile is not changed", seed, s)
				}
			case FaultWaiterKill:
				if s.Target != "mutex" && s.Target != "handoff" || s.For != 0 {
					t.Errorf("seed %d: %s: a waiter kill picks a queued mutex (mutex, handoff) and is not undone", seed, s)
				}
			case FaultClockSkew:
				skew := time.Duration(max(s.Value, -s.Value)) * time.Second
				if skew < unitScheduleConfig.MinSkew || skew > unitScheduleConfig.MaxSkew || s.For <= 0 {
					t.Errorf("seed %d: %s: want an offset of 30s to 3m either way, and a duration", seed, s)
				}
				if !strings.HasPrefix(s.Target, "controller-") && !strings.HasPrefix(s.Target, "runner-") {
					t.Errorf("seed %d: %s: a skew moves a controller replica's clock or runners' on a client node", seed, s)
				}
			case FaultPoolResize:
				if s.Value == limit || (s.Value != 2 && s.Value != 3) {
					t.Errorf("seed %d: %s: a resize changes the limit (from %d) to one of 2, 3", seed, s, limit)
				}
				limit = s.Value
			case FaultOnceExit:
				if s.Target != "leader-kill" && s.Target != "client-freeze" || s.For <= 0 {
					t.Errorf("seed %d: %s: want leader-kill or client-freeze, and a duration", seed, s)
				}
			case FaultGroupKill:
				if !slices.Contains([]string{"mutex", "semaphore", "once", "handoff"}, s.Target) || s.For != 0 {
					t.Errorf("seed %d: %s: a group kill picks a lock's holder and is not undone", seed, s)
				}
			case FaultTreeKill:
				if s.Target != unitScheduleConfig.TreeKill || s.For != 0 {
					t.Errorf("seed %d: %s: runner and guard are killed on %s only (its runners are in PID namespaces)", seed, s, unitScheduleConfig.TreeKill)
				}
			case FaultStopAtExit:
				if s.Target != "once" || s.For < unitScheduleConfig.MinStop || s.For > unitScheduleConfig.MaxStop {
					t.Errorf("seed %d: %s: want the run-once lock, stopped %s to %s", seed, s, unitScheduleConfig.MinStop, unitScheduleConfig.MaxStop)
				}
			case FaultClientFreeze, FaultClientKill, FaultClientCut:
				if s.Target != "client-1" && s.Target != "client-2" && s.Target != "client-3" || s.For <= 0 {
					t.Errorf("seed %d: %s: want client-1..3 and a duration", seed, s)
				}
			}
		}
		for _, k := range FaultKinds {
			if !seen[k] {
				t.Errorf("seed %d: no %s in 30 minutes", seed, k)
			}
		}
		for _, want := range []FaultKind{
			"runner-kill once", "session-destroy once", "key-delete once", "runner-freeze once", "runner-freeze mutex",
			"clock-skew controller-", "clock-skew runner-",
			"runner-kill handoff", "runner-freeze handoff", "session-destroy handoff", "key-delete handoff", "profile-change handoff",
			"waiter-kill mutex", "waiter-kill handoff", "once-exit leader-kill", "once-exit client-freeze",
			"group-kill mutex", "group-kill once", "group-kill handoff", "runner-and-guard-kill handoff", "stop-at-once-exit once",
		} {
			if !targets[want] {
				t.Errorf("seed %d: no %s in 30 minutes", seed, want)
			}
		}
	}
	if out := FormatSchedule(7, Schedule(7, unitScheduleConfig)[:2]); !strings.Contains(out, "seed 7") {
		t.Errorf("FormatSchedule does not print the seed:\n%s", out)
	}
}

func TestSchedule_withoutQueuedMutexesKillsNoWaiter(t *testing.T) {
	cfg := unitScheduleConfig
	cfg.Queued, cfg.HandOff, cfg.TreeKill = nil, "", ""
	for seed := uint64(1); seed <= 5; seed++ {
		for _, s := range Schedule(seed, cfg) {
			if s.Kind == FaultWaiterKill || s.Target == "handoff" {
				t.Fatalf("seed %d: %s with no queued mutex and no hand-off mutex configured", seed, s)
			}
		}
	}
}

func TestSchedule_withoutARunOnceLockTimesNoFaultToItsExits(t *testing.T) {
	cfg := unitScheduleConfig
	cfg.Once = ""
	for seed := uint64(1); seed <= 5; seed++ {
		for _, s := range Schedule(seed, cfg) {
			if s.Kind == FaultOnceExit || s.Kind == FaultStopAtExit || s.Target == "once" {
				t.Fatalf("seed %d: %s with no run-once lock configured", seed, s)
			}
		}
	}
}

// Without root the nemesis runs no runner in a PID namespace: its
// schedule then has no kill of runner and guard together.
func TestSchedule_withoutATreeKillTargetKillsNoRunnerWithItsGuard(t *testing.T) {
	cfg := unitScheduleConfig
	cfg.TreeKill = ""
	for seed := uint64(1); seed <= 5; seed++ {
		for _, s := range Schedule(seed, cfg) {
			if s.Kind == FaultTreeKill {
				t.Fatalf("seed %d: %s with no runners in PID namespaces", seed, s)
			}
		}
	}
}

func TestStopAtExitWindow_isPastTheGuardsKillByAndUnderTwiceTheTTL(t *testing.T) {
	killBy := lockmodel.NewStopRule(NemesisOnceProfile.Resolve(), NemesisOnceGrace).GuardKillAfter()
	lo, hi := StopAtExitWindow(NemesisOnceProfile, NemesisOnceGrace)
	if lo <= killBy || hi <= lo || hi >= 2*NemesisOnceProfile.TTL-2*time.Second {
		t.Fatalf("StopAtExitWindow = %s..%s; want past the guard's kill-by %s and well under 2 x ttl %s", lo, hi, killBy, 2*NemesisOnceProfile.TTL)
	}
}

func TestStopAtExitViolations(t *testing.T) {
	succeeded := string(ledger.RunSucceeded)
	runs := []OnceRun{
		{ID: "ok", Outcome: succeeded, SucceededAttempts: 1, Effects: 1},
		// Issue 44, 3: recorded lost on waking, and run again.
		{ID: "lost-then-again", Outcome: succeeded, SucceededAttempts: 1, Effects: 2, AttemptOutcomes: []string{"lost", "succeeded"}},
		{ID: "lost", Outcome: "lost", Effects: 1, AttemptOutcomes: []string{"lost"}},
		{ID: "not-judged", Outcome: "lost", Effects: 1},
	}
	strikes := []StopAtExitStrike{
		{RunID: "ok", Worker: "ok/a", Exit: 0, Judged: true},
		{RunID: "lost-then-again", Worker: "lost-then-again/a", Exit: 0, Judged: true},
		{RunID: "lost", Worker: "lost/a", Exit: 123, Judged: true},
		{RunID: "not-judged", Worker: "not-judged/a", Exit: 120},
	}
	n, judged, evidence := StopAtExitViolations(strikes, runs)
	if n != 2 || judged != 3 || len(evidence) != 2 || !strings.Contains(evidence[0], "run lost-then-again") || !strings.Contains(evidence[1], `exited 123; ledger "lost"`) {
		t.Fatalf("StopAtExitViolations = %d, %d judged, %q; want lost-then-again and lost of 3 judged", n, judged, evidence)
	}
}

func TestSuccessExitsNotRecorded(t *testing.T) {
	runs := []OnceRun{
		{ID: "ok", Exits: map[int]int{0: 1, 122: 2}, SucceededAttempts: 1, AttemptOutcomes: []string{"succeeded"}},
		{ID: "exit-120", Exits: map[int]int{120: 1, 0: 1}, SucceededAttempts: 1, AttemptOutcomes: []string{"crashed", "succeeded"}},
		// Issue 31: runner a exited 0, its attempt read crashed, b ran it again.
		{ID: "ran-twice", Exits: map[int]int{0: 2}, SucceededAttempts: 1, AttemptOutcomes: []string{"crashed", "succeeded"}},
		{ID: "lost-success", Exits: map[int]int{0: 1, 121: 2}, SucceededAttempts: 0, AttemptOutcomes: []string{"crashed", "failed"}},
		{ID: "unread", Exits: map[int]int{0: 1}, LedgerError: "not in the ledger"},
	}
	n, evidence := SuccessExitsNotRecorded(runs)
	if n != 2 || len(evidence) != 2 || !strings.Contains(evidence[0], "run ran-twice: 2 runners exited 0") ||
		!strings.Contains(evidence[1], "crashed, failed") {
		t.Fatalf("SuccessExitsNotRecorded = %d %q; want ran-twice and lost-success", n, evidence)
	}
}

func TestUnexpectedExits(t *testing.T) {
	n, codes := UnexpectedExits(map[int]int{0: 10, 123: 2, 2: 1, 127: 3}, []int{0, 123})
	if n != 4 || !reflect.DeepEqual(codes, []int{2, 127}) {
		t.Errorf("UnexpectedExits = %d %v; want 4 [2 127]", n, codes)
	}
}

func TestLimitAt_holdsAStartToTheHighestLimitWithinGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	changes := []LimitChange{{t0, 3}, {t0.Add(10 * time.Second), 2}, {t0.Add(20 * time.Second), 3}}
	tests := []struct {
		at   time.Duration
		want int
	}{
		{5 * time.Second, 3},
		{11 * time.Second, 3}, // within the grace after the shrink
		{15 * time.Second, 2},
		{21 * time.Second, 3},
	}
	for _, tt := range tests {
		if got := LimitAt(changes, t0.Add(tt.at), 2*time.Second); got != tt.want {
			t.Errorf("LimitAt(+%s) = %d; want %d", tt.at, got, tt.want)
		}
	}
}

func TestSemaphoreTokenInversions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Each run is worker w<run> with runner PID <run's first letter>.
	start := func(run, token string, ms int) Write {
		return Write{Kind: KindStart, Run: run, Worker: "w" + run, RunnerPID: int(run[0]), Note: "token=" + token, At: at(ms), Accepted: true}
	}
	end := func(run string, ms int) Write {
		return Write{Kind: KindEnd, Run: run, Worker: "w" + run, RunnerPID: int(run[0]), At: at(ms), Accepted: true}
	}
	spawn := func(run string, ms int) RunnerSpawn {
		return RunnerSpawn{Worker: "w" + run, PID: int(run[0]), At: at(ms)}
	}
	tests := []struct {
		name   string
		log    []Write
		spawns []RunnerSpawn
		want   int
	}{
		{"in order", []Write{start("a", "10", 0), start("b", "12", 5), end("a", 100), start("c", "14", 110), end("b", 120), end("c", 200)},
			[]RunnerSpawn{spawn("a", -50), spawn("b", -40), spawn("c", 105)}, 0},
		{"concurrent admissions may start in either order", []Write{start("b", "12", 0), start("a", "10", 5), end("a", 100), end("b", 120)},
			[]RunnerSpawn{spawn("a", -50), spawn("b", -40)}, 0},
		// The nemesis run of seed 20261202: w1 (client-1) was admitted at
		// Raft index 32439, then its node was cut off; the answer reached
		// its runner 6.5s later, after w2, admitted at 32460, had run.
		{"admitted first, the answer delayed: its command starts after a later holder ended", []Write{
			start("b", "32460", 216), end("b", 376), start("a", "32439", 6512), end("a", 6543),
		}, []RunnerSpawn{spawn("a", 0), spawn("b", 200)}, 0},
		// w3 was in the holder table w2 read before its admission; w3's
		// command started 2.6s after w2's had ended.
		{"listed in the table before another's admission, started after it ended", []Write{
			start("b", "69511", 544), end("b", 704), start("a", "69504", 3201), end("a", 3382),
		}, []RunnerSpawn{spawn("a", -200), spawn("b", 480)}, 0},
		{"a token that predates its runner", []Write{start("a", "10", 0), end("a", 100), start("b", "9", 110), end("b", 200)},
			[]RunnerSpawn{spawn("a", -50), spawn("b", 105)}, 1},
		{"a token reused by a runner spawned after its holder started", []Write{start("a", "10", 0), start("b", "10", 110), end("a", 150), end("b", 200)},
			[]RunnerSpawn{spawn("a", -50), spawn("b", 50)}, 1},
		{"the latest spawn of the runner counts", []Write{start("a", "10", 0), end("a", 100), start("b", "9", 110), end("b", 200)},
			[]RunnerSpawn{spawn("a", -50), spawn("b", -3000), spawn("b", 105)}, 1},
		{"no spawn record: not judged", []Write{start("a", "10", 0), end("a", 100), start("b", "9", 110), end("b", 200)},
			[]RunnerSpawn{spawn("a", -50)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, judged, ex := SemaphoreTokenInversions(tt.log, tt.spawns)
			if got != tt.want || len(ex) != got {
				t.Errorf("SemaphoreTokenInversions = %d %v; want %d", got, ex, tt.want)
			}
			runners := map[string]bool{} // one run per worker here
			for _, s := range tt.spawns {
				runners[s.Worker] = true
			}
			if judged != len(runners) {
				t.Errorf("%d executions judged; want %d, those with a spawn record", judged, len(runners))
			}
		})
	}
}

func TestParseControllerLog(t *testing.T) {
	log := `{"time":"2026-12-01T21:00:00.100Z","level":"INFO","msg":"controller starting"}
{"time":"2026-12-01T21:00:01.000Z","level":"INFO","msg":"became leader","session":"s1"}
{"time":"2026-12-01T21:00:02.000Z","level":"INFO","msg":"repair writing","kind":"restore-key"}
{"time":"2026-12-01T21:00:02.100Z","level":"INFO","msg":"repaired","kind":"restore-key","reason":"recreate_key","lock":"l","detail":"key x"}
not json
{"time":"2026-12-01T21:00:03.000Z","level":"INFO","msg":"released leadership"}
`
	events, err := ParseControllerLog("controller-1", "controller-1#3", strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	want := []string{CtlBecameLeader, CtlWriting, CtlRepaired, CtlLostLeader}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds = %q; want %q", kinds, want)
	}
	if events[2].Detail != "restore-key recreate_key l key x" || events[0].Replica != "controller-1" || events[0].Process != "controller-1#3" {
		t.Errorf("event = %+v", events[2])
	}
}

func TestControllerWritesAfterLoss(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// ev is an event of process "<replica>#1".
	ev := func(s int, replica, kind string) ControllerEvent {
		return ControllerEvent{At: t0.Add(time.Duration(s) * time.Second), Replica: replica, Process: replica + "#1", Kind: kind}
	}
	// pev is an event of the k-th process of c2.
	pev := func(s, k int, kind string) ControllerEvent {
		e := ev(s, "c2", kind)
		e.Process = fmt.Sprintf("c2#%d", k)
		return e
	}
	tests := []struct {
		name   string
		events []ControllerEvent
		want   int
	}{
		{"writes within terms", []ControllerEvent{
			ev(1, "c1", CtlBecameLeader), ev(2, "c1", CtlWriting), ev(3, "c1", CtlRepaired), ev(4, "c1", CtlLostLeader),
			ev(5, "c2", CtlBecameLeader), ev(6, "c2", CtlWriting), ev(7, "c2", CtlRepaired),
		}, 0},
		{"a write in flight across a take-over, done by a fenced write", []ControllerEvent{
			ev(1, "c1", CtlBecameLeader), ev(2, "c1", CtlWriting), ev(3, "c2", CtlBecameLeader), ev(4, "c1", CtlRepaired), ev(5, "c1", CtlLostLeader),
		}, 0},
		{"a write begun after another replica became leader", []ControllerEvent{
			ev(1, "c1", CtlBecameLeader), ev(2, "c2", CtlBecameLeader), ev(3, "c1", CtlWriting), ev(4, "c1", CtlRepaired), ev(5, "c1", CtlLostLeader),
		}, 1},
		{"a write done after the process logged its loss", []ControllerEvent{
			ev(1, "c1", CtlBecameLeader), ev(2, "c1", CtlWriting), ev(3, "c1", CtlLostLeader), ev(4, "c1", CtlRepaired),
		}, 1},
		{"a write by a process that never led", []ControllerEvent{ev(1, "c2", CtlWriting)}, 1},
		{"a killed process's earlier term does not count", []ControllerEvent{
			pev(1, 1, CtlBecameLeader), pev(2, 1, CtlKilled), ev(3, "c1", CtlBecameLeader), pev(4, 2, CtlBecameLeader), pev(5, 2, CtlWriting), pev(6, 2, CtlRepaired),
		}, 0},
		// The nemesis run of seed 20261202: two late restarts of c2 left
		// two processes; the first became leader and wrote while the
		// second was killed. Its writes were within its own term.
		{"a process of the replica leads and writes while another process of it is killed", []ControllerEvent{
			pev(1, 1, CtlBecameLeader), pev(2, 2, CtlKilled), pev(3, 1, CtlWriting), pev(4, 1, CtlRepaired), pev(5, 1, CtlLostLeader),
		}, 0},
		{"a write by a killed process's successor that never led", []ControllerEvent{
			pev(1, 1, CtlBecameLeader), pev(2, 1, CtlKilled), pev(3, 2, CtlWriting), pev(4, 2, CtlRepaired),
		}, 2},
		{"a write begun after another process of the same replica became leader", []ControllerEvent{
			pev(1, 1, CtlBecameLeader), pev(2, 2, CtlBecameLeader), pev(3, 1, CtlWriting), pev(4, 1, CtlRepaired),
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, evidence := ControllerWritesAfterLoss(tt.events); got != tt.want {
				t.Errorf("ControllerWritesAfterLoss = %d %q; want %d", got, evidence, tt.want)
			}
		})
	}
}

func TestCheckSemaphoreLimits_followsTheLimitInForce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	start := func(run, token string, ms int) Write {
		return Write{Kind: KindStart, Run: run, Note: "token=" + token, At: at(ms), Accepted: true}
	}
	end := func(run string, ms int) Write { return Write{Kind: KindEnd, Run: run, At: at(ms), Accepted: true} }
	// Three holders at once from 10s, a fourth at 20s; the limit grows to 3
	// at 5s and shrinks to 2 at 15s.
	log := []Write{
		start("a", "1", 10000), start("b", "2", 10010), start("c", "3", 10020),
		start("d", "4", 20000), end("a", 30000), end("b", 30000), end("c", 30000), end("d", 30000),
	}
	changes := []LimitChange{{t0, 2}, {at(5000), 3}, {at(15000), 2}}
	rep := checkSemaphoreLimits("x", log, func(s time.Time) int { return LimitAt(changes, s, limitGrace) })
	if rep.Overlaps != 1 {
		t.Errorf("overlaps = %d; want 1: the third holder joined under limit 3, the fourth under limit 2", rep.Overlaps)
	}
	if rep := checkSemaphore("x", log, 2); rep.Overlaps != 2 {
		t.Errorf("with limit 2 throughout, overlaps = %d; want 2", rep.Overlaps)
	}
}

func TestStep_printsAClockSkewsOffset(t *testing.T) {
	s := Step{At: time.Second, Kind: FaultClockSkew, Target: "controller-1", For: 20 * time.Second, Value: -95}
	if got := s.String(); !strings.Contains(got, "offset -95s") || !strings.Contains(got, "for 20s") {
		t.Errorf("Step.String() = %q; want the offset and the duration", got)
	}
}

func TestOnceRunID(t *testing.T) {
	if got := OnceRunID(OnceWorker("once-0003", "client-1.2")); got != "once-0003" {
		t.Errorf("OnceRunID = %q; want once-0003", got)
	}
	if got := OnceRunID("w1"); got != "" {
		t.Errorf("OnceRunID(w1) = %q; want none", got)
	}
}

func TestOnceEffects_countsAppliedEffectsAndRepeatsPerRunID(t *testing.T) {
	w := func(kind, id, note string, accepted bool) Write {
		return Write{Kind: kind, Worker: OnceWorker(id, "client-1.1"), Note: note, Accepted: accepted}
	}
	log := []Write{
		w(KindStart, "a", "", true), w(KindEnd, "a", OnceEffectNote, true),
		w(KindStart, "a", "", true), w(KindEnd, "a", OnceRepeatNote, true), // the window: ran again
		w(KindStart, "b", "", true), w(KindEnd, "b", OnceEffectNote, false), // fenced: not applied
		{Kind: KindFault, Note: "nemesis: kill"},
	}
	runs := map[string]*OnceRun{"b": {ID: "b", Outcome: "lost"}}
	OnceEffects(log, runs)
	if a := runs["a"]; a == nil || a.Effects != 1 || a.Repeats != 1 {
		t.Errorf("run a = %+v; want 1 effect, 1 repeat", a)
	}
	if b := runs["b"]; b.Effects != 0 || b.Outcome != "lost" {
		t.Errorf("run b = %+v; want no effect (its end was fenced), the ledger's outcome kept", b)
	}
}

func TestRunOnceViolations(t *testing.T) {
	tests := []struct {
		name string
		run  OnceRun
		want int
	}{
		{"succeeded once", OnceRun{ID: "a", Effects: 1, Outcome: "succeeded", Attempts: 1, SucceededAttempts: 1}, 0},
		{"succeeded at attempt 2 after the window, the guard kept the effect single", OnceRun{ID: "a", Effects: 1, Repeats: 1, Outcome: "succeeded", Attempts: 2, SucceededAttempts: 1}, 0},
		{"exhausted, never succeeded", OnceRun{ID: "a", Outcome: "exhausted", Attempts: 5}, 0},
		{"effect applied twice", OnceRun{ID: "a", Effects: 2, Outcome: "succeeded", SucceededAttempts: 1}, 1},
		{"two succeeded attempts", OnceRun{ID: "a", Effects: 1, Outcome: "succeeded", SucceededAttempts: 2}, 1},
		{"a success without its effect", OnceRun{ID: "a", Outcome: "succeeded", SucceededAttempts: 1}, 1},
		{"two runners say they ran it, one command completed", OnceRun{ID: "a", Effects: 1, Outcome: "succeeded", SucceededAttempts: 1, Exits: map[int]int{0: 2, 122: 1}}, 1},
		{"a runner killed after its command completed", OnceRun{ID: "a", Effects: 1, Outcome: "running", Exits: map[int]int{137: 1}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, evidence := RunOnceViolations([]OnceRun{tt.run}); got != tt.want || len(evidence) != got {
				t.Errorf("RunOnceViolations = %d %q; want %d", got, evidence, tt.want)
			}
		})
	}
}

func TestApplyError_keepsTheTitleAndMessageWithoutWhatVaries(t *testing.T) {
	out := `ephemeral.consullock_lock.mutex: Opening...

Error: Cannot Acquire Lock

  with ephemeral.consullock_lock.mutex,
  on main.tf line 9, in ephemeral "consullock_lock" "mutex":
   9: ephemeral "consullock_lock" "mutex" {

Consul rejected the request as invalid.

create a session on the agent's node: invalid input (HTTP 500 rpc error
making call: apply failed: Check 'serfHealth' is in critical state)
`
	want := "Cannot Acquire Lock Consul rejected the request as invalid. create a session on the agent's node: invalid input (HTTP N rpc error " +
		"making call: apply failed: Check 'serfHealth' is in critical state)"
	if got := applyError(out); got != want {
		t.Errorf("applyError =\n%q\nwant\n%q", got, want)
	}
}

func TestCheck_reportsTheGapBeforeEveryExecutionAfterTheFirst(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	log := []Write{
		{At: at(0), Kind: KindStart, Run: "a", Token: 10, Accepted: true},
		{At: at(50), Kind: KindEnd, Run: "a", Token: 10, Accepted: true},
		{At: at(70), Kind: KindStart, Run: "b", Token: 20, Accepted: true},
		// b is killed silently at 400 (the fault's mark): its gap runs
		// from the fault, as MaxGap's does.
		{At: at(400), Kind: KindFault, Note: "nemesis: SIGKILL runner and child"},
		{At: at(2400), Kind: KindStart, Run: "c", Token: 30, Accepted: true},
		{At: at(2500), Kind: KindEnd, Run: "c", Token: 30, Accepted: true},
	}
	rep := Check("gaps", log, time.Minute)
	want := []time.Duration{20 * time.Millisecond, 2 * time.Second}
	if !reflect.DeepEqual(rep.Gaps, want) {
		t.Fatalf("Gaps = %v, want %v (one per execution after the first, in start order)", rep.Gaps, want)
	}
	if rep.MaxGap != slices.Max(rep.Gaps) {
		t.Errorf("MaxGap %s is not the longest of Gaps %v", rep.MaxGap, rep.Gaps)
	}
}

func TestGapFigures(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	many := make([]int, 0, 200)
	for i := 200; i >= 1; i-- { // unsorted on purpose
		many = append(many, i)
	}
	for _, c := range []struct {
		name          string
		gaps          []time.Duration
		p50, p99, max time.Duration
	}{
		{"none", nil, 0, 0, 0},
		{"one", ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{"odd count: the middle one", ms(30, 10, 20), 20 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond},
		{"1..200 ms: nearest rank", ms(many...), 100 * time.Millisecond, 198 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.gaps)
			p50, p99, longest := GapFigures(c.gaps)
			if p50 != c.p50 || p99 != c.p99 || longest != c.max {
				t.Errorf("GapFigures = p50 %s, p99 %s, max %s; want %s, %s, %s", p50, p99, longest, c.p50, c.p99, c.max)
			}
			if p50 > p99 || p99 > longest {
				t.Errorf("p50 %s <= p99 %s <= max %s does not hold", p50, p99, longest)
			}
			if !reflect.DeepEqual(in, c.gaps) {
				t.Error("GapFigures reordered its argument")
			}
		})
	}
}

func TestQueueLeftovers_countsEntriesOfEndedSessionsApart(t *testing.T) {
	live := map[string]bool{"s-alive": true}
	entries := []lockmodel.QueueEntry{
		{Key: "p/.queue/s-cleared", Session: ""},      // Consul released it when its session ended
		{Key: "p/.queue/s-gone", Session: "s-gone"},   // its session no longer exists
		{Key: "p/.queue/s-alive", Session: "s-alive"}, // a killed waiter's session not yet expired
		{Key: "p/.queue/s-cleared-2", Session: ""},    //
	}
	gone, alive := QueueLeftovers(entries, func(s string) bool { return live[s] })
	if gone != 3 || alive != 1 {
		t.Errorf("QueueLeftovers = %d gone, %d alive; want 3, 1", gone, alive)
	}
	if gone, alive := QueueLeftovers(nil, func(string) bool { return true }); gone != 0 || alive != 0 {
		t.Errorf("an empty queue: %d gone, %d alive; want 0, 0", gone, alive)
	}
}

func TestCountQueueLines_readsTheRunnersQueueEvents(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewTextHandler(&b, nil)) // as the runner logs (runner.go)
	log.Info("first in the waiter queue; trying for the lock when it is free", "queue_position", 0)
	log.Info("waiting in the queue", "queue_position", 2, "ahead_session", "x")
	log.Info("waiting in the queue", "queue_position", 1, "ahead_session", "y")
	log.Warn("cannot queue for the lock: the token lacks the waiter queue grant; racing for the lock instead", "missing_grant", "g")
	log.Warn("Consul refused this runner's waiter queue entry; racing for the lock instead", "entry", "e")
	log.Info("the waiter queue lacks this runner's entry; writing it again", "entry", "e")
	log.Info("the previous holder handed the lock to this runner", "fencing_token", 42)
	log.Info("the previous holder handed the lock to this runner", "fencing_token", 47)
	log.Info("lock handed to the first waiter in line", "next_session", "z")
	log.Info("acquired", "note", "waiting in the queue") // an attribute, not the message
	b.WriteString("=== supervisor: runner pid 1 exited 0\n")
	var q QueueCounts
	if err := CountQueueLines(strings.NewReader(b.String()), &q); err != nil {
		t.Fatal(err)
	}
	want := QueueCounts{First: 1, Behind: 2, NoGrant: 1, Refused: 1, HandedIn: 2, HandedOut: 1}
	if q != want {
		t.Errorf("CountQueueLines = %+v, want %+v", q, want)
	}
	if q.Queued() != 3 {
		t.Errorf("Queued() = %d, want 3", q.Queued())
	}
}

func TestWaiterKillStalls_judgesOnlyStallsWithNoClusterFault(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	kill := func(s float64, inForce string) Write {
		return Write{Kind: KindFault, At: at(s), Worker: "w2", Note: fmt.Sprintf("%s (session x, runner pid 7); %s: %s", WaiterKillNote, FaultsInForceNote, inForce)}
	}
	start := func(s float64, accepted bool) Write { return Write{Kind: KindStart, At: at(s), Accepted: accepted} }
	mark := func(s float64, note string) Write { return Write{Kind: KindFault, At: at(s), Note: note} }
	log := []Write{
		start(0, true),
		kill(1, "none"), // judged: 21s
		mark(3, "nemesis: SIGKILL runner and child"), // a holder fault: still judged
		start(20, false), // refused: not the next holder
		start(22, true),
		kill(30, "client-cut client-2"), // a cluster fault in force: not judged
		start(31, true),
		kill(40, "none"),
		mark(41, "nemesis: kill Raft leader s1"), // injected before the next start: not judged
		start(50, true),
		kill(60, "none"),
		mark(61, "nemesis: client-freeze client-3"),
		start(62, true),
		kill(70, "none"), // no start after it: not judged
	}
	got := WaiterKillStalls(log)
	want := []WaiterKillStall{
		{At: at(1), Stall: 21 * time.Second, Judged: true},
		{At: at(30), Stall: time.Second},
		{At: at(40), Stall: 10 * time.Second},
		{At: at(60), Stall: 2 * time.Second},
		{At: at(70), Stall: -1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WaiterKillStalls =\n%+v\nwant\n%+v", got, want)
	}
	for _, note := range []string{"nemesis: kill Raft leader s1", "nemesis: client-cut client-1", "nemesis: client-kill client-2", "nemesis: client-freeze client-3"} {
		if !IsClusterFaultMark(note) {
			t.Errorf("IsClusterFaultMark(%q) = false", note)
		}
	}
	for _, note := range []string{"nemesis: SIGKILL runner and child", "nemesis: destroy session s", "nemesis: profile p -> ttl 10s lock_delay 1s", WaiterKillNote} {
		if IsClusterFaultMark(note) {
			t.Errorf("IsClusterFaultMark(%q) = true", note)
		}
	}
}
