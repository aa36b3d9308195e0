package lockmodel

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestHolderService_validate(t *testing.T) {
	long := strings.Repeat("a", 64)
	tooMany := map[string]string{}
	for i := range MaxServiceMetaPairs - len(HolderMetaKeys) + 1 {
		tooMany["k"+strings.Repeat("x", i)] = "v"
	}
	cases := []struct {
		name      string
		s         HolderService
		wantField string // "" for valid
		wantText  string
	}{
		{"minimal", HolderService{Name: "leader-web"}, "", ""},
		{"full", HolderService{Name: "db", Tags: []string{"primary", "v2"}, Port: 5432, Meta: map[string]string{"team": "data", "tier_1": "x"}}, "", ""},
		{"upper case name", HolderService{Name: "Leader"}, FieldHolderServiceName, "DNS label"},
		{"dot in name", HolderService{Name: "a.b"}, FieldHolderServiceName, "<name>.service.consul"},
		{"leading hyphen", HolderService{Name: "-a"}, FieldHolderServiceName, "starting and ending"},
		{"name of 64", HolderService{Name: long}, FieldHolderServiceName, "1 to 63"},
		{"empty name", HolderService{}, FieldHolderServiceName, "DNS label"},
		{"bad tag", HolderService{Name: "a", Tags: []string{"v1.2"}}, FieldHolderServiceTags, "<tag>.<name>.service.consul"},
		{"duplicate tag", HolderService{Name: "a", Tags: []string{"x", "x"}}, FieldHolderServiceTags, "at most once"},
		{"port 0 is none", HolderService{Name: "a", Port: 0}, "", ""},
		{"port 65536", HolderService{Name: "a", Port: 65536}, FieldHolderServicePort, "1 to 65535"},
		{"port -1", HolderService{Name: "a", Port: -1}, FieldHolderServicePort, "1 to 65535"},
		{"meta key with dot", HolderService{Name: "a", Meta: map[string]string{"a.b": "v"}}, FieldHolderServiceMeta, "letters, digits"},
		{"meta key reserved by Consul", HolderService{Name: "a", Meta: map[string]string{"consul-x": "v"}}, FieldHolderServiceMeta, `"consul-"`},
		{"meta key the runner writes", HolderService{Name: "a", Meta: map[string]string{HolderMetaFencingToken: "1"}}, FieldHolderServiceMeta, "the runner writes"},
		{"meta session", HolderService{Name: "a", Meta: map[string]string{HolderMetaSession: "1"}}, FieldHolderServiceMeta, "the runner writes"},
		{"meta value too long", HolderService{Name: "a", Meta: map[string]string{"k": strings.Repeat("v", 513)}}, FieldHolderServiceMeta, "512 bytes"},
		{"too many meta pairs", HolderService{Name: "a", Meta: tooMany}, FieldHolderServiceMeta, "at most 60 pairs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			fes := validation.AsFieldErrors(err)
			if len(fes) == 0 {
				t.Fatalf("Validate = nil, want an error on %s", tc.wantField)
			}
			if fes[0].Field != tc.wantField || !strings.Contains(fes[0].Error(), tc.wantText) {
				t.Fatalf("Validate = %v, want field %s mentioning %q", err, tc.wantField, tc.wantText)
			}
		})
	}
}

func TestLock_validateNamesHolderServiceFields(t *testing.T) {
	l := Lock{Name: "a", Prefix: "p", HolderService: &HolderService{Name: "A_B", Port: 70000}}
	got := map[string]bool{}
	for _, fe := range validation.AsFieldErrors(l.Validate()) {
		got[fe.Field] = true
	}
	if !got[FieldHolderServiceName] || !got[FieldHolderServicePort] {
		t.Fatalf("Lock.Validate fields = %v, want holder_service.name and holder_service.port", got)
	}
}

