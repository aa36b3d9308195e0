package lockmodel

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// validProfile is a profile every field of which is valid and explicit.
func validProfile() SessionProfile {
	return SessionProfile{
		Name:       "fast",
		TTL:        15 * time.Second,
		LockDelay:  15 * time.Second,
		Behavior:   BehaviorRelease,
		NodeChecks: []string{DefaultNodeCheck},
		RenewEvery: 5 * time.Second,
	}
}

func TestSessionProfile_Resolve(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   SessionProfile
		want SessionProfile
	}{
		{
			name: "zero profile gets Consul's defaults but no lock delay",
			in:   SessionProfile{Name: "p"},
			want: SessionProfile{Name: "p", TTL: 15 * time.Second, Behavior: BehaviorRelease,
				NodeChecks: []string{"serfHealth"}, RenewEvery: 5 * time.Second},
		},
		{
			name: "explicit values are kept",
			in: SessionProfile{Name: "p", TTL: time.Minute, LockDelay: 3 * time.Second, Behavior: BehaviorDelete,
				NodeChecks: []string{"a"}, ServiceChecks: []ServiceCheck{{ID: "svc"}}, RenewEvery: 10 * time.Second},
			want: SessionProfile{Name: "p", TTL: time.Minute, LockDelay: 3 * time.Second, Behavior: BehaviorDelete,
				NodeChecks: []string{"a"}, ServiceChecks: []ServiceCheck{{ID: "svc"}}, RenewEvery: 10 * time.Second},
		},
		{
			name: "empty node checks stay empty",
			in:   SessionProfile{Name: "p", TTL: 30 * time.Second, NodeChecks: []string{}},
			want: SessionProfile{Name: "p", TTL: 30 * time.Second, Behavior: BehaviorRelease,
				NodeChecks: []string{}, RenewEvery: 10 * time.Second},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.Resolve()
			if !reflect.DeepEqual(got, Profile{tc.want}) {
				t.Fatalf("Resolve() = %+v, want %+v", got, tc.want)
			}
			if got.NodeChecks == nil {
				t.Fatalf("Resolve() left NodeChecks nil")
			}
		})
	}
}

func TestSessionProfile_ResolveCopiesSlices(t *testing.T) {
	in := SessionProfile{NodeChecks: []string{"a"}, ServiceChecks: []ServiceCheck{{ID: "s"}}}
	out := in.Resolve()
	out.NodeChecks[0] = "changed"
	out.ServiceChecks[0].ID = "changed"
	if in.NodeChecks[0] != "a" || in.ServiceChecks[0].ID != "s" {
		t.Fatalf("Resolve shares slices with its receiver: %+v", in)
	}
}

