package lockmodel

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestLock_validateNamesHolderServiceFields(t *testing.T) {
	l := Lock{Name: "a", Prefix: "p", HolderService: &holdersvc.Service{Name: "A_B", Port: 70000}}
	got := map[string]bool{}
	for _, fe := range validation.AsFieldErrors(l.Validate()) {
		got[fe.Field] = true
	}
	if !got[holdersvc.FieldName] || !got[holdersvc.FieldPort] {
		t.Fatalf("Lock.Validate fields = %v, want holder_service.name and holder_service.port", got)
	}
}

// TestNewHolderCheck: the check is critical before the earliest take-over
// after the holder's last confirmed contact however the session ends (a
// destroy frees the key lock_delay after it, so the bound is lock_delay,
// not ttl + lock_delay), for a pass sent right after a renewal that took
// the whole renewal timeout; it survives one failed renewal whenever that
// fits below the bound, and flaps (with a warning naming the numbers)
// when the lock_delay is too short for the renew_every.
func TestNewHolderCheck(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	cases := []struct {
		name                  string
		ttl, lockDelay, renew time.Duration
		wantTTL               time.Duration
		wantFlaps, wantNever  bool
		wantSummary           string
	}{
		// renew 5s, timeout 2s: floor 9s, +renew = 14s; ceiling 15-4-1 = 10s.
		{"defaults", 15 * s, 15 * s, 0, 10 * s, false, false, ""},
		// The profile: renew 20s: floor 24s; ceiling 30-4-1 = 25s
		// (ttl + lock_delay gave 44s, passing 14s after a destroy's take-over).
		{"ttl 60s lock_delay 30s", 60 * s, 30 * s, 0, 25 * s, false, false, ""},
		// The quickstart's: renew 3.33s, timeout 2s: floor 7.33s; ceiling
		// 5-4-1 = 0: TTL 1s, passed only after a renewal answered within 1s.
		{"quickstart ttl 10s lock_delay 5s", 10 * s, 5 * s, 0, 1 * s, true, false, "Holder Check May Flap"},
		// renew 1s, timeout 1s: floor 3s; ceiling 5-2-1 = 2s.
		{"renew 1s lock_delay 5s", 10 * s, 5 * s, 1 * s, 2 * s, true, false, "Holder Check May Flap"},
		// renew 0.5s: floor 1.5s, +renew 2s; ceiling 5-1-1 = 3s.
		{"renew 500ms lock_delay 5s", 10 * s, 5 * s, 500 * ms, 2 * s, false, false, ""},
		// renew 3.33s: ceiling 1-4-1 < 0: no pass can expire in time.
		{"short lock_delay", 10 * s, 1 * s, 0, 1 * s, true, true, "Holder Never In DNS"},
		{"lock_delay 0", 10 * s, 0, 1 * s, 1 * s, true, true, "Holder Never In DNS"},
		// renew 100ms: floor 300ms, but the ceiling 2-0.2-1 = 0.8s is below
		// the least TTL: 1s + 0.1s + 1s > 2s, never passed.
		{"lock_delay 2s renew 100ms", 10 * s, 2 * s, 100 * ms, 1 * s, true, true, "Holder Never In DNS"},
		// lock_delay clamped to 60s: ceiling 55s, far below renew 1h.
		{"long ttl, renew 1h", 24 * time.Hour, 2 * time.Minute, time.Hour, 55 * s, true, false, "Holder Check May Flap"},
		{"long ttl, renew 30s", 24 * time.Hour, time.Minute, 30 * s, 55 * s, false, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := SessionProfile{TTL: tc.ttl, LockDelay: tc.lockDelay, RenewEvery: tc.renew}
			c := NewHolderCheck(p.Resolve())
			if c.TTL != tc.wantTTL || c.Flaps != tc.wantFlaps || c.PassAllowed(0) == tc.wantNever {
				t.Fatalf("NewHolderCheck = TTL %s flaps %v never %v, want %s %v %v", c.TTL, c.Flaps, !c.PassAllowed(0), tc.wantTTL, tc.wantFlaps, tc.wantNever)
			}
			d := p.Resolve()
			rt := RenewTimeout(d.RenewEvery)
			// Invariants, every case.
			if bound := TakeOverDelay(d.LockDelay); c.Bound != bound {
				t.Errorf("Bound = %s, want the clamped lock_delay %s (a destroy frees the key lock_delay after it)", c.Bound, bound)
			}
			if c.TTL < holdersvc.MinCheckTTL {
				t.Errorf("TTL %s below %s", c.TTL, holdersvc.MinCheckTTL)
			}
			// Every pass allowed expires a margin before the earliest
			// take-over, an expiry or a destroy right after the renewal.
			for since := time.Duration(0); since <= 2*rt; since += 10 * ms {
				if c.PassAllowed(since) && since+c.PassTimeout+c.TTL+holdersvc.CheckMargin > min(d.TTL+c.Bound, c.Bound) {
					t.Fatalf("a pass %s after the contact is allowed but expires after the take-over", since)
				}
			}
			if c.PassAllowed(0) {
				latest := c.Bound - c.PassTimeout - c.TTL - holdersvc.CheckMargin
				if !c.PassAllowed(latest) || c.PassAllowed(latest+time.Millisecond) {
					t.Errorf("PassAllowed(%s) = %v, PassAllowed(+1ms) = %v: want true, false (expiry a margin before the bound)",
						latest, c.PassAllowed(latest), c.PassAllowed(latest+time.Millisecond))
				}
			}
			if c.PassAllowed(-time.Millisecond) {
				t.Error("PassAllowed of a negative time since contact")
			}
			if !c.Flaps {
				if c.TTL <= d.RenewEvery+2*rt {
					t.Errorf("TTL %s does not outlast a renewal interval (%s + 2 x %s) yet Flaps is false", c.TTL, d.RenewEvery, rt)
				}
				if !c.PassAllowed(rt) {
					t.Errorf("a pass right after a renewal that took the timeout (%s) is not allowed yet Flaps is false", rt)
				}
				if d.RenewEvery >= c.MaxRenewEvery() || TakeOverDelay(d.LockDelay) <= c.MinLockDelay() {
					t.Errorf("not flapping with renew_every %s (max %s) and lock_delay %s (min %s)", d.RenewEvery, c.MaxRenewEvery(), d.LockDelay, c.MinLockDelay())
				}
			}
			// The renew_every the warning names does not flap.
			if m := c.MaxRenewEvery(); m > 0 {
				q := p
				q.RenewEvery = m - 10*ms
				if n := NewHolderCheck(q.Resolve()); n.Flaps && n.TTLCeiling >= holdersvc.MinCheckTTL {
					t.Errorf("renew_every %s (below MaxRenewEvery %s) flaps: %+v", q.RenewEvery, m, n)
				}
			}
			if need := c.MinLockDelay(); need < MaxLockDelay {
				q := p
				q.LockDelay = need + 10*ms
				if n := NewHolderCheck(q.Resolve()); n.Flaps {
					t.Errorf("lock_delay %s (above MinLockDelay %s) flaps: %+v", q.LockDelay, need, n)
				}
			}
			ws := c.Warnings()
			if (len(ws) > 0) != c.Flaps {
				t.Errorf("Warnings() = %v with Flaps %v", ws, c.Flaps)
			}
			if len(ws) > 0 {
				if ws[0].Summary != tc.wantSummary {
					t.Errorf("summary %q, want %q", ws[0].Summary, tc.wantSummary)
				}
				for _, n := range []time.Duration{c.Bound, c.TTL, c.TTLFloor} {
					if !strings.Contains(ws[0].Detail, FormatDuration(n)) {
						t.Errorf("warning does not name %s: %s", FormatDuration(n), ws[0].Detail)
					}
				}
				t.Log(ws[0].Detail)
			}
		})
	}
}
