package lockmodel

import (
	"strings"
	"testing"
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
	fes := AsFieldErrors(bad.Validate())
	if len(fes) != 1 || fes[0].Field != "holder_services" || fes[0].Value != "Web_Leader" {
		t.Errorf("Validate = %v, want one holder_services error naming the value", fes)
	}
	if err := ValidateRulesValue("holder_services", "ok-name"); err != nil {
		t.Errorf("ValidateRulesValue: %v", err)
	}
}