func TestSessionProfile_ValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*SessionProfile)
	}{
		{"explicit profile", func(p *SessionProfile) {}},
		{"shortest ttl", func(p *SessionProfile) { p.TTL = 10 * time.Second; p.RenewEvery = 0 }},
		{"longest ttl", func(p *SessionProfile) { p.TTL = 24 * time.Hour }},
		{"no lock delay", func(p *SessionProfile) { p.LockDelay = 0 }},
		{"longest lock delay", func(p *SessionProfile) { p.LockDelay = 60 * time.Second }},
		{"behavior unset means release", func(p *SessionProfile) { p.Behavior = "" }},
		{"delete behavior", func(p *SessionProfile) { p.Behavior = BehaviorDelete }},
		{"default node checks", func(p *SessionProfile) { p.NodeChecks = nil }},
		{"no node checks", func(p *SessionProfile) { p.NodeChecks = []string{} }},
		{"renew unset", func(p *SessionProfile) { p.RenewEvery = 0 }},
		{"renew just below ttl/2", func(p *SessionProfile) { p.RenewEvery = 7500*time.Millisecond - 1 }},
		{"service checks", func(p *SessionProfile) {
			p.ServiceChecks = []ServiceCheck{{ID: "service:web"}, {ID: "service:web", Namespace: "team-a"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validProfile()
			tc.modify(&p)
			if err := p.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestSessionProfile_ValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name      string
		modify    func(*SessionProfile)
		field     string
		value     string
		fragments []string
	}{
		{"bad name", func(p *SessionProfile) { p.Name = "fast profile" },
			"name", "fast profile", []string{"1 to 128"}},
		{"ttl zero is not no-ttl", func(p *SessionProfile) { p.TTL = 0; p.RenewEvery = 0 },
			"ttl", "0s", []string{"from 10s to 24h0m0s"}},
		{"ttl below Consul's minimum", func(p *SessionProfile) { p.TTL = 10*time.Second - time.Millisecond; p.RenewEvery = 0 },
			"ttl", "9.999s", []string{"from 10s to 24h0m0s"}},
		{"ttl above Consul's maximum", func(p *SessionProfile) { p.TTL = 24*time.Hour + time.Second },
			"ttl", "24h0m1s", []string{"from 10s to 24h0m0s"}},
		{"negative lock delay", func(p *SessionProfile) { p.LockDelay = -time.Second },
			"lock_delay", "-1s", []string{"from 0s to 1m0s"}},
		{"lock delay Consul would clamp", func(p *SessionProfile) { p.LockDelay = 61 * time.Second },
			"lock_delay", "1m1s", []string{"silently clamps"}},
		{"unknown behavior", func(p *SessionProfile) { p.Behavior = "Release" },
			"behavior", "Release", []string{`"release" or "delete"`}},
		{"renew at ttl/2", func(p *SessionProfile) { p.RenewEvery = 7500 * time.Millisecond },
			"renew_every", "7.5s", []string{"below ttl/2 (7.5s for ttl 15s)", "ttl/3 (5s)"}},
		{"renew beyond ttl", func(p *SessionProfile) { p.RenewEvery = time.Minute },
			"renew_every", "1m0s", []string{"below ttl/2"}},
		{"negative renew", func(p *SessionProfile) { p.RenewEvery = -time.Second },
			"renew_every", "-1s", []string{"above 0s"}},
		{"empty node check", func(p *SessionProfile) { p.NodeChecks = []string{""} },
			"node_checks", "", []string{"non-empty check ID"}},
		{"node check with space", func(p *SessionProfile) { p.NodeChecks = []string{"serf Health"} },
			"node_checks", "serf Health", []string{"without spaces"}},
		{"duplicate node check", func(p *SessionProfile) { p.NodeChecks = []string{"serfHealth", "serfHealth"} },
			"node_checks", "serfHealth", []string{"at most once"}},
		{"empty service check", func(p *SessionProfile) { p.ServiceChecks = []ServiceCheck{{Namespace: "ns"}} },
			"service_checks", "", []string{"non-empty check ID"}},
		{"duplicate service check", func(p *SessionProfile) { p.ServiceChecks = []ServiceCheck{{ID: "web"}, {ID: "web"}} },
			"service_checks", "web", []string{"at most once"}},
		{"node check not UTF-8", func(p *SessionProfile) { p.NodeChecks = []string{"serf\xff"} },
			"node_checks", "serf\xff", []string{"valid UTF-8"}},
		{"service check namespace not UTF-8", func(p *SessionProfile) { p.ServiceChecks = []ServiceCheck{{ID: "web", Namespace: "\x87"}} },
			"service_checks", "\x87", []string{"valid UTF-8"}},
		{"service check namespace with newline", func(p *SessionProfile) { p.ServiceChecks = []ServiceCheck{{ID: "web", Namespace: "a\nb"}} },
			"service_checks", "a\nb", []string{"namespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validProfile()
			tc.modify(&p)
			errs := validation.AsFieldErrors(p.Validate())
			if len(errs) != 1 {
				t.Fatalf("Validate() = %v, want exactly one error for %s", errs, tc.field)
			}
			assertFieldError(t, errs[0], tc.field, tc.value, tc.fragments...)
		})
	}
}

func TestSessionProfile_ValidateReportsEveryField(t *testing.T) {
	p := SessionProfile{Name: "", TTL: time.Second, LockDelay: time.Hour, Behavior: "keep",
		NodeChecks: []string{""}, ServiceChecks: []ServiceCheck{{}}, RenewEvery: -1}
	var got []string
	for _, e := range validation.AsFieldErrors(p.Validate()) {
		got = append(got, e.Field)
	}
	want := []string{"name", "ttl", "lock_delay", "behavior", "renew_every", "node_checks", "service_checks"}
	if !slices.Equal(got, want) {
		t.Fatalf("Validate() reported fields %v, want %v", got, want)
	}
}

func TestSessionProfile_Warnings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*SessionProfile)
		want   map[string]string // field -> fragment of the detail
	}{
		{"safe profile", func(p *SessionProfile) {}, nil},
		{"default node checks", func(p *SessionProfile) { p.NodeChecks = nil }, nil},
		{"no lock delay", func(p *SessionProfile) { p.LockDelay = 0 },
			map[string]string{"lock_delay": "only safe for idempotent work"}},
		{"no node checks", func(p *SessionProfile) { p.NodeChecks = []string{}; p.TTL = 30 * time.Second },
			map[string]string{"node_checks": "up to 2 x ttl (1m0s)"}},
		{"both", func(p *SessionProfile) { p.LockDelay = 0; p.NodeChecks = []string{} },
			map[string]string{"lock_delay": "may still be running", "node_checks": "survives node failure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := validProfile()
			tc.modify(&p)
			ws := p.Warnings()
			if len(ws) != len(tc.want) {
				t.Fatalf("Warnings() = %+v, want %d warnings", ws, len(tc.want))
			}
			for _, w := range ws {
				frag, ok := tc.want[w.Field]
				if !ok {
					t.Fatalf("unexpected warning for %s: %+v", w.Field, w)
				}
				if w.Summary == "" || !strings.Contains(w.Detail, frag) {
					t.Errorf("warning for %s = %+v, want a summary and %q in the detail", w.Field, w, frag)
				}
			}
		})
	}
}

