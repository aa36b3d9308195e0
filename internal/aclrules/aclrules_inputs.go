package aclrules

import (
	"fmt"
	"strings"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// RulesInputFromRules reads back the inputs of consullock_acl_policy from a
// rules text, for import: key write becomes a lock key, key_prefix "<p>/"
// write a semaphore prefix (key_prefix "<p>/.queue/" write a queue prefix), key read a read key, session_prefix write a
// session node prefix, agent_prefix "" read sets AgentRead and service write
// a holder service; node_prefix read is not an input of its own (RenderRules
// derives it from holder services and session node prefixes, HolderNodeRead)
// and counts as exact when RenderRules gives it back. exact is true
// when RenderRules of the result grants exactly what text grants; when it is
// false, text holds rules consullock_acl_policy does not render (they are
// left out of in, and a plan after import shows them being removed).
func RulesInputFromRules(text string) (in RulesInput, exact bool, err error) {
	p, err := ParseRules(text)
	if err != nil {
		return RulesInput{}, false, err
	}
	exact = len(p.Scopes) == 0
	for _, r := range p.Rules {
		switch {
		case r.Resource == "key" && r.Policy == ACLPolicyWrite && r.Name != "":
			in.LockKeys = append(in.LockKeys, r.Name)
		case r.Resource == "key" && r.Policy == ACLPolicyRead && r.Name != "":
			in.ReadKeys = append(in.ReadKeys, r.Name)
		case r.Resource == "key_prefix" && r.Policy == ACLPolicyWrite && strings.HasSuffix(r.Name, "/"+lockmodel.QueueKeyName+"/") && strings.Trim(strings.TrimSuffix(r.Name, lockmodel.QueueKeyName+"/"), "/") != "":
			in.QueuePrefixes = append(in.QueuePrefixes, strings.TrimSuffix(r.Name, "/"+lockmodel.QueueKeyName+"/"))
		case r.Resource == "key_prefix" && r.Policy == ACLPolicyWrite && strings.HasSuffix(r.Name, "/") && strings.Trim(r.Name, "/") != "":
			in.SemaphorePrefixes = append(in.SemaphorePrefixes, strings.TrimSuffix(r.Name, "/"))
		case r.Resource == "session_prefix" && r.Policy == ACLPolicyWrite:
			in.SessionNodePrefixes = append(in.SessionNodePrefixes, r.Name)
		case r.Resource == "agent_prefix" && r.Policy == ACLPolicyRead && r.Name == "":
			in.AgentRead = true
		case r.Resource == "service" && r.Policy == ACLPolicyWrite && r.Intentions == "":
			in.HolderServices = append(in.HolderServices, r.Name)
		case r.Resource == "node_prefix" && r.Policy == ACLPolicyRead:
			// Derived: the comparison with RenderRules below decides.
		default:
			exact = false
		}
	}
	if in.Validate() != nil {
		// A rule consullock would refuse to render (a key with a space, a
		// path with "//"): keep only what validates, so that an import
		// never puts into state an input the schema rejects.
		in = in.validOnly()
		exact = false
	}
	if exact {
		canonical := p.Canonical()
		exact = RenderRules(in) == canonical
	}
	return in, exact, nil
}

// validOnly drops every value Validate refuses.
func (in RulesInput) validOnly() RulesInput {
	keep := func(field string, values []string) []string {
		var out []string
		for _, v := range values {
			if ValidateRulesValue(field, v) == nil {
				out = append(out, v)
			}
		}
		return out
	}
	return RulesInput{
		LockKeys:            keep(attrLockKeys, in.LockKeys),
		SemaphorePrefixes:   keep(attrSemaphorePrefixes, in.SemaphorePrefixes),
		ReadKeys:            keep(attrReadKeys, in.ReadKeys),
		SessionNodePrefixes: keep(attrSessionNodePrefixes, in.SessionNodePrefixes),
		AgentRead:           in.AgentRead,
		RunLedgerKeys:       keep(attrRunLedgerKeys, in.RunLedgerKeys),
		HolderServices:      keep(attrHolderServices, in.HolderServices),
		QueuePrefixes:       keep(attrQueuePrefixes, in.QueuePrefixes),
	}
}

// SplitRunLedgers moves the lock keys of in that are run ledger keys under
// registryPrefix (<registryPrefix>/runs/<lock name>) to RunLedgerKeys, for
// import: RulesInputFromRules cannot tell a ledger's key write from a lock
// key's, the registry prefix can.
func (in RulesInput) SplitRunLedgers(registryPrefix string) RulesInput {
	folder := lockmodel.RegistryFolder(registryPrefix, lockmodel.KindRuns)
	out := in
	out.LockKeys = nil
	out.RunLedgerKeys = append([]string(nil), in.RunLedgerKeys...)
	for _, k := range in.LockKeys {
		name, ok := strings.CutPrefix(normRulePath(k), folder)
		if ok && lockmodel.ValidateName("", name) == nil {
			out.RunLedgerKeys = append(out.RunLedgerKeys, k)
			continue
		}
		out.LockKeys = append(out.LockKeys, k)
	}
	return out
}

// ValidateRulesValue checks one value of the list attribute field
// ("lock_keys", "semaphore_prefixes", "read_keys", "session_node_prefixes"
// or "run_ledger_keys") as RulesInput.Validate does, so a provider
// validator can judge each element on its own and name it. The error is a
// *FieldError.
func ValidateRulesValue(field, value string) error {
	in := RulesInput{SessionNodePrefixes: []string{""}}
	switch field {
	case attrLockKeys:
		in.LockKeys = []string{value}
	case attrSemaphorePrefixes:
		in.SemaphorePrefixes = []string{value}
	case attrReadKeys:
		in.ReadKeys = []string{value}
	case attrSessionNodePrefixes:
		in.SessionNodePrefixes = []string{value}
	case attrRunLedgerKeys:
		in.RunLedgerKeys = []string{value}
	case attrHolderServices:
		in.HolderServices = []string{value}
	case attrQueuePrefixes:
		in.QueuePrefixes = []string{value}
	default:
		return fmt.Errorf("lockmodel: %q is not a rules input attribute", field)
	}
	if fes := validation.AsFieldErrors(in.Validate()); len(fes) > 0 {
		return fes[0] // one value, at most one problem
	}
	return nil
}

// SessionNodePrefixWarnings flags session node prefixes that equal the name
// of a declared lock or session profile (names): that is the mark of the
// common misunderstanding that session rules match session or lock names,
// when Consul matches them against the NODE a session is created on.
func SessionNodePrefixWarnings(nodePrefixes, names []string) []validation.Warning {
	declared := make(map[string]bool, len(names))
	for _, n := range names {
		declared[n] = true
	}
	var ws []validation.Warning
	for _, p := range sortedUnique(nodePrefixes, func(s string) string { return s }) {
		if p == "" || !declared[p] {
			continue
		}
		ws = append(ws, validation.Warning{
			Field:   attrSessionNodePrefixes,
			Summary: "Session node prefix looks like a lock name",
			Detail: fmt.Sprintf("session_node_prefixes contains %q, which is the name of a declared lock or "+
				"session profile. Consul session rules match the name of the NODE a session is created on, "+
				"not the session's or the lock's name, so this grants sessions only on nodes whose names "+
				"start with %q. List the node-name prefixes of the machines that run the job.", p, p),
		})
	}
	return ws
}
