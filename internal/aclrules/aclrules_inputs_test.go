package aclrules

import (
	"reflect"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestRulesInputFromRules_readsBackWhatRenderRulesWrote(t *testing.T) {
	for _, in := range []RulesInput{
		{SessionNodePrefixes: []string{""}},
		{
			LockKeys:            []string{"jobs/a/.lock", "service/job/leader"},
			SemaphorePrefixes:   []string{"jobs/sem"},
			ReadKeys:            []string{"consul-lock/locks/a"},
			SessionNodePrefixes: []string{"web-", "worker-"},
			AgentRead:           true,
		},
		{LockKeys: []string{"a"}, ReadKeys: []string{"b"}, SessionNodePrefixes: []string{"n"}},
	} {
		got, exact, err := RulesInputFromRules(RenderRules(in))
		if err != nil {
			t.Fatalf("RulesInputFromRules(RenderRules(%+v)): %v", in, err)
		}
		if !exact {
			t.Errorf("RulesInputFromRules(RenderRules(%+v)): exact = false", in)
		}
		if RenderRules(got) != RenderRules(in) {
			t.Errorf("round trip of %+v gave %+v", in, got)
		}
	}
}

func TestRulesInputFromRules_readsJSONAndReformattedText(t *testing.T) {
	const text = `{"agent_prefix": {"": {"policy": "read"}},
	  "session_prefix": {"node-": {"policy": "write"}},
	  "key_prefix": {"jobs/sem/": {"policy": "write"}},
	  "key": {"jobs/a/.lock": {"policy": "write"}, "cfg": [{"policy": "read"}]}}`
	got, exact, err := RulesInputFromRules(text)
	if err != nil || !exact {
		t.Fatalf("RulesInputFromRules: exact=%v err=%v", exact, err)
	}
	want := RulesInput{
		LockKeys:            []string{"jobs/a/.lock"},
		SemaphorePrefixes:   []string{"jobs/sem"},
		ReadKeys:            []string{"cfg"},
		SessionNodePrefixes: []string{"node-"},
		AgentRead:           true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestRulesInputFromRules_notExactForRulesItDoesNotRender(t *testing.T) {
	for name, text := range map[string]string{
		"operator":          `operator = "read"` + "\n" + `session_prefix "" { policy = "write" }`,
		"key deny":          `key "a" { policy = "deny" }`,
		"key_prefix root":   `key_prefix "" { policy = "write" }`,
		"key_prefix no /":   `key_prefix "jobs" { policy = "write" }`,
		"exact session":     `session "job-lock" { policy = "write" }`,
		"agent write":       `agent_prefix "" { policy = "write" }`,
		"unsafe key":        `key "a b" { policy = "write" }`,
		"namespace (scope)": `namespace "ns" { key "a" { policy = "write" } }`,
	} {
		got, exact, err := RulesInputFromRules(text)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if exact {
			t.Errorf("%s: exact = true for %q (got %+v)", name, text, got)
		}
		if got.Validate() != nil && len(got.SessionNodePrefixes) > 0 {
			t.Errorf("%s: returned input that does not validate: %+v", name, got)
		}
		for _, k := range got.LockKeys {
			if strings.Contains(k, " ") {
				t.Errorf("%s: kept the unsafe key %q", name, k)
			}
		}
	}
}

func TestRulesInputFromRules_refusesUnparsableText(t *testing.T) {
	if _, _, err := RulesInputFromRules(`key "a" {`); err == nil {
		t.Fatal("no error for broken HCL")
	}
}

func TestValidateRulesValue(t *testing.T) {
	for _, tc := range []struct {
		field, value string
		ok           bool
	}{
		{"lock_keys", "jobs/a/.lock", true},
		{"lock_keys", "", false},
		{"lock_keys", "a\nb", false},
		{"lock_keys", `a"b`, false},
		{"semaphore_prefixes", "jobs/sem/", true},
		{"read_keys", "a b", false},
		{"session_node_prefixes", "", true},
		{"session_node_prefixes", "web-", true},
		{"session_node_prefixes", "web*", false},
	} {
		err := ValidateRulesValue(tc.field, tc.value)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateRulesValue(%q, %q) = %v, want ok=%v", tc.field, tc.value, err, tc.ok)
			continue
		}
		if fes := validation.AsFieldErrors(err); err != nil && (len(fes) != 1 || fes[0].Field != tc.field || fes[0].Value != tc.value) {
			t.Errorf("ValidateRulesValue(%q, %q) = %v, want one FieldError for that field and value", tc.field, tc.value, err)
		}
	}
	if err := ValidateRulesValue("name", "x"); err == nil {
		t.Error("ValidateRulesValue accepted an unknown field")
	}
}

func TestSessionNodePrefixWarnings(t *testing.T) {
	ws := SessionNodePrefixWarnings([]string{"nightly-report", "web-", "", "nightly-report"}, []string{"nightly-report", "other"})
	if len(ws) != 1 {
		t.Fatalf("got %d warnings, want 1: %+v", len(ws), ws)
	}
	w := ws[0]
	if w.Field != "session_node_prefixes" || !strings.Contains(w.Detail, `"nightly-report"`) || !strings.Contains(w.Detail, "NODE") {
		t.Errorf("unexpected warning %+v", w)
	}
	if ws := SessionNodePrefixWarnings([]string{"web-"}, nil); ws != nil {
		t.Errorf("warnings without declared names: %+v", ws)
	}
}