func TestProfile_WorstCaseGap(t *testing.T) {
	for _, tc := range []struct {
		ttl, delay time.Duration
		want       string
	}{
		{15 * time.Second, 15 * time.Second, "45s"},
		{10 * time.Second, 0, "20s"},
		{30 * time.Second, 30 * time.Second, "1m30s"},
		{24 * time.Hour, 60 * time.Second, "48h1m0s"},
		{15 * time.Second, 5 * time.Minute, "1m30s"}, // Consul clamps the delay to 60s
	} {
		t.Run(tc.want, func(t *testing.T) {
			p := SessionProfile{TTL: tc.ttl, LockDelay: tc.delay}.Resolve()
			if got := FormatDuration(p.WorstCaseGap()); got != tc.want {
				t.Fatalf("WorstCaseGap(ttl %s, lock_delay %s) = %s, want %s", tc.ttl, tc.delay, got, tc.want)
			}
			if got := FormatDuration(WorstCaseGap(tc.ttl, tc.delay)); got != tc.want {
				t.Fatalf("WorstCaseGap(%s, %s) = %s, want %s", tc.ttl, tc.delay, got, tc.want)
			}
		})
	}
}

func TestConsulDuration_isExplicit(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{15 * time.Second, "15s"},
		{90 * time.Second, "1m30s"},
		{1500 * time.Millisecond, "1.5s"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := ConsulDuration(tc.d); got != tc.want {
				t.Fatalf("ConsulDuration(%d) = %q, want %q", tc.d, got, tc.want)
			}
			if got := FormatDuration(tc.d); got != tc.want {
				t.Fatalf("FormatDuration(%d) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
}

func TestParseConsulTTL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"", 0, ""},
		{"15s", 15 * time.Second, ""},
		{"24h0m0s", 24 * time.Hour, ""},
		{"fifteen", 0, `"fifteen"`},
		{"-5s", 0, `"-5s" from Consul is negative`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseConsulTTL(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseConsulTTL(%q) error = %v, want one containing %s", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseConsulTTL(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestProfile_Violations(t *testing.T) {
	profile := SessionProfile{Name: "fast", TTL: 15 * time.Second, LockDelay: 15 * time.Second,
		Behavior: BehaviorRelease, ServiceChecks: []ServiceCheck{{ID: "service:web"}}}
	conforming := ObservedSession{ID: "s1", TTL: 15 * time.Second, LockDelay: 15 * time.Second,
		Behavior: BehaviorRelease, NodeChecks: []string{"serfHealth"}, ServiceChecks: []string{"service:web"}}
	for _, tc := range []struct {
		name    string
		profile SessionProfile
		modify  func(*ObservedSession)
		want    []string
	}{
		{"conforming session", profile, func(s *ObservedSession) {}, nil},
		{"stricter session is fine", profile, func(s *ObservedSession) {
			s.TTL = 10 * time.Second
			s.LockDelay = 30 * time.Second
			s.NodeChecks = append(s.NodeChecks, "extra")
		}, nil},
		{"empty behavior is Consul's release", profile, func(s *ObservedSession) { s.Behavior = "" }, nil},
		{"longer ttl", profile, func(s *ObservedSession) { s.TTL = time.Minute }, []string{ViolationTTLTooLong}},
		{"ttl a second longer", profile, func(s *ObservedSession) { s.TTL = 16 * time.Second }, []string{ViolationTTLTooLong}},
		{"lock delay a millisecond shorter", profile, func(s *ObservedSession) { s.LockDelay = 15*time.Second - time.Millisecond },
			[]string{ViolationLockDelayTooShort}},
		{"lock delay above Consul's clamp declared", SessionProfile{Name: "p", TTL: 15 * time.Second, LockDelay: 5 * time.Minute},
			func(s *ObservedSession) { s.LockDelay = 60 * time.Second; s.ServiceChecks = nil }, nil},
		{"no ttl at all", profile, func(s *ObservedSession) { s.TTL = 0 }, []string{ViolationTTLTooLong}},
		{"shorter lock delay", profile, func(s *ObservedSession) { s.LockDelay = 0 }, []string{ViolationLockDelayTooShort}},
		{"other behavior", profile, func(s *ObservedSession) { s.Behavior = BehaviorDelete }, []string{ViolationBehaviorMismatch}},
		{"default node check missing", profile, func(s *ObservedSession) { s.NodeChecks = nil }, []string{ViolationNodeCheckMissing}},
		{"service check missing", profile, func(s *ObservedSession) { s.ServiceChecks = nil }, []string{ViolationServiceCheckMissing}},
		{"profile without node checks", SessionProfile{Name: "p", TTL: 15 * time.Second, NodeChecks: []string{}},
			func(s *ObservedSession) { s.NodeChecks = nil; s.LockDelay = 0 }, nil},
		{"everything at once", profile, func(s *ObservedSession) {
			*s = ObservedSession{ID: "s1", Behavior: BehaviorDelete}
		}, []string{ViolationTTLTooLong, ViolationLockDelayTooShort, ViolationBehaviorMismatch,
			ViolationNodeCheckMissing, ViolationServiceCheckMissing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := conforming
			s.NodeChecks = slices.Clone(conforming.NodeChecks)
			tc.modify(&s)
			var got []string
			for _, v := range tc.profile.Resolve().Violations(s) {
				got = append(got, v.Reason)
				if !strings.Contains(v.Detail, "s1") || !strings.Contains(v.Detail, tc.profile.Name) {
					t.Errorf("detail %q does not name the session and the profile", v.Detail)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Violations() = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzValidateSessionProfile(f *testing.F) {
	f.Add("fast", int64(15*time.Second), int64(15*time.Second), "release", "serfHealth", false, "", "", int64(0))
	f.Add("x", int64(0), int64(-1), "delete", "", true, "web", "ns", int64(5*time.Second))
	f.Add("0", int64(15*time.Second), int64(15*time.Second), "", "0", false, "0", "\x87", int64(0))
	f.Add("bad name", int64(time.Hour), int64(time.Minute), "", "a b", false, "web", "", int64(-1))
	f.Fuzz(func(t *testing.T, name string, ttl, delay int64, behavior, nodeCheck string, noNodeChecks bool,
		svcID, svcNS string, renew int64) {
		p := SessionProfile{Name: name, TTL: time.Duration(ttl), LockDelay: time.Duration(delay),
			Behavior: Behavior(behavior), RenewEvery: time.Duration(renew)}
		switch {
		case noNodeChecks:
			p.NodeChecks = []string{}
		case nodeCheck != "":
			p.NodeChecks = []string{nodeCheck}
		}
		if svcID != "" || svcNS != "" {
			p.ServiceChecks = []ServiceCheck{{ID: svcID, Namespace: svcNS}}
		}
		_ = p.Warnings()
		_ = p.Resolve().Violations(ObservedSession{})
		err := p.Validate()
		if err != nil {
			if len(validation.AsFieldErrors(err)) == 0 {
				t.Fatalf("Validate() = %v, not FieldErrors", err)
			}
			return
		}
		d := p.Resolve()
		if err := d.Validate(); err != nil {
			t.Fatalf("Resolve made a valid profile invalid: %v", err)
		}
		if gap := d.WorstCaseGap(); gap < 2*d.TTL || gap > 2*d.TTL+MaxLockDelay {
			t.Fatalf("WorstCaseGap() = %s out of [2 x ttl, 2 x ttl + 60s] for %+v", gap, d)
		}
		if d.RenewEvery <= 0 || d.RenewEvery >= d.TTL/2 {
			t.Fatalf("renew_every %s not in (0, ttl/2) after defaults", d.RenewEvery)
		}
	})
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 15 * time.Second: "15s", time.Minute: "1m", 90 * time.Second: "1m30s", time.Hour: "1h",
		90 * time.Minute: "1h30m", time.Hour + 5*time.Second: "1h0m5s", 24 * time.Hour: "24h", 3333333333: "3.333333333s",
	} {
		got := ShortDuration(d)
		back, err := time.ParseDuration(got)
		if got != want || err != nil || back != d {
			t.Errorf("ShortDuration(%s) = %q (parses to %s, %v), want %q", d, got, back, err, want)
		}
	}
}
