package lockmodel

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestProtocolConstants(t *testing.T) {
	// The flags travel as hex strings; these are the exact texts of Consul's
	// api.LockFlagValue and api.SemaphoreFlagValue.
	for _, tc := range []struct {
		flags uint64
		want  string
	}{
		{LockFlagValue, "0x2ddccbc058a50c18"},
		{SemaphoreFlagValue, "0xe0f69a2baa414de0"},
		{0, "0x0000000000000000"},
	} {
		if got := FormatFlags(tc.flags); got != tc.want {
			t.Errorf("FormatFlags(%d) = %q, want %q", tc.flags, got, tc.want)
		}
	}
	if got := Behaviors(); !reflect.DeepEqual(got, []string{"release", "delete"}) {
		t.Errorf("Behaviors() = %v", got)
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0x2ddccbc058a50c18", LockFlagValue, true},
		{"0xE0F69A2BAA414DE0", SemaphoreFlagValue, true},
		{"0x0", 0, true},
		{"", 0, false},
		{"0x", 0, false},
		{"2ddccbc058a50c18", 0, false},
		{"3300000000000000000", 0, false},
		{"0x2ddc_cbc058a50c18", 0, false},
		{"0x12345678901234567", 0, false},
		{"0xzz", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseFlags(tc.in)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), strconv.Quote(tc.in)) {
					t.Fatalf("ParseFlags(%q) = %#x, %v; want an error naming the input", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseFlags(%q) = %#x, %v; want %#x", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestLock_Normalize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Lock
		want Lock
	}{
		{"key computed from prefix", Lock{Prefix: "service/job"},
			Lock{Prefix: "service/job", Key: "service/job/.lock", Limit: 1}},
		{"slashes trimmed", Lock{Prefix: "/service/job/", Key: "/service/job/leader/", Limit: 1},
			Lock{Prefix: "service/job", Key: "service/job/leader", Limit: 1}},
		{"semaphore limit kept", Lock{Prefix: "p", Limit: 3},
			Lock{Prefix: "p", Key: "p/.lock", Limit: 3}},
		{"other fields untouched", Lock{Name: "n", Prefix: "p", SessionDefaults: "s", MaxHold: time.Hour, Description: "d"},
			Lock{Name: "n", Prefix: "p", Key: "p/.lock", Limit: 1, SessionDefaults: "s", MaxHold: time.Hour, Description: "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Normalize()
			if err != nil || got != tc.want {
				t.Fatalf("Normalize() = %+v, %v; want %+v", got, err, tc.want)
			}
			again, err := got.Normalize()
			if err != nil || again != got {
				t.Fatalf("Normalize is not idempotent: %+v -> %+v, %v", got, again, err)
			}
		})
	}
}

func TestLock_NormalizeReportsBothPaths(t *testing.T) {
	in := Lock{Prefix: "a b", Key: "c//d"}
	got, err := in.Normalize()
	errs := validation.AsFieldErrors(err)
	if len(errs) != 2 {
		t.Fatalf("Normalize() error = %v, want errors for prefix and key", err)
	}
	assertFieldError(t, errs[0], "prefix", "a b", "a space")
	assertFieldError(t, errs[1], "key", "c//d", "empty segment")
	if got != in {
		t.Fatalf("Normalize() returned %+v on error, want the input back", got)
	}
}

func validLock() Lock {
	return Lock{Name: "nightly-report", Prefix: "service/nightly-report", Limit: 1,
		SessionDefaults: "fast", MaxHold: 2 * time.Hour, Description: "Nightly billing report"}
}

func TestLock_ValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Lock)
	}{
		{"declared lock", func(l *Lock) {}},
		{"limit unset means mutex", func(l *Lock) { l.Limit = 0 }},
		{"raw leader key under prefix", func(l *Lock) { l.Prefix = "service/job"; l.Key = "service/job/leader" }},
		{"key equal to prefix", func(l *Lock) { l.Key = l.Prefix }},
		{"default key spelled out", func(l *Lock) { l.Key = "/service/nightly-report/.lock" }},
		{"semaphore on default key", func(l *Lock) { l.Limit = 3 }},
		{"largest semaphore", func(l *Lock) { l.Limit = MaxSemaphoreLimit; l.Key = "service/nightly-report/.lock" }},
		{"no session defaults", func(l *Lock) { l.SessionDefaults = "" }},
		{"no max hold", func(l *Lock) { l.MaxHold = 0 }},
		{"shortest max hold", func(l *Lock) { l.MaxHold = time.Second }},
		{"longest description", func(l *Lock) { l.Description = strings.Repeat("é", MaxDescriptionLength) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := validLock()
			tc.modify(&l)
			if err := l.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestLock_ValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name      string
		modify    func(*Lock)
		field     string
		value     string
		fragments []string
	}{
		{"bad name", func(l *Lock) { l.Name = "nightly report" }, "name", "nightly report", []string{"1 to 128"}},
		{"missing prefix", func(l *Lock) { l.Prefix = "" }, "prefix", "", []string{"it is empty"}},
		{"prefix with glob", func(l *Lock) { l.Prefix = "service/*" }, "prefix", "service/*", []string{"'*'"}},
		{"key with quote", func(l *Lock) { l.Key = `service/"x` }, "key", `service/"x`, []string{`'"'`}},
		{"key outside prefix", func(l *Lock) { l.Key = "other/job/.lock" }, "key", "other/job/.lock",
			[]string{`equal to the prefix "service/nightly-report" or under it ("service/nightly-report/")`}},
		{"key sharing a name start with the prefix", func(l *Lock) { l.Key = "service/nightly-report2/.lock" },
			"key", "service/nightly-report2/.lock", []string{"under it"}},
		{"semaphore on a raw key", func(l *Lock) { l.Limit = 2; l.Key = "service/nightly-report/leader" },
			"key", "service/nightly-report/leader", []string{`must be "service/nightly-report/.lock"`, "api.Semaphore"}},
		{"semaphore on the prefix itself", func(l *Lock) { l.Limit = 2; l.Key = "service/nightly-report" },
			"key", "service/nightly-report", []string{"for a semaphore (limit > 1)"}},
		{"negative limit", func(l *Lock) { l.Limit = -1 }, "limit", "-1", []string{"from 1 to 1024"}},
		{"limit too large", func(l *Lock) { l.Limit = MaxSemaphoreLimit + 1 }, "limit", "1025", []string{"from 1 to 1024"}},
		{"bad session defaults", func(l *Lock) { l.SessionDefaults = "fast/slow" }, "session_defaults", "fast/slow", []string{"1 to 128"}},
		{"negative max hold", func(l *Lock) { l.MaxHold = -time.Minute }, "max_hold", "-1m0s", []string{"at least 1s"}},
		{"sub-second max hold", func(l *Lock) { l.MaxHold = 500 * time.Millisecond }, "max_hold", "500ms", []string{"0s (no limit)"}},
		{"long description", func(l *Lock) { l.Description = strings.Repeat("d", MaxDescriptionLength+1) },
			"description", strings.Repeat("d", 40) + "...", []string{"at most 1024 characters (got 1025)"}},
		{"invalid UTF-8 description", func(l *Lock) { l.Description = "bad\xff" }, "description", "bad\xff", []string{"valid UTF-8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := validLock()
			tc.modify(&l)
			errs := validation.AsFieldErrors(l.Validate())
			if len(errs) != 1 {
				t.Fatalf("Validate() = %v, want exactly one error for %s", errs, tc.field)
			}
			assertFieldError(t, errs[0], tc.field, tc.value, tc.fragments...)
		})
	}
}

func TestLock_ValidateReportsEveryField(t *testing.T) {
	l := Lock{Name: "", Prefix: "", Limit: -2, SessionDefaults: "a b", MaxHold: -1,
		Description: strings.Repeat("x", 2000)}
	var got []string
	for _, e := range validation.AsFieldErrors(l.Validate()) {
		got = append(got, e.Field)
	}
	want := []string{"name", "prefix", "limit", "session_defaults", "max_hold", "description"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Validate() reported fields %v, want %v", got, want)
	}
}

func TestLock_FlagsAndKind(t *testing.T) {
	for _, tc := range []struct {
		limit     int
		semaphore bool
		flags     uint64
	}{
		{0, false, LockFlagValue},
		{1, false, LockFlagValue},
		{2, true, SemaphoreFlagValue},
		{1024, true, SemaphoreFlagValue},
	} {
		t.Run(strconv.Itoa(tc.limit), func(t *testing.T) {
			l := Lock{Limit: tc.limit}
			if l.IsSemaphore() != tc.semaphore || l.Flags() != tc.flags {
				t.Fatalf("limit %d: IsSemaphore %v, Flags %#x; want %v, %#x",
					tc.limit, l.IsSemaphore(), l.Flags(), tc.semaphore, tc.flags)
			}
		})
	}
	if got := DefaultLockKey("service/job"); got != "service/job/.lock" {
		t.Fatalf("DefaultLockKey = %q", got)
	}
}

func TestSemaphoreState(t *testing.T) {
	if got, want := string(NewSemaphoreValue(3)), `{"Limit":3,"Holders":{}}`; got != want {
		t.Fatalf("NewSemaphoreValue(3) = %s, want %s", got, want)
	}
	b, err := EncodeSemaphoreState(SemaphoreState{Limit: 2, Holders: map[string]bool{"b": true, "a": true}})
	if err != nil || string(b) != `{"Limit":2,"Holders":{"a":true,"b":true}}` {
		t.Fatalf("EncodeSemaphoreState = %s, %v", b, err)
	}
	for _, tc := range []struct {
		name    string
		in      string
		want    SemaphoreState
		wantErr string
	}{
		{"fresh", ``, SemaphoreState{Holders: map[string]bool{}}, ""},
		{"api.Semaphore value", `{"Limit":2,"Holders":{"5f2c":true}}`, SemaphoreState{Limit: 2, Holders: map[string]bool{"5f2c": true}}, ""},
		{"null holders", `{"Limit":2,"Holders":null}`, SemaphoreState{Limit: 2, Holders: map[string]bool{}}, ""},
		{"not JSON", `job is running`, SemaphoreState{}, "not api.Semaphore's"},
		{"zero limit", `{"Limit":0,"Holders":{}}`, SemaphoreState{}, "Limit 0"},
		{"no limit", `{}`, SemaphoreState{}, "Limit 0"},
		{"holders not a map", `{"Limit":2,"Holders":["a"]}`, SemaphoreState{}, "not api.Semaphore's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeSemaphoreState([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DecodeSemaphoreState(%s) = %+v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("DecodeSemaphoreState(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestCheckCompatible(t *testing.T) {
	mutex := Lock{Name: "m", Prefix: "svc/job", Key: "svc/job/.lock", Limit: 1}
	sem := Lock{Name: "s", Prefix: "svc/pool", Key: "svc/pool/.lock", Limit: 3}
	for _, tc := range []struct {
		name      string
		lock      Lock
		flags     uint64
		value     string
		fragments []string // nil: compatible
	}{
		{"mutex key made by api.Lock", mutex, LockFlagValue, "holder data", nil},
		{"mutex key with empty value", mutex, LockFlagValue, "", nil},
		{"plain key for a mutex", mutex, 0, "", []string{`"svc/job/.lock"`, "flags 0x0000000000000000 (a plain KV key)",
			"a mutex (limit 1), which needs flags 0x2ddccbc058a50c18"}},
		{"semaphore key for a mutex", mutex, SemaphoreFlagValue, `{"Limit":3,"Holders":{}}`,
			[]string{"0xe0f69a2baa414de0 (an api.Semaphore semaphore)", "declared as a mutex"}},
		{"semaphore key made by api.Semaphore", sem, SemaphoreFlagValue, `{"Limit":3,"Holders":{"x":true}}`, nil},
		{"fresh semaphore key", sem, SemaphoreFlagValue, "", nil},
		{"mutex key for a semaphore", sem, LockFlagValue, "", []string{"(an api.Lock mutex)", "a semaphore (limit 3)",
			"needs flags 0xe0f69a2baa414de0"}},
		{"semaphore with another limit", sem, SemaphoreFlagValue, `{"Limit":2,"Holders":{}}`,
			[]string{"limit 2 but the lock declares limit 3"}},
		{"semaphore with garbage value", sem, SemaphoreFlagValue, "garbage", []string{"value cannot be used"}},
		{"default key named when key unset", Lock{Prefix: "/a/"}, 7, "", []string{`"a/.lock"`, "0x0000000000000007"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCompatible(tc.lock, tc.flags, []byte(tc.value))
			if tc.fragments == nil {
				if err != nil {
					t.Fatalf("CheckCompatible() = %v, want compatible", err)
				}
				return
			}
			if !errors.Is(err, ErrIncompatibleKey) {
				t.Fatalf("CheckCompatible() = %v, want ErrIncompatibleKey", err)
			}
			for _, f := range tc.fragments {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not contain %q", err, f)
				}
			}
		})
	}
}

func TestLock_ProfileWarnings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		limit    int
		behavior Behavior
		warn     bool
	}{
		{"mutex with release", 1, BehaviorRelease, false},
		{"mutex with delete", 1, BehaviorDelete, false},
		{"semaphore with delete", 3, BehaviorDelete, false},
		{"semaphore with release", 3, BehaviorRelease, true},
		{"semaphore with default behavior", 3, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := Lock{Limit: tc.limit}.ProfileWarnings(SessionProfile{Behavior: tc.behavior}.Resolve())
			if got := len(ws) == 1 && ws[0].Field == "session_defaults" && strings.Contains(ws[0].Detail, `"release"`); got != tc.warn {
				t.Fatalf("ProfileWarnings() = %+v, want a session_defaults warning: %v", ws, tc.warn)
			}
		})
	}
}

func TestHolderValueJSON(t *testing.T) {
	v := HolderValue{Node: "node-1", PID: 42, Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"node":"node-1","pid":42,"started":"2025-01-02T03:04:05Z"}`; string(b) != want {
		t.Fatalf("holder value = %s, want %s", b, want)
	}
	v.Lock = "nightly-report"
	b, _ = json.Marshal(v)
	if !strings.Contains(string(b), `"lock":"nightly-report"`) {
		t.Fatalf("holder value %s lacks the lock name", b)
	}
}

func FuzzValidateLock(f *testing.F) {
	f.Add("nightly-report", "service/job", "", 1, "fast", int64(time.Hour), "desc")
	f.Add("pool", "/svc/pool/", "svc/pool/.lock", 3, "", int64(0), "")
	f.Add("x", "a//b", "../x", -1, "a b", int64(-1), "\xff")
	f.Fuzz(func(t *testing.T, name, prefix, key string, limit int, sessionDefaults string, maxHold int64, description string) {
		l := Lock{Name: name, Prefix: prefix, Key: key, Limit: limit, SessionDefaults: sessionDefaults,
			MaxHold: time.Duration(maxHold), Description: description}
		_ = l.Flags()
		_ = CheckCompatible(l, uint64(maxHold), []byte(description))
		err := l.Validate()
		if err != nil {
			for _, fe := range validation.AsFieldErrors(err) {
				if !strings.Contains(fe.Error(), fe.Field+":") {
					t.Fatalf("error %q does not name its field", fe)
				}
			}
			if len(validation.AsFieldErrors(err)) == 0 {
				t.Fatalf("Validate() = %v, not FieldErrors", err)
			}
			return
		}
		n, err := l.Normalize()
		if err != nil {
			t.Fatalf("Validate accepted a lock Normalize refuses: %v", err)
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("normalised lock %+v is invalid: %v", n, err)
		}
		if n.Limit < 1 || n.Key != n.Prefix && !strings.HasPrefix(n.Key, n.Prefix+"/") {
			t.Fatalf("normalised lock %+v breaks the key/limit rules", n)
		}
		if n.IsSemaphore() && n.Key != DefaultLockKey(n.Prefix) {
			t.Fatalf("semaphore %+v not on %s", n, DefaultLockKey(n.Prefix))
		}
		if err := CheckCompatible(n, n.Flags(), NewSemaphoreValue(n.Limit)); err != nil {
			t.Fatalf("a key created for %+v is not compatible with it: %v", n, err)
		}
	})
}
