package aclrules

import (
	"strings"
	"testing"
)

func TestNormalizeRules_sameGrantsAreEquivalent(t *testing.T) {
	tests := []struct {
		name, other string
	}{
		{"identical", baseRules},
		{"JSON object form", `{"key":{"a/.lock":{"policy":"write"}},"session_prefix":{"worker-":{"policy":"write"}}}`},
		{"JSON list form", `{"key":[{"a/.lock":[{"policy":"write"}]}],"session_prefix":[{"worker-":[{"policy":"write"}]}]}`},
		{"one line", `key "a/.lock" { policy = "write" } session_prefix "worker-" { policy = "write" }`},
		{"reordered with comments", `
# holders need a session on their node
session_prefix "worker-" {
	policy = "write" // the node-name prefix
}
/* the mutex */
key "a/.lock" {

	policy    =    "write"
}`},
		{"upper-case keyword and disposition", `KEY "a/.lock" { POLICY = "WRITE" }
session_prefix "worker-" { Policy = "Write" }`},
		{"HCL object assignment", `key = { "a/.lock" = { policy = "write" } }
session_prefix "worker-" { policy = "write" }`},
		{"duplicate rule merged like Consul: write over read", `key "a/.lock" { policy = "read" }
key "a/.lock" { policy = "write" }
session_prefix "worker-" { policy = "write" }
session_prefix "worker-" { policy = "write" }`},
		{"empty namespace block grants nothing", baseRules + `namespace "team" {}`},
	}
	want, err := NormalizeRules(baseRules)
	if err != nil {
		t.Fatalf("NormalizeRules(base) error: %v", err)
	}
	if want != baseRules {
		t.Fatalf("base rules are not canonical:\n%s", want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeRules(tt.other)
			if err != nil {
				t.Fatalf("NormalizeRules() error: %v", err)
			}
			if got != want {
				t.Errorf("NormalizeRules() =\n%s\nwant\n%s", got, want)
			}
			eq, err := RulesEquivalent(baseRules, tt.other)
			if err != nil || !eq {
				t.Errorf("RulesEquivalent() = %v, %v; want true, nil", eq, err)
			}
		})
	}
}

func TestNormalizeRules_changedGrantsAreDrift(t *testing.T) {
	tests := []struct {
		name, other string
	}{
		{"read widened to write", strings.Replace(baseRules, `session_prefix "worker-" {
  policy = "write"`, `session_prefix "worker-" {
  policy = "read"`, 1)},
		{"key widened to key_prefix", strings.Replace(baseRules, `key "a/.lock"`, `key_prefix "a/.lock"`, 1)},
		{"session_prefix narrowed to session", strings.Replace(baseRules, `session_prefix`, `session`, 1)},
		{"other key", strings.Replace(baseRules, `a/.lock`, `a/.lock2`, 1)},
		{"node prefix widened", strings.Replace(baseRules, `"worker-"`, `""`, 1)},
		{"extra block", baseRules + `key_prefix "" { policy = "read" }`},
		{"extra unlabelled rule", baseRules + `operator = "read"`},
		{"extra deny", baseRules + `key "b" { policy = "deny" }`},
		{"removed block", `key "a/.lock" { policy = "write" }`},
		{"duplicate deny wins", baseRules + `key "a/.lock" { policy = "deny" }`},
		{"extra namespace grant", baseRules + `namespace "team" { key_prefix "" { policy = "write" } }`},
		{"empty policy", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eq, err := RulesEquivalent(baseRules, tt.other)
			if err != nil {
				t.Fatalf("RulesEquivalent() error: %v", err)
			}
			if eq {
				n, _ := NormalizeRules(tt.other)
				t.Errorf("RulesEquivalent() = true for\n%s\nnormalised\n%s", tt.other, n)
			}
		})
	}
}

