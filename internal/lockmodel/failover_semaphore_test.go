package lockmodel

import (
	"testing"
	"time"
)

func TestTakeOverDelay(t *testing.T) {
	for _, tc := range []struct{ lockDelay, want time.Duration }{
		{15 * time.Second, 15 * time.Second},
		{0, 0},
		{-time.Second, 0},
		{90 * time.Second, MaxLockDelay},
	} {
		if got := TakeOverDelay(tc.lockDelay); got != tc.want {
			t.Errorf("TakeOverDelay(%s) = %s, want %s", tc.lockDelay, got, tc.want)
		}
	}
}

func TestSlotFreeAt(t *testing.T) {
	seen := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		lockDelay time.Duration
		want      time.Time
	}{
		{"lock_delay after the waiter saw the holder dead", 8 * time.Second, seen.Add(8 * time.Second)},
		{"lock_delay 0: at once", 0, seen},
		{"clamped to 60s as Consul clamps it", 5 * time.Minute, seen.Add(time.Minute)},
	} {
		if got := SlotFreeAt(seen, tc.lockDelay); !got.Equal(tc.want) {
			t.Errorf("%s: SlotFreeAt = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A feasible stop rule and the semaphore waiter's prune delay agree: however
// soon after the holder's last contact its session ends, and however soon
// after that a waiter sees it dead, the slot is taken no earlier than the
// holder's command is dead plus the margin.
func TestSlotFreeAtIsNoEarlierThanTheStopRulesTakeOver(t *testing.T) {
	profiles := []SessionProfile{
		{TTL: 15 * time.Second, LockDelay: 8 * time.Second, RenewEvery: 2 * time.Second},
		{TTL: 15 * time.Second, LockDelay: 15 * time.Second},
		{TTL: 10 * time.Second, LockDelay: 2 * time.Minute, RenewEvery: 2 * time.Second},
		{TTL: 10 * time.Second, LockDelay: 0, NodeChecks: []string{}, RenewEvery: 2 * time.Second},
	}
	contact := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, p := range profiles {
		r := NewStopRule(p, 2*time.Second)
		if !r.Feasible() {
			t.Fatalf("profile %+v: the test wants a feasible rule", p)
		}
		// The earliest the session can end after the last contact: at once
		// with health checks, 2 x ttl without.
		end := contact
		if !r.HealthChecks {
			end = contact.Add(SessionTTLMultiplier * r.TTL)
		}
		for _, seenAfter := range []time.Duration{0, time.Millisecond, 3 * time.Second} {
			freeAt := SlotFreeAt(end.Add(seenAfter), r.LockDelay)
			if got := freeAt.Sub(contact); got < r.TakeOverAfter() || got < r.DeadBy()+r.Margin {
				t.Errorf("profile %+v, seen %s after the end: slot free %s after the last contact; take-over %s, command dead by %s",
					p, seenAfter, got, r.TakeOverAfter(), r.DeadBy())
			}
		}
	}
}
