package aclrules

import "strings"

// ReadOnlyRules renders the ACL rules `consullock status` needs, read-only:
// key_prefix read on the registry and on each prefix it lists lock keys
// under (nil or empty: every key, ""), and session_prefix "" read to see
// every holder's session. Status lists prefixes rather than single keys,
// which is why the grants are key_prefix ones. For the declared locks'
// holder services (holderServices: their names) it adds service read on
// each and node_prefix "" read, which the health query of their instances
// needs (Consul filters out an instance whose node or service the token
// may not read).
func ReadOnlyRules(registryPrefix string, keyPrefixes []string, holderServices ...string) string {
	if len(keyPrefixes) == 0 {
		keyPrefixes = []string{""}
	}
	rules := []Rule{{Resource: "key_prefix", Name: strings.Trim(registryPrefix, "/") + "/", Policy: ACLPolicyRead}}
	for _, p := range keyPrefixes {
		rules = append(rules, Rule{Resource: "key_prefix", Name: p, Policy: ACLPolicyRead})
	}
	rules = append(rules, Rule{Resource: "session_prefix", Name: "", Policy: ACLPolicyRead})
	for _, s := range holderServices {
		rules = append(rules, Rule{Resource: "service", Name: s, Policy: ACLPolicyRead})
	}
	if len(holderServices) > 0 {
		rules = append(rules, Rule{Resource: "node_prefix", Name: "", Policy: ACLPolicyRead})
	}
	p := ParsedRules{Rules: rules}
	text := p.Canonical()
	// Normalising merges duplicates and sorts, exactly as the policy
	// resource renders its rules.
	if n, err := NormalizeRules(text); err == nil {
		return n
	}
	return text
}