func TestNormalizeRules_preservesRulesConsullockDoesNotRender(t *testing.T) {
	in := `
operator = "READ"
node_prefix "" { policy = "read" }
service "web" {
  policy = "read"
  intentions = "write"
}
service "web" { policy = "write" }
query_prefix "" { policy = "read" }
event "deploy" { policy = "write" }
key_prefix "logs/" { policy = "list" }
acl = "read"
namespace_prefix "" {
  service_prefix "" { policy = "read" }
}
partition "p1" {
  mesh = "write"
  namespace "ns" {
    policy = "read"
    key "x" { policy = "write" }
  }
}
session "job-lock" { policy = "write" }
`
	want := `key_prefix "logs/" {
  policy = "list"
}

session "job-lock" {
  policy = "write"
}

node_prefix "" {
  policy = "read"
}

service "web" {
  policy = "write"
  intentions = "write"
}

query_prefix "" {
  policy = "read"
}

event "deploy" {
  policy = "write"
}

acl = "read"

operator = "read"

namespace_prefix "" {
  service_prefix "" {
    policy = "read"
  }
}

partition "p1" {
  mesh = "write"

  namespace "ns" {
    policy = "read"

    key "x" {
      policy = "write"
    }
  }
}
`
	got, err := NormalizeRules(in)
	if err != nil {
		t.Fatalf("NormalizeRules() error: %v", err)
	}
	if got != want {
		t.Errorf("NormalizeRules() =\n%s\nwant\n%s", got, want)
	}
	again, err := NormalizeRules(got)
	if err != nil || again != got {
		t.Errorf("NormalizeRules() is not idempotent: %v\n%s", err, again)
	}
}

func TestNormalizeRules_mirrorsConsulCaseSensitiveMerge(t *testing.T) {
	// acl.takesPrecedenceOver compares the strings as written, so a
	// duplicate "Write" loses to "read" (and is lower-cased afterwards).
	got, err := NormalizeRules(`key "a" { policy = "Write" }
key "a" { policy = "read" }`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "key \"a\" {\n  policy = \"read\"\n}\n"; got != want {
		t.Errorf("NormalizeRules() =\n%s\nwant\n%s", got, want)
	}
}

func TestNormalizeRules_rejects(t *testing.T) {
	tests := []struct {
		name, text, wantErr string
	}{
		{"syntax error", `key "a" { policy = "write"`, "failed to parse"},
		{"unknown disposition", `key "a" { policy = "admin" }`, `key "a": policy "admin"`},
		{"missing disposition", `key "a" {}`, `key "a": policy ""`},
		{"list outside key", `session_prefix "" { policy = "list" }`, `session_prefix ""`},
		{"bad unlabelled disposition", `operator = "all"`, `operator "all"`},
		{"bad intentions", `service "a" { policy = "read" intentions = "list" }`, `intentions "list"`},
		{"unknown resource", `kye "a" { policy = "write" }`, `"kye"`},
		{"unknown attribute", `key "a" { policy = "write" sentinel { code = "x" } }`, `key[a].sentinel`},
		{"two labels", `key "a" "b" { policy = "write" }`, `key[a].b`},
		{"unknown JSON resource", `{"keys":{"a":{"policy":"write"}}}`, `"keys"`},
		{"nested namespace in namespace", `namespace "a" { namespace "b" { acl = "read" } }`, `namespace[a].namespace`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeRules(tt.text)
			if err == nil {
				t.Fatalf("NormalizeRules() = %q, want an error", got)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if _, err := RulesEquivalent(tt.text, tt.text); err == nil {
				t.Errorf("RulesEquivalent() gave no error")
			}
		})
	}
}

func TestQuoteHCL_roundTrips(t *testing.T) {
	names := []string{"", "a", `"`, `\`, "${x}", "$", "{}", "%{x}", "a\nb\tc\r", "\x00\x01\x7f", "\xff\xfe", "é€😀", "\u2028\ufeff", "\\\"${\"}\""}
	for _, n := range names {
		p, err := ParseRules("key " + quoteHCL(n) + " { policy = \"read\" }")
		if err != nil {
			t.Errorf("name %q: %v", n, err)
			continue
		}
		if len(p.Rules) != 1 || p.Rules[0].Name != n {
			t.Errorf("name %q came back as %+v", n, p.Rules)
		}
	}
}

func TestParsedRules_grants(t *testing.T) {
	p, err := ParseRules(`{"key_prefix": {"jobs/": {"policy": "write"}}, "key": {"a": {"policy": "read"}}, "operator": "read"}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ resource, name, want string }{
		{"key_prefix", "jobs/", "write"},
		{"key", "a", "read"},
		{"operator", "", "read"},
		{"key", "jobs/", ""},
		{"session_prefix", "", ""},
	}
	for _, tt := range tests {
		if got := p.Grants(tt.resource, tt.name); got != tt.want {
			t.Errorf("Grants(%q, %q) = %q, want %q", tt.resource, tt.name, got, tt.want)
		}
	}
}
