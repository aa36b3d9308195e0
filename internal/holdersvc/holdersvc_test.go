package holdersvc

import (
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestHolderService_validate(t *testing.T) {
	long := strings.Repeat("a", 64)
	tooMany := map[string]string{}
	for i := range MaxMetaPairs - len(MetaKeys) + 1 {
		tooMany["k"+strings.Repeat("x", i)] = "v"
	}
	cases := []struct {
		name      string
		s         Service
		wantField string // "" for valid
		wantText  string
	}{
		{"minimal", Service{Name: "leader-web"}, "", ""},
		{"full", Service{Name: "db", Tags: []string{"primary", "v2"}, Port: 5432, Meta: map[string]string{"team": "data", "tier_1": "x"}}, "", ""},
		{"upper case name", Service{Name: "Leader"}, FieldName, "DNS label"},
		{"dot in name", Service{Name: "a.b"}, FieldName, "<name>.service.consul"},
		{"leading hyphen", Service{Name: "-a"}, FieldName, "starting and ending"},
		{"name of 64", Service{Name: long}, FieldName, "1 to 63"},
		{"empty name", Service{}, FieldName, "DNS label"},
		{"bad tag", Service{Name: "a", Tags: []string{"v1.2"}}, FieldTags, "<tag>.<name>.service.consul"},
		{"duplicate tag", Service{Name: "a", Tags: []string{"x", "x"}}, FieldTags, "at most once"},
		{"port 0 is none", Service{Name: "a", Port: 0}, "", ""},
		{"port 65536", Service{Name: "a", Port: 65536}, FieldPort, "1 to 65535"},
		{"port -1", Service{Name: "a", Port: -1}, FieldPort, "1 to 65535"},
		{"meta key with dot", Service{Name: "a", Meta: map[string]string{"a.b": "v"}}, FieldMeta, "letters, digits"},
		{"meta key reserved by Consul", Service{Name: "a", Meta: map[string]string{"consul-x": "v"}}, FieldMeta, `"consul-"`},
		{"meta key the runner writes", Service{Name: "a", Meta: map[string]string{MetaFencingToken: "1"}}, FieldMeta, "the runner writes"},
		{"meta session", Service{Name: "a", Meta: map[string]string{MetaSession: "1"}}, FieldMeta, "the runner writes"},
		{"meta value too long", Service{Name: "a", Meta: map[string]string{"k": strings.Repeat("v", 513)}}, FieldMeta, "512 bytes"},
		{"too many meta pairs", Service{Name: "a", Meta: tooMany}, FieldMeta, "at most 60 pairs"},
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

func TestHolderService_instance(t *testing.T) {
	s := Service{Name: "web", Tags: []string{"leader"}, Port: 8080, Meta: map[string]string{"team": "a"}}
	check := NewCheck(Timing{Bound: 15 * time.Second, RenewEvery: 5 * time.Second, RenewTimeout: 2 * time.Second, MaxRenewTimeout: 2 * time.Second, MaxLockDelay: time.Minute})
	h := Identity{Lock: "web-leader", Session: "0b5c2a1e-0000-4000-8000-000000000001", FencingToken: 4242, Node: "n1", PID: 77}
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
	other := s.Instance(Identity{Session: "other"}, check, "", 0)
	if other.ID == in.ID {
		t.Errorf("two holders share the instance ID %s", in.ID)
	}
	s.Meta["team"] = "b"
	if in.Meta["team"] != "a" {
		t.Errorf("the instance shares its meta map with the declaration")
	}
}

// TestHolderVia: the agent endpoint without -node, the catalog with it,
// an explicit choice kept, catalog without a node and unknown values
// refused naming the flag, the value and what is allowed.
func TestHolderVia(t *testing.T) {
	for _, c := range []struct {
		value, node, want, err string
	}{
		{"auto", "", ViaAgent, ""},
		{"", "", ViaAgent, ""},
		{"auto", "consul-lock-runners", ViaCatalog, ""},
		{"agent", "consul-lock-runners", ViaAgent, ""},
		{"catalog", "consul-lock-runners", ViaCatalog, ""},
		{"catalog", "", "", `-service-registration: "catalog" is not allowed; catalog only with -node NAME`},
		{"dns", "", "", `-service-registration: "dns" is not allowed; auto, agent or catalog`},
	} {
		via, reason, err := Via(c.value, c.node)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Via(%q, %q) error %v, want %q", c.value, c.node, err, c.err)
			}
			continue
		}
		if err != nil || via != c.want || reason == "" {
			t.Errorf("Via(%q, %q) = %q, %q, %v; want %q with a reason", c.value, c.node, via, reason, err, c.want)
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
		if got := InstanceStale(c.limit, c.mine, c.other, c.otherAlive); got != c.want {
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
		err := ValidateNode("-node", node)
		if (err == nil) != ok {
			t.Errorf("ValidateNode(%q) = %v, want ok %v", node, err, ok)
			continue
		}
		if fes := validation.AsFieldErrors(err); !ok && (len(fes) != 1 || fes[0].Field != "-node" || !strings.Contains(fes[0].Allowed, "1 to 63 letters")) {
			t.Errorf("ValidateNode(%q) = %v, want a -node FieldError with the allowed form", node, err)
		}
	}
}