func TestHolderService_instance(t *testing.T) {
	s := HolderService{Name: "web", Tags: []string{"leader"}, Port: 8080, Meta: map[string]string{"team": "a"}}
	check := NewHolderCheck(SessionProfile{TTL: 15 * time.Second, LockDelay: 15 * time.Second})
	h := HolderIdentity{Lock: "web-leader", Session: "0b5c2a1e-0000-4000-8000-000000000001", FencingToken: 4242, Node: "n1", PID: 77}
	in := s.Instance(h, check, "", 0)
	if in.ID != "web-0b5c2a1e-0000-4000-8000-000000000001" || in.CheckID != "service:"+in.ID || in.Port != 8080 || in.Name != "web" {
		t.Fatalf("instance = %+v", in)
	}
	want := map[string]string{"team": "a", "lock": "web-leader", "session": h.Session, "fencing_token": "4242", "holder": "n1/77"}
	for k, v := range want {
		if in.Meta[k] != v {
			t.Errorf("meta[%s] = %q, want %q", k, in.Meta[k], v)
		}
	}
	if len(in.Meta) != len(want) {
		t.Errorf("meta = %v, want %v", in.Meta, want)
	}
	if o := s.Instance(h, check, "10.0.0.7", 9000); o.Port != 9000 || o.Address != "10.0.0.7" {
		t.Errorf("overrides: port %d address %q", o.Port, o.Address)
	}
	other := s.Instance(HolderIdentity{Session: "other"}, check, "", 0)
	if other.ID == in.ID {
		t.Errorf("two holders share the instance ID %s", in.ID)
	}
	s.Meta["team"] = "b"
	if in.Meta["team"] != "a" {
		t.Errorf("the instance shares its meta map with the declaration")
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
			c := NewHolderCheck(p)
			if c.TTL != tc.wantTTL || c.Flaps != tc.wantFlaps || c.PassAllowed(0) == tc.wantNever {
				t.Fatalf("NewHolderCheck = TTL %s flaps %v never %v, want %s %v %v", c.TTL, c.Flaps, !c.PassAllowed(0), tc.wantTTL, tc.wantFlaps, tc.wantNever)
			}
			d := p.WithDefaults()
			rt := RenewTimeout(d.RenewEvery)
			// Invariants, every case.
			if bound := TakeOverDelay(d.LockDelay); c.Bound != bound {
				t.Errorf("Bound = %s, want the clamped lock_delay %s (a destroy frees the key lock_delay after it)", c.Bound, bound)
			}
			if c.TTL < MinHolderCheckTTL {
				t.Errorf("TTL %s below %s", c.TTL, MinHolderCheckTTL)
			}
			// Every pass allowed expires a margin before the earliest
			// take-over, an expiry or a destroy right after the renewal.
			for since := time.Duration(0); since <= 2*rt; since += 10 * ms {
				if c.PassAllowed(since) && since+c.PassTimeout+c.TTL+HolderCheckMargin > min(d.TTL+c.Bound, c.Bound) {
					t.Fatalf("a pass %s after the contact is allowed but expires after the take-over", since)
				}
			}
			if c.PassAllowed(0) {
				latest := c.Bound - c.PassTimeout - c.TTL - HolderCheckMargin
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
				if n := NewHolderCheck(q); n.Flaps && n.TTLCeiling >= MinHolderCheckTTL {
					t.Errorf("renew_every %s (below MaxRenewEvery %s) flaps: %+v", q.RenewEvery, m, n)
				}
			}
			if need := c.MinLockDelay(); need < MaxLockDelay {
				q := p
				q.LockDelay = need + 10*ms
				if n := NewHolderCheck(q); n.Flaps {
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

// TestHolderVia: the agent endpoint without -node, the catalog with it,
// an explicit choice kept, catalog without a node and unknown values
// refused naming the flag, the value and what is allowed.
func TestHolderVia(t *testing.T) {
	for _, c := range []struct {
		value, node, want, err string
	}{
		{"auto", "", HolderViaAgent, ""},
		{"", "", HolderViaAgent, ""},
		{"auto", "consul-lock-runners", HolderViaCatalog, ""},
		{"agent", "consul-lock-runners", HolderViaAgent, ""},
		{"catalog", "consul-lock-runners", HolderViaCatalog, ""},
		{"catalog", "", "", `-service-registration: "catalog" is not allowed; catalog only with -node NAME`},
		{"dns", "", "", `-service-registration: "dns" is not allowed; auto, agent or catalog`},
	} {
		via, reason, err := HolderVia(c.value, c.node)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("HolderVia(%q, %q) error %v, want %q", c.value, c.node, err, c.err)
			}
			continue
		}
		if err != nil || via != c.want || reason == "" {
			t.Errorf("HolderVia(%q, %q) = %q, %q, %v; want %q with a reason", c.value, c.node, via, reason, err, c.want)
		}
	}
}

// TestHolderInstanceStale: a mutex's other holders' instances are stale
// once this holder holds; a semaphore's only when their session ended;
// the holder's own never; for an observer holding nothing (the
// controller) only those whose session ended.
func TestHolderInstanceStale(t *testing.T) {
	for _, c := range []struct {
		name       string
		limit      int
		mine       string
		other      string
		otherAlive bool
		want       bool
	}{
		{"mutex: a former holder whose session lives on (frozen, not yet invalidated)", 1, "a", "b", true, true},
		{"mutex: a former holder whose session ended", 1, "a", "b", false, true},
		{"mutex: the holder's own", 1, "a", "a", true, false},
		{"semaphore: another holder still alive", 3, "a", "b", true, false},
		{"semaphore: a holder whose session ended", 3, "a", "b", false, true},
		{"semaphore: the holder's own", 3, "a", "a", false, false},
		{"controller, mutex: a holder whose session lives (maybe the current one)", 1, "", "b", true, false},
		{"controller, mutex: a holder whose session ended", 1, "", "b", false, true},
		{"controller, semaphore: a holder whose session ended", 3, "", "b", false, true},
	} {
		if got := HolderInstanceStale(c.limit, c.mine, c.other, c.otherAlive); got != c.want {
			t.Errorf("%s: stale %v, want %v", c.name, got, c.want)
		}
	}
}

// TestValidateHolderNode: a node that carries holder instances is a DNS
// label in either case; anything else names the field, the value and the
// form.
func TestValidateHolderNode(t *testing.T) {
	for node, ok := range map[string]bool{
		"consul-lock-runners": true, "Runners-1": true, "a": true, strings.Repeat("n", 63): true,
		"": false, strings.Repeat("n", 64): false, "a.b": false, "a_b": false, "-a": false, "a-": false, "ä": false,
	} {
		err := ValidateHolderNode("-node", node)
		if (err == nil) != ok {
			t.Errorf("ValidateHolderNode(%q) = %v, want ok %v", node, err, ok)
			continue
		}
		if fes := validation.AsFieldErrors(err); !ok && (len(fes) != 1 || fes[0].Field != "-node" || !strings.Contains(fes[0].Allowed, "1 to 63 letters")) {
			t.Errorf("ValidateHolderNode(%q) = %v, want a -node FieldError with the allowed form", node, err)
		}
	}
}
