package aclrules

import (
	"reflect"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestRenderRules_runLedgerKeysAreKeyWrite(t *testing.T) {
	in := RulesInput{
		LockKeys:            []string{"svc/nightly/.lock"},
		ReadKeys:            []string{"consul-lock/locks/nightly"},
		RunLedgerKeys:       []string{"/consul-lock/runs/nightly/"},
		SessionNodePrefixes: []string{"worker-"},
	}
	want := `key "consul-lock/runs/nightly" {
  policy = "write"
}

key "svc/nightly/.lock" {
  policy = "write"
}

key "consul-lock/locks/nightly" {
  policy = "read"
}

session_prefix "worker-" {
  policy = "write"
}
`
	if got := RenderRules(in); got != want {
		t.Fatalf("RenderRules =\n%s\nwant\n%s", got, want)
	}
	if n, err := NormalizeRules(want); err != nil || n != want {
		t.Fatal("rendered rules with a run ledger are not canonical")
	}
	// The same key as a lock key and a ledger key is one rule.
	in.LockKeys = append(in.LockKeys, "consul-lock/runs/nightly")
	if RenderRules(in) != want {
		t.Fatalf("a key listed twice rendered twice:\n%s", RenderRules(in))
	}
}

func TestRulesInput_runLedgerKeysAreValidatedAsKeys(t *testing.T) {
	err := RulesInput{RunLedgerKeys: []string{"consul-lock/runs/a b"}, SessionNodePrefixes: []string{""}}.Validate()
	fes := validation.AsFieldErrors(err)
	if len(fes) != 1 || fes[0].Field != "run_ledger_keys" || fes[0].Value != "consul-lock/runs/a b" {
		t.Fatalf("Validate = %v, want one run_ledger_keys error", err)
	}
	if err := ValidateRulesValue("run_ledger_keys", "consul-lock/runs/a"); err != nil {
		t.Fatalf("ValidateRulesValue: %v", err)
	}
}

func TestRulesInput_SplitRunLedgers(t *testing.T) {
	in := RulesInput{
		LockKeys:            []string{"svc/a/.lock", "team/reg/runs/a", "team/reg/runs/a/x", "consul-lock/runs/b", "team/reg/runs/bad.name"},
		SessionNodePrefixes: []string{""},
	}
	got := in.SplitRunLedgers("/team/reg/")
	if !reflect.DeepEqual(got.RunLedgerKeys, []string{"team/reg/runs/a"}) ||
		!reflect.DeepEqual(got.LockKeys, []string{"svc/a/.lock", "team/reg/runs/a/x", "consul-lock/runs/b", "team/reg/runs/bad.name"}) {
		t.Fatalf("SplitRunLedgers = lock keys %v, ledgers %v", got.LockKeys, got.RunLedgerKeys)
	}
	if RenderRules(got) != RenderRules(in) {
		t.Fatal("splitting changed the rules")
	}
	// Import: rendered rules read back into the same inputs.
	want := RulesInput{LockKeys: []string{"svc/a/.lock"}, RunLedgerKeys: []string{"team/reg/runs/a"}, SessionNodePrefixes: []string{"w-"}}
	back, exact, err := RulesInputFromRules(RenderRules(want))
	if err != nil || !exact {
		t.Fatalf("RulesInputFromRules: exact %v, %v", exact, err)
	}
	if back = back.SplitRunLedgers("team/reg"); !reflect.DeepEqual(back, want) {
		t.Fatalf("read back %+v, want %+v", back, want)
	}
	if !strings.Contains(RenderRules(back), `key "team/reg/runs/a"`) {
		t.Fatal("ledger key lost")
	}
}
