package aclrules

import (
	"fmt"
	"sort"
	"strings"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// ACL rules, rendering: the least-privilege rules of consullock_acl_policy
// from its inputs, validated with messages that name the attribute. The
// output is in the canonical form that NormalizeRules (aclrules_parse.go)
// also emits, so RenderRules emits key write (lock_keys, run ledger keys), key_prefix write
// (semaphore_prefixes, queue_prefixes), key read (read_keys), session_prefix write,
// agent_prefix "" read, node_prefix read (holder services only) and service
// write (holder_services), in that order, and its output is already
// canonical: NormalizeRules(RenderRules(in)) == RenderRules(in).

// Dispositions of an ACL rule, as Consul's acl package spells them.
const (
	ACLPolicyDeny  = "deny"
	ACLPolicyRead  = "read"
	ACLPolicyList  = "list" // key and key_prefix only
	ACLPolicyWrite = "write"
)

// RulesInput holds the inputs of consullock_acl_policy that shape its rules.
type RulesInput struct {
	LockKeys            []string // key write on each
	SemaphorePrefixes   []string // key_prefix "<p>/" write on each
	SessionNodePrefixes []string // session_prefix write on each; "" means any node
	ReadKeys            []string // key read on each (write wins over read)
	AgentRead           bool     // agent_prefix "" read, needed by `consul lock`
	// RunLedgerKeys are run ledger keys (RunLedgerKey): key write on each,
	// rendered as lock keys are. A run-once holder records its attempts
	// there.
	RunLedgerKeys []string
	// HolderServices are holder service names (consullock_lock's
	// holder_service.name): service write on each, which is all a holder
	// needs to register its instance on its agent, pass its TTL check and
	// deregister it (consul agent/acl.go vetServiceRegister and
	// vetCheckUpdate, verified on a 1.14 agent).
	//
	// With holder services the rules also grant node_prefix read on each
	// session node prefix (HolderNodeRead).
	HolderServices []string
	// QueuePrefixes are the prefixes of locks whose waiters queue
	// (waiters = "queue"): key_prefix "<p>/.queue/" write on each, where
	// each waiter keeps its queue entry (WaiterQueuePrefix).
	QueuePrefixes []string
}

// HolderNodeRead reports whether the rules of in grant node_prefix
// "<p>" read on each session node prefix p: whenever in has holder
// services. An agentless runner registers its holder's instance on the
// node it names with -node, and before its command starts it lists the
// lock's instances on every node to deregister former holders' (a killed
// or cut-off holder's, which no agent takes out of DNS, on whatever -node
// it ran); Consul leaves the instances of a node the token cannot read out
// of that listing, so the runner needs node read on every holder's node
// (consul.StaleHolderInstances). A -node must be a node its sessions may
// live on, so session_node_prefixes already names those nodes when the
// lock's runners share one policy, and no other input is needed; the
// deregistration on another node needs only the service write. It is rendered
// for runners on client agents too, which do not list: read on the
// runners' own nodes (their address, node meta and checks; the instances
// still need service read) costs less than a second input users would
// have to keep in step with session_node_prefixes, and never writes.
func (in RulesInput) HolderNodeRead() bool {
	return len(in.HolderServices) > 0
}

// Attribute names of consullock_acl_policy used in errors and warnings.
const (
	attrLockKeys            = "lock_keys"
	attrSemaphorePrefixes   = "semaphore_prefixes"
	attrSessionNodePrefixes = "session_node_prefixes"
	attrReadKeys            = "read_keys"
	attrRunLedgerKeys       = "run_ledger_keys"
	attrHolderServices      = "holder_services"
	attrQueuePrefixes       = "queue_prefixes"
	attrRules               = "rules"
)

const (
	allowedNodePrefix   = "\"\" (any node) or a node-name prefix of letters, digits, '-', '_' and '.'"
	allowedNodePrefixes = "at least one node-name prefix; \"\" means any node"
)

// Validate reports every input that cannot be rendered into a safe rule, as
// FieldErrors naming the attribute and the value. Keys and prefixes follow
// NormalizeKeyPath, the rule of consullock_lock's key, so any lock key can be
// granted; session node prefixes are "" or node-name prefixes.
func (in RulesInput) Validate() error {
	var errs validation.FieldErrors
	for _, group := range []struct {
		field  string
		values []string
	}{
		{attrLockKeys, in.LockKeys},
		{attrSemaphorePrefixes, in.SemaphorePrefixes},
		{attrReadKeys, in.ReadKeys},
		{attrRunLedgerKeys, in.RunLedgerKeys},
		{attrQueuePrefixes, in.QueuePrefixes},
	} {
		for _, v := range group.values {
			if _, err := lockmodel.NormalizeKeyPath(group.field, v); err != nil {
				errs = append(errs, validation.AsFieldErrors(err)...)
			}
		}
	}
	for _, v := range in.HolderServices {
		errs = append(errs, validation.AsFieldErrors(holdersvc.ValidateName(attrHolderServices, v))...)
	}
	if len(in.SessionNodePrefixes) == 0 {
		errs = append(errs, &validation.FieldError{Field: attrSessionNodePrefixes, Value: "[]", Allowed: allowedNodePrefixes})
	}
	for _, v := range in.SessionNodePrefixes {
		if !validNodePrefix(v) {
			errs = append(errs, &validation.FieldError{Field: attrSessionNodePrefixes, Value: v, Allowed: allowedNodePrefix})
		}
	}
	return errs.Err()
}

// normRulePath drops leading and trailing "/", as NormalizeKeyPath does, for
// rendering (Validate judges the rest).
func normRulePath(p string) string {
	return strings.Trim(p, "/")
}

func validNodePrefix(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// anyNodeRead completes the "Sessions on any node" warning when the rules
// also grant node_prefix "" read (HolderNodeRead).
func anyNodeRead(in RulesInput) string {
	if !in.HolderNodeRead() {
		return ""
	}
	return ` With holder_services it also renders node_prefix "" read: holders may read every node.`
}

// Warnings gives advice on valid inputs. lockPrefixes are the prefixes of the
// declared locks (nil: unknown, no check); a lock key or semaphore prefix
// outside all of them is named.
func (in RulesInput) Warnings(lockPrefixes []string) []validation.Warning {
	var ws []validation.Warning
	for _, p := range in.SessionNodePrefixes {
		if p == "" {
			ws = append(ws, validation.Warning{
				Field:   attrSessionNodePrefixes,
				Summary: "Sessions on any node",
				Detail: `session_node_prefixes contains "", which renders session_prefix "" write: ` +
					"holders of this policy may create sessions on every node of the datacenter. " +
					"List the node-name prefixes where the job runs to narrow it." + anyNodeRead(in),
			})
			break
		}
	}
	if lockPrefixes == nil {
		return ws
	}
	under := func(k string) bool {
		for _, lp := range lockPrefixes {
			lp = strings.Trim(lp, "/")
			if lp == "" || k == lp || strings.HasPrefix(k, lp+"/") {
				return true
			}
		}
		return false
	}
	for _, group := range []struct {
		field, what string
		values      []string
	}{
		{attrLockKeys, "Lock key", in.LockKeys},
		{attrSemaphorePrefixes, "Semaphore prefix", in.SemaphorePrefixes},
		{attrQueuePrefixes, "Queue prefix", in.QueuePrefixes},
	} {
		for _, k := range sortedUnique(group.values, normRulePath) {
			if under(k) {
				continue
			}
			ws = append(ws, validation.Warning{
				Field:   group.field,
				Summary: group.what + " outside the declared locks",
				Detail: fmt.Sprintf("%s %q is not under the prefix of any declared consullock_lock, so this "+
					"policy grants write on a key no declared lock uses. Check for a typo.", group.field, k),
			})
		}
	}
	return ws
}

// SessionRuleWarnings flags exact session rules in rulesText: they match the
// NODE a session is created on, not the session's name, a common mistake.
// Text that does not parse yields no warnings (ParseRules reports the error).
func SessionRuleWarnings(rulesText string) []validation.Warning {
	p, err := ParseRules(rulesText)
	if err != nil {
		return nil
	}
	var ws []validation.Warning
	var visit func(p *ParsedRules)
	visit = func(p *ParsedRules) {
		for _, r := range p.Rules {
			if r.Resource != "session" {
				continue
			}
			ws = append(ws, validation.Warning{
				Field:   attrRules,
				Summary: "Session rule matches a node name",
				Detail: fmt.Sprintf("session %q grants %s on sessions created on the node named exactly %q: "+
					"Consul session rules match node names, not session names. To let lock holders on "+
					"nodes whose names start with %q create sessions, use session_prefix %q instead.",
					r.Name, r.Policy, r.Name, r.Name, r.Name),
			})
		}
		for _, s := range p.Scopes {
			visit(&s.ParsedRules)
		}
	}
	visit(p)
	return ws
}

// RenderRules renders the canonical rules of in. Paths are normalised as
// Validate does; names are always quoted safely, so even invalid input
// cannot produce a rule outside its block, but only validated input should
// be sent to Consul.
func RenderRules(in RulesInput) string {
	var raw []rawRule
	for _, k := range in.LockKeys {
		raw = append(raw, rawRule{resource: "key", name: normRulePath(k), policy: ACLPolicyWrite})
	}
	for _, k := range in.RunLedgerKeys {
		raw = append(raw, rawRule{resource: "key", name: normRulePath(k), policy: ACLPolicyWrite})
	}
	for _, p := range in.SemaphorePrefixes {
		raw = append(raw, rawRule{resource: "key_prefix", name: normRulePath(p) + "/", policy: ACLPolicyWrite})
	}
	for _, p := range in.QueuePrefixes {
		raw = append(raw, rawRule{resource: "key_prefix", name: normRulePath(p) + "/" + lockmodel.QueueKeyName + "/", policy: ACLPolicyWrite})
	}
	for _, k := range in.ReadKeys {
		raw = append(raw, rawRule{resource: "key", name: normRulePath(k), policy: ACLPolicyRead})
	}
	for _, n := range in.SessionNodePrefixes {
		raw = append(raw, rawRule{resource: "session_prefix", name: n, policy: ACLPolicyWrite})
	}
	if in.AgentRead {
		raw = append(raw, rawRule{resource: "agent_prefix", name: "", policy: ACLPolicyRead})
	}
	if in.HolderNodeRead() {
		for _, n := range in.SessionNodePrefixes {
			raw = append(raw, rawRule{resource: "node_prefix", name: n, policy: ACLPolicyRead})
		}
	}
	for _, n := range in.HolderServices {
		raw = append(raw, rawRule{resource: "service", name: n, policy: ACLPolicyWrite})
	}
	p := ParsedRules{Rules: mergeRules(raw)}
	return p.Canonical()
}

// sortedUnique maps values through norm and returns them sorted, without
// duplicates.
func sortedUnique(values []string, norm func(string) string) []string {
	seen := make(map[string]bool, len(values))
	var out []string
	for _, v := range values {
		v = norm(v)
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}
