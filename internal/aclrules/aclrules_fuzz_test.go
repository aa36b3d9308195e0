package aclrules

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl"
)

// consulRules decodes the resources RenderRules may emit, independently of
// ParseRules, with the tags of Consul's acl.PolicyRules.
type consulRules struct {
	Keys            []*consulRule `hcl:"key,expand"`
	KeyPrefixes     []*consulRule `hcl:"key_prefix,expand"`
	Sessions        []*consulRule `hcl:"session,expand"`
	SessionPrefixes []*consulRule `hcl:"session_prefix,expand"`
	Agents          []*consulRule `hcl:"agent,expand"`
	AgentPrefixes   []*consulRule `hcl:"agent_prefix,expand"`
	Nodes           []*consulRule `hcl:"node,expand"`
	NodePrefixes    []*consulRule `hcl:"node_prefix,expand"`
	Services        []*consulRule `hcl:"service,expand"`
	Operator        string        `hcl:"operator"`
	ACL             string        `hcl:"acl"`
}

type consulRule struct {
	Name   string `hcl:",key"`
	Policy string
}

func (c *consulRules) grants() []string {
	var out []string
	add := func(resource string, rs []*consulRule) {
		for _, r := range rs {
			out = append(out, resource+" "+r.Name+" "+r.Policy)
		}
	}
	add("key", c.Keys)
	add("key_prefix", c.KeyPrefixes)
	add("session", c.Sessions)
	add("session_prefix", c.SessionPrefixes)
	add("agent", c.Agents)
	add("agent_prefix", c.AgentPrefixes)
	add("node", c.Nodes)
	add("node_prefix", c.NodePrefixes)
	add("service", c.Services)
	if c.Operator != "" {
		out = append(out, "operator  "+c.Operator)
	}
	if c.ACL != "" {
		out = append(out, "acl  "+c.ACL)
	}
	sort.Strings(out)
	return out
}

// expectedGrants is the grant set an input must render to, derived from
// the contract rather than from the renderer.
func expectedGrants(in RulesInput) []string {
	set := map[string]bool{}
	writes := map[string]bool{}
	for _, k := range in.LockKeys {
		k = strings.Trim(k, "/")
		writes[k] = true
		set["key "+k+" write"] = true
	}
	for _, p := range in.SemaphorePrefixes {
		set["key_prefix "+strings.Trim(p, "/")+"/ write"] = true
	}
	for _, k := range in.ReadKeys {
		if k = strings.Trim(k, "/"); !writes[k] {
			set["key "+k+" read"] = true
		}
	}
	for _, n := range in.SessionNodePrefixes {
		set["session_prefix "+n+" write"] = true
	}
	if in.AgentRead {
		set["agent_prefix  read"] = true
	}
	for _, s := range in.HolderServices {
		set["service "+s+" write"] = true
		// An agentless holder lists its -node's instances: node read on
		// every node its sessions may live on.
		for _, n := range in.SessionNodePrefixes {
			set["node_prefix "+n+" read"] = true
		}
	}
	var out []string
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

func FuzzRenderRules(f *testing.F) {
	// Each list is one string split on "\n" (which no valid element holds).
	f.Add("jobs/backup/.lock", "", "worker-", "", false, "")
	f.Add("a/.lock\nb/.lock\n/a/.lock/", "sem/x\nsem/y/", "\nweb-\ndb.1", "a/.lock\nrec/x", true, "web-leader\ndb")
	f.Add(`a" } key_prefix "" { policy = "write`, "${x}", "*", "a/../b", false, `x" } node_prefix "" { policy = "write`)
	f.Add("a/.lock", "a", "", "a/.lock", true, "report")
	f.Fuzz(func(t *testing.T, lockKeys, semPrefixes, nodePrefixes, readKeys string, agent bool, holderServices string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\n")
		}
		in := RulesInput{
			LockKeys:            split(lockKeys),
			SemaphorePrefixes:   split(semPrefixes),
			SessionNodePrefixes: strings.Split(nodePrefixes, "\n"),
			ReadKeys:            split(readKeys),
			AgentRead:           agent,
			HolderServices:      split(holderServices),
		}
		rendered := RenderRules(in) // must not panic, valid or not
		if in.Validate() != nil {
			return
		}

		var decoded consulRules
		if err := hcl.Decode(&decoded, rendered); err != nil {
			t.Fatalf("hcl.Decode(RenderRules()) error: %v\n%s", err, rendered)
		}
		if got, want := decoded.grants(), expectedGrants(in); !reflect.DeepEqual(got, want) {
			t.Fatalf("rendered grants\n%q\nwant exactly\n%q\nrules:\n%s", got, want, rendered)
		}

		n1, err := NormalizeRules(rendered)
		if err != nil {
			t.Fatalf("NormalizeRules(RenderRules()) error: %v\n%s", err, rendered)
		}
		n2, err := NormalizeRules(n1)
		if err != nil {
			t.Fatalf("NormalizeRules(NormalizeRules()) error: %v\n%s", err, n1)
		}
		if n1 != n2 {
			t.Fatalf("NormalizeRules is not idempotent:\n%s\nthen\n%s", n1, n2)
		}
		if n1 != rendered {
			t.Fatalf("RenderRules() is not canonical:\n%s\nnormalised\n%s", rendered, n1)
		}
		// Import reads the inputs back: the same rules, exactly.
		back, exact, err := RulesInputFromRules(rendered)
		if err != nil || !exact {
			t.Fatalf("RulesInputFromRules(RenderRules()) = exact %v, %v\n%s", exact, err, rendered)
		}
		if again := RenderRules(back); again != rendered {
			t.Fatalf("import round trip renders\n%s\nwant\n%s", again, rendered)
		}
	})
}

func FuzzNormalizeRules(f *testing.F) {
	for _, s := range []string{
		baseRules,
		`{"key":{"a/.lock":{"policy":"write"}}}`,
		`{"key":[{"a/.lock":[{"policy":"write"}]}]}`,
		`key = { "a" = { policy = "write" } }`,
		`operator = "read" acl = "write" keyring = "deny" mesh = "read" peering = "write"`,
		`service "w" { policy = "read" intentions = "write" } service_prefix "" { policy = "deny" }`,
		`partition "p" { namespace "n" { policy = "write" key "${x}" { policy = "list" } } }`,
		"key \"\\x24{\" { policy = \"read\" }\n# c\n/* d */",
		`key "a" { policy = "Write" } key "a" { policy = "read" }`,
		`key 1 { policy = 2 }`,
		`key "a" { policy = <<EOF
write
EOF
}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := ParseRules(text)
		if err != nil {
			return
		}
		n1 := p.Canonical()
		p2, err := ParseRules(n1)
		if err != nil {
			t.Fatalf("canonical text does not parse: %v\n%s", err, n1)
		}
		if !reflect.DeepEqual(p, p2) {
			t.Fatalf("canonical text parses differently:\n%+v\n%+v\n%s", p, p2, n1)
		}
		if n2 := p2.Canonical(); n2 != n1 {
			t.Fatalf("NormalizeRules is not idempotent:\n%s\nthen\n%s", n1, n2)
		}
	})
}
