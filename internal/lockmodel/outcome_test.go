package lockmodel

import (
	"testing"
	"time"
)

func TestOutcomeDeadlines(t *testing.T) {
	exited := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                      string
		ttl, lockDelay, sinceLast time.Duration
		fenced, afterLoss         time.Duration // after exited
	}{
		{"renewed just before the exit", 10 * time.Second, 15 * time.Second, time.Second, 19 * time.Second, 34 * time.Second},
		{"lock-delay 0 still gets a window", 10 * time.Second, 0, 0, 20 * time.Second, 30 * time.Second},
		{"lock-delay clamped at 60s", 15 * time.Second, 2 * time.Minute, 3 * time.Second, 27 * time.Second, 87 * time.Second},
		// A contact after the exit (renewals went on) never moves the
		// end past 2 x TTL after the exit.
		{"contact after the exit", 10 * time.Second, 5 * time.Second, -4 * time.Second, 20 * time.Second, 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := NewOutcomeDeadlines(c.ttl, c.lockDelay, exited.Add(-c.sinceLast), exited)
			if got := d.Fenced.Sub(exited); got != c.fenced {
				t.Errorf("fenced ends %s after the exit, want %s", got, c.fenced)
			}
			if got := d.AfterLoss(d.Fenced).Sub(exited); got != c.afterLoss {
				t.Errorf("after loss ends %s after the exit, want %s", got, c.afterLoss)
			}
			if w := OutcomeWait(c.ttl, c.lockDelay); d.AfterLoss(d.Fenced).Sub(exited) > w {
				t.Errorf("OutcomeWait %s is shorter than these deadlines", w)
			}
		})
	}
	if got := OutcomeWait(15*time.Second, 15*time.Second); got != 45*time.Second {
		t.Fatalf("OutcomeWait(15s, 15s) = %s, want 45s", got)
	}
}
