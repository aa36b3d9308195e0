package lockmodel

import (
	"strings"
	"testing"
	"time"
)

func TestStopRule(t *testing.T) {
	s := time.Second
	cases := []struct {
		name                        string
		rule                        StopRule
		takeOver, lossAfter, deadBy time.Duration
		feasible                    bool
	}{
		{
			name:     "Consul defaults with serfHealth and the default grace: lock_delay decides",
			rule:     StopRule{TTL: 15 * s, LockDelay: 15 * s, HealthChecks: true, RenewEvery: 5 * s, RenewTimeout: 2 * s, Grace: 5 * s, Margin: s},
			takeOver: 15 * s, lossAfter: 9 * s, deadBy: 14 * s, feasible: true,
		},
		{
			name:     "no health checks: 2 x ttl + lock_delay, the TTL rule decides",
			rule:     StopRule{TTL: 15 * s, LockDelay: 15 * s, RenewEvery: 5 * s, RenewTimeout: 2 * s, Grace: 5 * s, Margin: s},
			takeOver: 45 * s, lossAfter: 15 * s, deadBy: 20 * s, feasible: true,
		},
		{
			name:     "lock_delay above 60s is clamped by Consul",
			rule:     StopRule{TTL: 5 * time.Minute, LockDelay: 2 * time.Minute, HealthChecks: true, RenewEvery: 10 * s, RenewTimeout: 2 * s, Grace: 5 * s, Margin: s},
			takeOver: 60 * s, lossAfter: 54 * s, deadBy: 59 * s, feasible: true,
		},
		{
			name:     "lock_delay 0 with health checks is never safe",
			rule:     StopRule{TTL: 10 * s, LockDelay: 0, HealthChecks: true, RenewEvery: 3 * s, RenewTimeout: 2 * s, Grace: 0, Margin: s},
			takeOver: 0, lossAfter: 5 * s, deadBy: 5 * s, feasible: false,
		},
		{
			name:     "lock_delay too short for renew_every + timeout + grace + margin",
			rule:     StopRule{TTL: 15 * s, LockDelay: 10 * s, HealthChecks: true, RenewEvery: 5 * s, RenewTimeout: 2 * s, Grace: 5 * s, Margin: s},
			takeOver: 10 * s, lossAfter: 7 * s, deadBy: 12 * s, feasible: false,
		},
		{
			name:     "just feasible: 2 + 2 + 2 + 1 < 8",
			rule:     StopRule{TTL: 30 * s, LockDelay: 8 * s, HealthChecks: true, RenewEvery: 2 * s, RenewTimeout: 2 * s, Grace: 2 * s, Margin: s},
			takeOver: 8 * s, lossAfter: 5 * s, deadBy: 7 * s, feasible: true,
		},
		{
			name:     "equal is not enough: 2 + 2 + 3 + 1 = 8",
			rule:     StopRule{TTL: 30 * s, LockDelay: 8 * s, HealthChecks: true, RenewEvery: 2 * s, RenewTimeout: 2 * s, Grace: 3 * s, Margin: s},
			takeOver: 8 * s, lossAfter: 4 * s, deadBy: 7 * s, feasible: false,
		},
		{
			name:     "no health checks, grace longer than ttl + lock_delay",
			rule:     StopRule{TTL: 10 * s, LockDelay: 0, RenewEvery: 3 * s, RenewTimeout: 2 * s, Grace: 20 * s, Margin: s},
			takeOver: 20 * s, lossAfter: 5 * s, deadBy: 25 * s, feasible: false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rule
			if got := r.TakeOverAfter(); got != tc.takeOver {
				t.Errorf("TakeOverAfter = %s, want %s", got, tc.takeOver)
			}
			if got := r.LossAfter(); got != tc.lossAfter {
				t.Errorf("LossAfter = %s, want %s", got, tc.lossAfter)
			}
			if got := r.DeadBy(); got != tc.deadBy {
				t.Errorf("DeadBy = %s, want %s", got, tc.deadBy)
			}
			if got := r.Feasible(); got != tc.feasible {
				t.Errorf("Feasible = %v, want %v", got, tc.feasible)
			}
			if tc.feasible && r.DeadBy()+r.Margin > r.TakeOverAfter() {
				t.Errorf("feasible, yet the command is dead at %s, less than the margin before take-over at %s", r.DeadBy(), r.TakeOverAfter())
			}
			if tc.feasible && r.LossAfter() <= r.MinLossAfter() {
				t.Errorf("feasible, yet a healthy holder whose renewal takes the whole timeout would lose the lock")
			}
			if problem := r.Problem("-grace"); (problem == "") != tc.feasible {
				t.Errorf("Problem = %q, feasible %v", problem, tc.feasible)
			}
		})
	}
}

func TestNewStopRuleUsesTheProfileWithDefaults(t *testing.T) {
	r := NewStopRule(SessionProfile{TTL: 15 * time.Second, LockDelay: 15 * time.Second}, DefaultRunnerGrace)
	want := StopRule{TTL: 15 * time.Second, LockDelay: 15 * time.Second, HealthChecks: true, RenewEvery: 5 * time.Second,
		RenewTimeout: 2 * time.Second, Grace: 5 * time.Second, Margin: StopMargin}
	if r != want {
		t.Fatalf("NewStopRule = %+v, want %+v", r, want)
	}
	noChecks := NewStopRule(SessionProfile{TTL: 10 * time.Second, NodeChecks: []string{}}, 0)
	if noChecks.HealthChecks {
		t.Fatal("node_checks [] and no service checks: HealthChecks must be false")
	}
	svc := NewStopRule(SessionProfile{TTL: 10 * time.Second, NodeChecks: []string{}, ServiceChecks: []ServiceCheck{{ID: "web"}}}, 0)
	if !svc.HealthChecks {
		t.Fatal("a service check also ends the session when it fails: HealthChecks must be true")
	}
}

func TestStopWarningNamesTheAttributesAndNumbers(t *testing.T) {
	if w := (SessionProfile{TTL: 15 * time.Second, LockDelay: 15 * time.Second}).StopWarning(); w != nil {
		t.Fatalf("Consul's defaults are feasible with the default grace, got %+v", w)
	}
	w := SessionProfile{TTL: 10 * time.Second, LockDelay: time.Second}.StopWarning()
	if w == nil {
		t.Fatal("lock_delay 1s with serfHealth: want a warning")
	}
	for _, want := range []string{"lock_delay 1s", "renew_every 3.333333333s", "ttl 10s", "default -grace 5s", "node_checks"} {
		if !strings.Contains(w.Detail, want) {
			t.Errorf("warning detail does not say %q:\n%s", want, w.Detail)
		}
	}
}
