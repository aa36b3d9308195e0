package aclrules

import (
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// TestRenderRules_holderServicesGrantServiceWriteOnEachName: a holder
// service earns exactly service "<name>" write, canonical, read back on
// import, and a name that is not a DNS label is refused naming
// holder_services.
func TestRenderRules_holderServicesGrantServiceWriteOnEachName(t *testing.T) {
	in := RulesInput{LockKeys: []string{"service/web/.lock"}, SessionNodePrefixes: []string{"worker-"}, HolderServices: []string{"web-leader", "db"}}
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	got := RenderRules(in)
	for _, want := range []string{"service \"db\" {\n  policy = \"write\"\n}", "service \"web-leader\" {\n  policy = \"write\"\n}"} {
		if !strings.Contains(got, want) {
			t.Errorf("rules lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "service_prefix") || strings.Count(got, "service \"") != 2 {
		t.Errorf("rules grant more services than named:\n%s", got)
	}
	if n, err := NormalizeRules(got); err != nil || n != got {
		t.Errorf("RenderRules output is not canonical: %v\n%s\nvs\n%s", err, got, n)
	}
	back, exact, err := RulesInputFromRules(got)
	if err != nil || !exact || strings.Join(back.HolderServices, ",") != "db,web-leader" {
		t.Errorf("RulesInputFromRules = %+v, exact %v, %v", back, exact, err)
	}
	bad := RulesInput{SessionNodePrefixes: []string{"w"}, HolderServices: []string{"Web_Leader"}}
	fes := validation.AsFieldErrors(bad.Validate())
	if len(fes) != 1 || fes[0].Field != "holder_services" || fes[0].Value != "Web_Leader" {
		t.Errorf("Validate = %v, want one holder_services error naming the value", fes)
	}
	if err := ValidateRulesValue("holder_services", "ok-name"); err != nil {
		t.Errorf("ValidateRulesValue: %v", err)
	}
}

// TestRenderRules_holderServicesGrantNodeReadOnTheRunnersNodes: with
// holder_services the rules also grant node_prefix read on each session
// node prefix (an agentless runner lists the former holders' instances on
// its -node, which Consul filters without node read), and nothing about
// nodes without them; the rendering is canonical, equivalent to Consul's
// own spelling of it, read back exactly on import, and rules rendered
// before it (no node read) import as inexact, so a plan puts it in.
func TestRenderRules_holderServicesGrantNodeReadOnTheRunnersNodes(t *testing.T) {
	in := RulesInput{LockKeys: []string{"jobs/report/.lock"}, SessionNodePrefixes: []string{"consul-lock-runners", "worker-"}, HolderServices: []string{"report"}}
	got := RenderRules(in)
	want := "key \"jobs/report/.lock\" {\n  policy = \"write\"\n}\n\n" +
		"session_prefix \"consul-lock-runners\" {\n  policy = \"write\"\n}\n\n" +
		"session_prefix \"worker-\" {\n  policy = \"write\"\n}\n\n" +
		"node_prefix \"consul-lock-runners\" {\n  policy = \"read\"\n}\n\n" +
		"node_prefix \"worker-\" {\n  policy = \"read\"\n}\n\n" +
		"service \"report\" {\n  policy = \"write\"\n}\n"
	if got != want {
		t.Fatalf("RenderRules =\n%s\nwant\n%s", got, want)
	}
	if n, err := NormalizeRules(got); err != nil || n != got {
		t.Errorf("RenderRules output is not canonical: %v\n%s", err, n)
	}
	handWritten := `service "report" { policy = "write" }
node_prefix "worker-" { policy = "read" }
node_prefix "consul-lock-runners" { policy = "read" }
session_prefix "worker-" { policy = "write" }
session_prefix "consul-lock-runners" { policy = "write" }
key "jobs/report/.lock" { policy = "write" }`
	if eq, err := RulesEquivalent(got, handWritten); err != nil || !eq {
		t.Errorf("RulesEquivalent(rendered, hand-written) = %v, %v", eq, err)
	}
	back, exact, err := RulesInputFromRules(handWritten)
	if err != nil || !exact || RenderRules(back) != got {
		t.Errorf("import: %+v, exact %v, %v; renders\n%s", back, exact, err, RenderRules(back))
	}

	without := in
	without.HolderServices = nil
	if r := RenderRules(without); strings.Contains(r, "node") {
		t.Errorf("without holder_services the rules grant node rules:\n%s", r)
	}
	if _, exact, err := RulesInputFromRules(RenderRules(without) + `node_prefix "worker-" { policy = "read" }`); err != nil || exact {
		t.Errorf("node read without holder services imported as exact (%v, %v)", exact, err)
	}
	older := strings.Replace(got, "node_prefix \"worker-\" {\n  policy = \"read\"\n}\n\n", "", 1)
	if _, exact, err := RulesInputFromRules(older); err != nil || exact {
		t.Errorf("rules lacking a runners' node read imported as exact (%v, %v):\n%s", exact, err, older)
	}
	if _, exact, err := RulesInputFromRules(got + `node_prefix "web-" { policy = "read" }`); err != nil || exact {
		t.Errorf("node read outside session_node_prefixes imported as exact (%v, %v)", exact, err)
	}

	anyNode := RulesInput{SessionNodePrefixes: []string{""}, HolderServices: []string{"report"}}
	if r := RenderRules(anyNode); !strings.Contains(r, "node_prefix \"\" {\n  policy = \"read\"\n}") {
		t.Errorf("session_node_prefixes [\"\"] with holder_services: no node_prefix \"\" read:\n%s", r)
	}
	ws := anyNode.Warnings(nil)
	if len(ws) != 1 || !strings.Contains(ws[0].Detail, `node_prefix "" read`) {
		t.Errorf("Warnings = %+v, want the any-node warning to name node_prefix \"\" read", ws)
	}
}
