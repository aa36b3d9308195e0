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
			if got := r.GuardKillAfter(); got != tc.deadBy+r.Margin/2 {
				t.Errorf("GuardKillAfter = %s, want DeadBy + Margin/2 = %s", got, tc.deadBy+r.Margin/2)
			}
			if tc.feasible && r.GuardKillAfter() >= r.TakeOverAfter() {
				t.Errorf("feasible, yet the guard kills at %s, not before take-over at %s", r.GuardKillAfter(), r.TakeOverAfter())
			}
			if tc.feasible && r.DeadBy()+r.Margin > r.TakeOverAfter() {
				t.Errorf("feasible, yet the command is dead at %s, less than the margin before take-over at %s", r.DeadBy(), r.TakeOverAfter())
			}
			if tc.feasible && r.LossAfter() <= r.MinLossAfter() {
				t.Errorf("feasible, yet a healthy holder whose renewal takes the whole timeout would lose the lock")
			}
			if verdict := r.Verdict(); (verdict == "") != tc.feasible {
				t.Errorf("Verdict = %q, feasible %v", verdict, tc.feasible)
			}
		})
	}
}

func TestNewStopRuleUsesTheResolvedProfile(t *testing.T) {
	r := NewStopRule(SessionProfile{TTL: 15 * time.Second, LockDelay: 15 * time.Second}.Resolve(), DefaultRunnerGrace)
	want := StopRule{TTL: 15 * time.Second, LockDelay: 15 * time.Second, HealthChecks: true, RenewEvery: 5 * time.Second,
		RenewTimeout: 2 * time.Second, Grace: 5 * time.Second, Margin: StopMargin}
	if r != want {
		t.Fatalf("NewStopRule = %+v, want %+v", r, want)
	}
	noChecks := NewStopRule(SessionProfile{TTL: 10 * time.Second, NodeChecks: []string{}}.Resolve(), 0)
	if noChecks.HealthChecks {
		t.Fatal("node_checks [] and no service checks: HealthChecks must be false")
	}
	svc := NewStopRule(SessionProfile{TTL: 10 * time.Second, NodeChecks: []string{}, ServiceChecks: []ServiceCheck{{ID: "web"}}}.Resolve(), 0)
	if !svc.HealthChecks {
		t.Fatal("a service check also ends the session when it fails: HealthChecks must be true")
	}
}

func TestStopWarningIsTheVerdictThenTheFix(t *testing.T) {
	if w := (SessionProfile{TTL: 15 * time.Second, LockDelay: 15 * time.Second}).Resolve().StopWarning(); w != nil {
		t.Fatalf("Consul's defaults are feasible with the default grace, got %+v", w)
	}
	p := SessionProfile{TTL: 10 * time.Second, LockDelay: time.Second}.Resolve()
	w := p.StopWarning()
	if w == nil {
		t.Fatal("lock_delay 1s with serfHealth: want a warning")
	}
	r := NewStopRule(p, DefaultRunnerGrace)
	if w.Detail != r.Verdict()+"\n"+r.Fix() || w.Field != "lock_delay" {
		t.Errorf("warning on %s:\n%s\nwant the verdict, then the fix, on lock_delay", w.Field, w.Detail)
	}
	for _, want := range []string{"lock_delay 1s", "renew_every 3.333333333s", "-grace 5s", `lock_delay = "12s"`} {
		if !strings.Contains(w.Detail, want) {
			t.Errorf("warning detail does not say %q:\n%s", want, w.Detail)
		}
	}
}

// TestStopRuleVerdictAndFix: an infeasible rule has a one-line verdict
// with the numbers and a one-line fix naming one attribute and a value;
// applying that fix makes the rule feasible. A feasible rule has neither.
func TestStopRuleVerdictAndFix(t *testing.T) {
	s := time.Second
	cases := []struct {
		name       string
		profile    SessionProfile
		grace      time.Duration
		verdict    []string // substrings
		attr       string
		value      time.Duration
		feasible   bool
		fixSays    string
		verdictLen int
	}{
		{name: "Consul's defaults", profile: SessionProfile{TTL: 15 * s, LockDelay: 15 * s}, grace: DefaultRunnerGrace, feasible: true},
		{
			name: "the quickstart's profile before: lock_delay 2s with serfHealth", profile: SessionProfile{TTL: 10 * s, LockDelay: 2 * s}, grace: DefaultRunnerGrace,
			verdict: []string{"lock_delay 2s", "11.333333333s", "renew_every 3.333333333s", "renewal timeout 2s", "grace 5s", "margin 1s"},
			attr:    "lock_delay", value: 12 * s, fixSays: `Set lock_delay = "12s" or longer`,
		},
		{
			name: "lock_delay 0 with health checks", profile: SessionProfile{TTL: 10 * s, LockDelay: 0, RenewEvery: 3 * s}, grace: 0,
			verdict: []string{"lock_delay 0s", "6s"}, attr: "lock_delay", value: 7 * s,
		},
		{
			name: "renew_every too slow for its ttl", profile: SessionProfile{TTL: 10 * s, LockDelay: 60 * s, RenewEvery: 9 * s}, grace: DefaultRunnerGrace,
			verdict: []string{"ttl 10s", "renew_every 9s", "11s"}, attr: "renew_every", value: 7 * s, fixSays: `Set renew_every = "7s" or shorter`,
		},
		{
			name: "no health checks, grace longer than ttl", profile: SessionProfile{TTL: 10 * s, LockDelay: 0, NodeChecks: []string{}}, grace: 20 * s,
			verdict: []string{"2 x ttl + lock_delay = 20s", "grace 20s"}, attr: "lock_delay", value: 7 * s,
		},
		{
			name: "need above the 60s lock_delay cap", profile: SessionProfile{TTL: 3 * time.Minute, LockDelay: 15 * s, RenewEvery: 58 * s}, grace: DefaultRunnerGrace,
			verdict: []string{"lock_delay 15s", "1m6s"}, attr: "renew_every", value: 6 * s,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewStopRule(tc.profile.Resolve(), tc.grace)
			v, f := r.Verdict(), r.Fix()
			if tc.feasible {
				if v != "" || f != "" || !r.Feasible() {
					t.Fatalf("feasible rule: verdict %q, fix %q", v, f)
				}
				return
			}
			if r.Feasible() || v == "" || f == "" {
				t.Fatalf("infeasible rule: feasible %v, verdict %q, fix %q", r.Feasible(), v, f)
			}
			for _, want := range tc.verdict {
				if !strings.Contains(v, want) {
					t.Errorf("verdict does not say %q: %s", want, v)
				}
			}
			if strings.Contains(v+f, "\n") || len(v) > 240 || len(f) > 120 {
				t.Errorf("not two short lines (%d, %d chars):\n%s\n%s", len(v), len(f), v, f)
			}
			attr, value, ok := r.fix()
			if !ok || attr != tc.attr || value != tc.value {
				t.Fatalf("fix = %s %s (%v), want %s %s", attr, value, ok, tc.attr, tc.value)
			}
			if !strings.Contains(f, attr) || !strings.Contains(f, `"`+FormatDuration(value)+`"`) || !strings.Contains(f, tc.fixSays) {
				t.Errorf("fix text %q does not name %s = %q (%q)", f, attr, FormatDuration(value), tc.fixSays)
			}
			if fixed := r.with(attr, value); !fixed.Feasible() {
				t.Errorf("the fix %s = %s leaves the rule infeasible: %s", attr, value, fixed.Verdict())
			}
		})
	}
}
