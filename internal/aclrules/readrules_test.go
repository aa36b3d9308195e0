package aclrules

import "testing"

func TestReadOnlyRules(t *testing.T) {
	got := ReadOnlyRules("consul-lock", []string{"jobs/", "service/web/"})
	p, err := ParseRules(got)
	if err != nil {
		t.Fatalf("rendered rules do not parse: %v\n%s", err, got)
	}
	for _, r := range []Rule{
		{Resource: "key_prefix", Name: "consul-lock/"},
		{Resource: "key_prefix", Name: "jobs/"},
		{Resource: "key_prefix", Name: "service/web/"},
		{Resource: "session_prefix", Name: ""},
	} {
		if g := p.Grants(r.Resource, r.Name); g != ACLPolicyRead {
			t.Errorf("%s %q: %q, want read", r.Resource, r.Name, g)
		}
	}
	if len(p.Rules) != 4 {
		t.Errorf("%d rules, want 4 (read only, nothing else):\n%s", len(p.Rules), got)
	}
	for _, r := range p.Rules {
		if r.Policy != ACLPolicyRead {
			t.Errorf("%s %q grants %s: status must only read", r.Resource, r.Name, r.Policy)
		}
	}
	// No declared prefixes: every key.
	if p, _ := ParseRules(ReadOnlyRules("consul-lock", nil)); p.Grants("key_prefix", "") != ACLPolicyRead {
		t.Errorf("without prefixes: want key_prefix \"\" read")
	}
}

func TestReadOnlyRules_holderServicesAddServiceAndNodeRead(t *testing.T) {
	p, err := ParseRules(ReadOnlyRules("consul-lock", []string{"jobs/"}, "web-leader"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Grants("service", "web-leader") != ACLPolicyRead || p.Grants("node_prefix", "") != ACLPolicyRead {
		t.Errorf("rules lack service read on the holder service or node read:\n%s", p.Canonical())
	}
	if p.Grants("service", "other") != "" {
		t.Errorf("rules grant service read beyond the holder services:\n%s", p.Canonical())
	}
	if q, _ := ParseRules(ReadOnlyRules("consul-lock", []string{"jobs/"})); q.Grants("node_prefix", "") != "" {
		t.Errorf("rules without holder services grant node read")
	}
}
