package lockmodel

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// assertFieldError checks that err is exactly one *FieldError for field and
// value whose message names both and contains every fragment.
func assertFieldError(t *testing.T, err error, field, value string, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error for %s = %q, got nil", field, value)
	}
	var fe *validation.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("want a *FieldError, got %T: %v", err, err)
	}
	if fe.Field != field || fe.Value != value {
		t.Errorf("error is for %s = %q, want %s = %q", fe.Field, fe.Value, field, value)
	}
	msg := err.Error()
	for _, f := range append([]string{field + ":", fmt.Sprintf("%q", value)}, fragments...) {
		if !strings.Contains(msg, f) {
			t.Errorf("error %q does not contain %q", msg, f)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"nightly-report", true},
		{"a", true},
		{"Job_1-A", true},
		{strings.Repeat("x", 128), true},
		{"", false},
		{strings.Repeat("x", 129), false},
		{"has space", false},
		{"dotted.name", false},
		{"slash/name", false},
		{"ünïcode", false},
		{"new\nline", false},
		{"name\n", false}, // $ in a Go regexp does not match before a final newline
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName("session_defaults", tc.name)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", tc.name, err)
				}
				return
			}
			assertFieldError(t, err, "session_defaults", tc.name, "use 1 to 128 letters, digits, '-' or '_'")
		})
	}
}

func TestNormalizeKeyPath_accepts(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"service/job", "service/job"},
		{"/service/job/", "service/job"},
		{"///service/job///", "service/job"},
		{"service/job/.lock", "service/job/.lock"},
		{"service/job/leader", "service/job/leader"},
		{"a", "a"},
		{"x..y/..z/.hidden", "x..y/..z/.hidden"},
		{"user@host:8500/a+b/A_b-C", "user@host:8500/a+b/A_b-C"},
		{strings.Repeat("k", 512), strings.Repeat("k", 512)},
		{"/" + strings.Repeat("k", 512) + "/", strings.Repeat("k", 512)},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := NormalizeKeyPath("prefix", tc.in)
			if err != nil {
				t.Fatalf("NormalizeKeyPath(%q) error: %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("NormalizeKeyPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestNormalizeKeyPath_rejects(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "it is empty"},
		{"/", "it is empty"},
		{"///", "it is empty"},
		{"a//b", "empty segment"},
		{".", `"." segment`},
		{"..", `".." segment`},
		{"a/./b", `"." segment`},
		{"a/../b", `".." segment`},
		{"a/..", `".." segment`},
		{strings.Repeat("k", 513), "513 bytes"},
		{"a b", "a space"},
		{" a", "a space"},
		{"a\tb", "a tab"},
		{"a\nb", "a line break"},
		{"a\rb", "a line break"},
		{"a\x00b", "control character 0x00"},
		{"a\x7fb", "control character 0x7f"},
		{`a"b`, `'"'`},
		{"a'b", `'\''`},
		{"a`b", "'`'"},
		{`a\b`, `'\\'`},
		{"a{b", "'{'"},
		{"a}b", "'}'"},
		{"a${b}", "'$'"},
		{"a%{b}", "'%'"},
		{"a*", "'*'"},
		{"a#b", "'#'"},
		{"a?b", "'?'"},
		{"a%20b", "'%'"},
		{"a=b", "'='"},
		{"a,b", "','"},
		{"a;b", "';'"},
		{"a<b", "'<'"},
		{"a|b", "'|'"},
		{"a~b", "'~'"},
		{"jöb", "non-ASCII character 'ö'"},
		{"a\u00a0b", "non-ASCII"},
		{"a\xffb", "not valid UTF-8"},
	} {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			got, err := NormalizeKeyPath("key", tc.in)
			if err == nil {
				t.Fatalf("NormalizeKeyPath(%q) = %q, want an error", tc.in, got)
			}
			assertFieldError(t, err, "key", tc.in, tc.why, KeyPathAllowed)
		})
	}
}

func FuzzNormalizeKeyPath(f *testing.F) {
	for _, s := range []string{"service/job", "/a/b/", "a//b", "a/../b", ".lock", "a b", "ö", "a\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		n, err := NormalizeKeyPath("prefix", p)
		if err != nil {
			if fe := validation.AsFieldErrors(err); len(fe) != 1 || fe[0].Field != "prefix" || fe[0].Value != p {
				t.Fatalf("error %v is not one FieldError for prefix = %q", err, p)
			}
			return
		}
		if n == "" || len(n) > MaxKeyPathLength || strings.HasPrefix(n, "/") || strings.HasSuffix(n, "/") {
			t.Fatalf("NormalizeKeyPath(%q) = %q: empty, too long or slash at an end", p, n)
		}
		for i := 0; i < len(n); i++ {
			if !keyPathByte(n[i]) {
				t.Fatalf("NormalizeKeyPath(%q) = %q keeps byte %q", p, n, n[i])
			}
		}
		for _, seg := range strings.Split(n, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("NormalizeKeyPath(%q) = %q keeps segment %q", p, n, seg)
			}
		}
		again, err := NormalizeKeyPath("prefix", n)
		if err != nil || again != n {
			t.Fatalf("NormalizeKeyPath is not idempotent: %q -> %q -> %q, %v", p, n, again, err)
		}
	})
}

func TestRegistryKey(t *testing.T) {
	for _, tc := range []struct {
		prefix, kind, name, want string
	}{
		{DefaultRegistryPrefix, KindSessionDefaults, "fast", "consul-lock/session-defaults/fast"},
		{DefaultRegistryPrefix, KindLock, "nightly-report", "consul-lock/locks/nightly-report"},
		{DefaultRegistryPrefix, KindACLPolicy, "report-holder", "consul-lock/acl-policies/report-holder"},
		{"/team/a/registry/", KindLock, "x", "team/a/registry/locks/x"},
		{"", KindLock, "x", "locks/x"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := RegistryKey(tc.prefix, tc.kind, tc.name); got != tc.want {
				t.Fatalf("RegistryKey(%q, %q, %q) = %q, want %q", tc.prefix, tc.kind, tc.name, got, tc.want)
			}
			if got, want := RegistryFolder(tc.prefix, tc.kind), strings.TrimSuffix(tc.want, tc.name); got != want {
				t.Fatalf("RegistryFolder(%q, %q) = %q, want %q", tc.prefix, tc.kind, got, want)
			}
		})
	}
}

func TestValidateRegistryPrefix(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"consul-lock", "consul-lock", true},
		{"/ops/consul-lock/", "ops/consul-lock", true},
		{"", "", false},
		{"ops//lock", "", false},
		{"ops lock", "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ValidateRegistryPrefix(tc.in)
			if !tc.ok {
				assertFieldError(t, err, "registry_prefix", tc.in)
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ValidateRegistryPrefix(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}
