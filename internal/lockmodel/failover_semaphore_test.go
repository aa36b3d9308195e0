package lockmodel

import (
	"encoding/json"
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
		r := NewStopRule(p.Resolve(), 2*time.Second)
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

// A waiter counts the dead holder's own lock-delay, never its own: the
// largest it learnt, and the maximum when it learnt nothing (issue 22,
// hole 2: a holder of an older, longer profile, whose session the waiter's
// token could not read, would otherwise be replaced while its command may
// still run).
func TestDeadHolderLockDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		known []time.Duration
		want  time.Duration
	}{
		{"nothing learnt: the maximum Consul allows", nil, MaxLockDelay},
		{"written at admission", []time.Duration{20 * time.Second}, 20 * time.Second},
		{"written 0: at once", []time.Duration{0}, 0},
		{"written and read from the session: the larger", []time.Duration{5 * time.Second, 8 * time.Second}, 8 * time.Second},
		{"clamped as Consul clamps it", []time.Duration{5 * time.Minute}, MaxLockDelay},
	} {
		if got := DeadHolderLockDelay(tc.known...); got != tc.want {
			t.Errorf("%s: DeadHolderLockDelay(%v) = %s, want %s", tc.name, tc.known, got, tc.want)
		}
	}
	// The slot of a holder the waiter learnt nothing about frees only at
	// the maximum, whatever the waiter's own lock-delay.
	seen := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := SlotFreeAt(seen, DeadHolderLockDelay()); !got.Equal(seen.Add(time.Minute)) {
		t.Errorf("unknown holder: slot free at %s, want %s", got, seen.Add(time.Minute))
	}
}

func TestWithLockDelayAndHolderLockDelay(t *testing.T) {
	started := time.Date(2025, 6, 1, 2, 0, 0, 123456789, time.UTC)
	plain, _ := json.Marshal(HolderValue{Node: "web-1", PID: 42, Started: started, Lock: "pool"})
	stamped := WithLockDelay(plain, 20*time.Second)
	want := `{"node":"web-1","pid":42,"started":"2025-06-01T02:00:00.123456789Z","lock":"pool","lock_delay":"20s"}`
	if string(stamped) != want {
		t.Fatalf("WithLockDelay = %s, want %s", stamped, want)
	}
	if d, ok := HolderLockDelay(stamped); !ok || d != 20*time.Second {
		t.Fatalf("HolderLockDelay(%s) = %s, %v; want 20s", stamped, d, ok)
	}
	if d, ok := HolderLockDelay(WithLockDelay(plain, 0)); !ok || d != 0 {
		t.Fatalf("lock-delay 0 written: HolderLockDelay = %s, %v; want 0s, true", d, ok)
	}
	if d, ok := HolderLockDelay(WithLockDelay(plain, 2*time.Minute)); !ok || d != MaxLockDelay {
		t.Fatalf("lock-delay 2m written: HolderLockDelay = %s, %v; want it clamped to 60s", d, ok)
	}
	if _, ok := HolderLockDelay(plain); ok {
		t.Fatal("a value without lock_delay has one")
	}
	// A value that is not exactly a HolderValue is the user's own: left
	// as it is, and it says nothing about the lock-delay.
	for _, v := range []string{"", "deploy from CI", `{"node":"a","extra":1}`, `{"node":"a"} {}`, `[1]`} {
		if got := WithLockDelay([]byte(v), 20*time.Second); string(got) != v {
			t.Errorf("WithLockDelay(%q) = %q, want it unchanged", v, got)
		}
		if _, ok := HolderLockDelay([]byte(v)); ok {
			t.Errorf("HolderLockDelay(%q) found a lock-delay", v)
		}
	}
}
