package aclrules

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
)

// ACL rules, parsing and normalising: any rules text Consul accepts is
// parsed as Consul does and rendered in one canonical form, so that live
// rules compare semantically with the declared ones.
//
// Canonical form. NormalizeRules and RenderRules emit the same layout:
//
//   - rules grouped by resource family in the order key, session, agent,
//     node, service, query, event, then the unlabelled acl, keyring, mesh,
//     operator and peering, then the Enterprise namespace and partition
//     blocks;
//   - within a family by disposition (write, list, read, deny), then the
//     exact rule before the prefix rule, then by name (byte order);
//   - one block per rule, two-space indent, a blank line between blocks and a
//     trailing newline; the empty policy is the empty string.
//
// Duplicates. Consul merges every rule for the same resource and name with
// acl.MergePolicies, also within a single policy (acl/policy_merger.go): the
// disposition that "takes precedence" wins, deny over write over list over
// read, and a service rule merges its policy and intentions separately. The
// normaliser mirrors that, so `key "a" read` plus `key "a" write` normalises to
// `key "a" write`. Unlabelled rules (operator = ...) given twice in one body
// keep the last value, which is what hcl.Decode does for Consul.
//
// Unknown content. Consul decodes rules with hcl v1, which silently ignores
// attributes it has no field for. The normaliser refuses them instead
// (Enterprise sentinel blocks, typos, anything newer than Consul 1.14): it
// cannot prove two such texts equivalent, and a caller comparing live rules
// with declared ones must treat the error as drift rather than as equality.

// NormalizeRules parses rules text as Consul does (HCL or JSON) and returns
// its canonical form. Two texts grant the same iff their canonical forms are
// equal. See the package comment on ACL rules for the exact contract.
func NormalizeRules(text string) (string, error) {
	p, err := ParseRules(text)
	if err != nil {
		return "", err
	}
	return p.Canonical(), nil
}

// RulesEquivalent reports whether a and b grant the same. An error means one
// of them could not be normalised; when b is the live text, treat that as
// drift.
func RulesEquivalent(a, b string) (bool, error) {
	na, err := NormalizeRules(a)
	if err != nil {
		return false, err
	}
	nb, err := NormalizeRules(b)
	if err != nil {
		return false, err
	}
	return na == nb, nil
}

// Rule is one grant: a resource, its segment and a disposition.
type Rule struct {
	Resource   string // as written in rules: "key", "key_prefix", "session_prefix", "operator", ...
	Name       string // the segment (key, prefix, node name, ...); "" for acl, keyring, mesh, operator, peering
	Policy     string // ACLPolicyRead, ACLPolicyWrite, ACLPolicyList or ACLPolicyDeny
	Intentions string // service and service_prefix only; "" when not set
}

// ParsedRules is a policy's rules after Consul's merge, in canonical order.
type ParsedRules struct {
	Rules  []Rule   // rules outside any namespace or partition block
	Scopes []*Scope // Enterprise namespace and partition blocks
}

// Scope is an Enterprise namespace, namespace_prefix, partition or
// partition_prefix block. A partition may hold namespace scopes.
type Scope struct {
	Resource string
	Name     string
	Policy   string // the block's own policy; "" when not set
	ParsedRules
}

// Grants returns the disposition of the rule for exactly resource and name
// outside any scope ("" when there is none). It does not evaluate prefixes:
// Grants("key", "a") ignores key_prefix "".
func (p *ParsedRules) Grants(resource, name string) string {
	for _, r := range p.Rules {
		if r.Resource == resource && r.Name == name {
			return r.Policy
		}
	}
	return ""
}

// Canonical renders p in the canonical layout.
func (p *ParsedRules) Canonical() string {
	var b strings.Builder
	p.write(&b, "")
	return b.String()
}

func (p *ParsedRules) write(b *strings.Builder, indent string) {
	first := true
	sep := func() {
		if !first {
			b.WriteString("\n")
		}
		first = false
	}
	for _, r := range p.Rules {
		sep()
		spec := resourceSpecs[r.Resource]
		if !spec.labelled {
			fmt.Fprintf(b, "%s%s = %s\n", indent, r.Resource, quoteHCL(r.Policy))
			continue
		}
		fmt.Fprintf(b, "%s%s %s {\n", indent, r.Resource, quoteHCL(r.Name))
		fmt.Fprintf(b, "%s  policy = %s\n", indent, quoteHCL(r.Policy))
		if r.Intentions != "" {
			fmt.Fprintf(b, "%s  intentions = %s\n", indent, quoteHCL(r.Intentions))
		}
		fmt.Fprintf(b, "%s}\n", indent)
	}
	for _, s := range p.Scopes {
		sep()
		fmt.Fprintf(b, "%s%s %s {\n", indent, s.Resource, quoteHCL(s.Name))
		if s.Policy != "" {
			fmt.Fprintf(b, "%s  policy = %s\n", indent, quoteHCL(s.Policy))
			if len(s.Rules) > 0 || len(s.Scopes) > 0 {
				b.WriteString("\n")
			}
		}
		s.ParsedRules.write(b, indent+"  ")
		fmt.Fprintf(b, "%s}\n", indent)
	}
}

// quoteHCL quotes s as an hcl v1 string literal that unquotes to exactly s.
// '$' is escaped so that no "${" interpolation is ever opened, which also
// makes braces harmless; bytes that are not valid UTF-8 become \xNN.
func quoteHCL(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '$':
			b.WriteString(`\x24`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < utf8.RuneSelf || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// ParseRules parses rules text the way Consul 1.14 does (hcl.Decode into the
// shape of acl.PolicyRules plus the Enterprise namespace and partition
// blocks), validates the dispositions as Consul does, merges duplicates with
// Consul's precedence and sorts the result canonically.
func ParseRules(text string) (*ParsedRules, error) {
	var doc hclPolicy
	if err := decodeRules(text, &doc); err != nil {
		return nil, err
	}
	root := rawScope{}
	if err := doc.collect(&root); err != nil {
		return nil, err
	}
	for _, ns := range doc.Namespaces {
		if err := addScope(&root, "namespace", ns); err != nil {
			return nil, err
		}
	}
	for _, ns := range doc.NamespacePrefixes {
		if err := addScope(&root, "namespace_prefix", ns); err != nil {
			return nil, err
		}
	}
	for _, pt := range doc.Partitions {
		if err := addPartition(&root, "partition", pt); err != nil {
			return nil, err
		}
	}
	for _, pt := range doc.PartitionPrefixes {
		if err := addPartition(&root, "partition_prefix", pt); err != nil {
			return nil, err
		}
	}
	p := root.build()
	return &p, nil
}

// errRulesParser stands for a panic inside hcl v1, which it has on some
// malformed input (Consul recovers from those in its HTTP handler).
var errRulesParser = errors.New("the hcl parser failed on this input")

func decodeRules(text string, out *hclPolicy) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("failed to parse ACL rules: %w", errRulesParser)
		}
	}()
	file, err := hcl.Parse(text)
	if err != nil {
		return fmt.Errorf("failed to parse ACL rules: %w", err)
	}
	unknown := checkKnown(rootSchema, nil, file.Node, "")
	if err := hcl.DecodeObject(out, file); err != nil {
		return fmt.Errorf("failed to parse ACL rules: %w", err)
	}
	return unknown
}

// --- decoding: the shape of Consul's acl.PolicyRules (acl/policy.go) --------

type hclPolicyRules struct {
	ACL                   string        `hcl:"acl,expand"`
	Agents                []*hclRule    `hcl:"agent,expand"`
	AgentPrefixes         []*hclRule    `hcl:"agent_prefix,expand"`
	Keys                  []*hclRule    `hcl:"key,expand"`
	KeyPrefixes           []*hclRule    `hcl:"key_prefix,expand"`
	Nodes                 []*hclRule    `hcl:"node,expand"`
	NodePrefixes          []*hclRule    `hcl:"node_prefix,expand"`
	Services              []*hclService `hcl:"service,expand"`
	ServicePrefixes       []*hclService `hcl:"service_prefix,expand"`
	Sessions              []*hclRule    `hcl:"session,expand"`
	SessionPrefixes       []*hclRule    `hcl:"session_prefix,expand"`
	Events                []*hclRule    `hcl:"event,expand"`
	EventPrefixes         []*hclRule    `hcl:"event_prefix,expand"`
	PreparedQueries       []*hclRule    `hcl:"query,expand"`
	PreparedQueryPrefixes []*hclRule    `hcl:"query_prefix,expand"`
	Keyring               string        `hcl:"keyring"`
	Operator              string        `hcl:"operator"`
	Mesh                  string        `hcl:"mesh"`
	Peering               string        `hcl:"peering"`
}

type hclRule struct {
	Name   string `hcl:",key"`
	Policy string
}

type hclService struct {
	Name       string `hcl:",key"`
	Policy     string
	Intentions string
}

type hclNamespace struct {
	Name           string `hcl:",key"`
	Policy         string
	hclPolicyRules `hcl:",squash"`
}

type hclPartition struct {
	Name              string `hcl:",key"`
	Policy            string
	hclPolicyRules    `hcl:",squash"`
	Namespaces        []*hclNamespace `hcl:"namespace,expand"`
	NamespacePrefixes []*hclNamespace `hcl:"namespace_prefix,expand"`
}

type hclPolicy struct {
	hclPolicyRules    `hcl:",squash"`
	Namespaces        []*hclNamespace `hcl:"namespace,expand"`
	NamespacePrefixes []*hclNamespace `hcl:"namespace_prefix,expand"`
	Partitions        []*hclPartition `hcl:"partition,expand"`
	PartitionPrefixes []*hclPartition `hcl:"partition_prefix,expand"`
}

// resourceSpec describes one resource of the rules language.
type resourceSpec struct {
	family     int  // canonical group order
	prefix     bool // the *_prefix variant sorts after the exact one
	labelled   bool // `key "name" { policy = ... }` rather than `acl = ...`
	list       bool // accepts the list disposition
	intentions bool // accepts intentions
}

var resourceSpecs = map[string]resourceSpec{
	"key":            {family: 0, labelled: true, list: true},
	"key_prefix":     {family: 0, prefix: true, labelled: true, list: true},
	"session":        {family: 1, labelled: true},
	"session_prefix": {family: 1, prefix: true, labelled: true},
	"agent":          {family: 2, labelled: true},
	"agent_prefix":   {family: 2, prefix: true, labelled: true},
	"node":           {family: 3, labelled: true},
	"node_prefix":    {family: 3, prefix: true, labelled: true},
	"service":        {family: 4, labelled: true, intentions: true},
	"service_prefix": {family: 4, prefix: true, labelled: true, intentions: true},
	"query":          {family: 5, labelled: true},
	"query_prefix":   {family: 5, prefix: true, labelled: true},
	"event":          {family: 6, labelled: true},
	"event_prefix":   {family: 6, prefix: true, labelled: true},
	"acl":            {family: 7},
	"keyring":        {family: 8},
	"mesh":           {family: 9},
	"operator":       {family: 10},
	"peering":        {family: 11},
}

var scopeOrder = map[string]int{"namespace": 0, "namespace_prefix": 1, "partition": 2, "partition_prefix": 3}

type rawRule struct{ resource, name, policy, intentions string }

type rawScope struct {
	resource, name, policy string
	rules                  []rawRule
	scopes                 []*rawScope
}

// collect validates the rules of one body as Consul's PolicyRules.Validate
// does and appends them, in document order, to s.
func (pr *hclPolicyRules) collect(s *rawScope) error {
	labelled := []struct {
		resource string
		rules    []*hclRule
	}{
		{"agent", pr.Agents}, {"agent_prefix", pr.AgentPrefixes},
		{"key", pr.Keys}, {"key_prefix", pr.KeyPrefixes},
		{"node", pr.Nodes}, {"node_prefix", pr.NodePrefixes},
		{"session", pr.Sessions}, {"session_prefix", pr.SessionPrefixes},
		{"event", pr.Events}, {"event_prefix", pr.EventPrefixes},
		{"query", pr.PreparedQueries}, {"query_prefix", pr.PreparedQueryPrefixes},
	}
	for _, l := range labelled {
		for _, r := range l.rules {
			if err := checkDisposition(l.resource, r.Name, "policy", r.Policy, false); err != nil {
				return err
			}
			s.rules = append(s.rules, rawRule{resource: l.resource, name: r.Name, policy: r.Policy})
		}
	}
	for _, l := range []struct {
		resource string
		rules    []*hclService
	}{{"service", pr.Services}, {"service_prefix", pr.ServicePrefixes}} {
		for _, r := range l.rules {
			if err := checkDisposition(l.resource, r.Name, "policy", r.Policy, false); err != nil {
				return err
			}
			if err := checkDisposition(l.resource, r.Name, "intentions", r.Intentions, true); err != nil {
				return err
			}
			s.rules = append(s.rules, rawRule{resource: l.resource, name: r.Name, policy: r.Policy, intentions: r.Intentions})
		}
	}
	for _, sc := range []struct{ resource, policy string }{
		{"acl", pr.ACL}, {"keyring", pr.Keyring}, {"mesh", pr.Mesh}, {"operator", pr.Operator}, {"peering", pr.Peering},
	} {
		if sc.policy == "" {
			continue // allowed to be empty, like in Consul
		}
		if err := checkDisposition(sc.resource, "", "policy", sc.policy, false); err != nil {
			return err
		}
		s.rules = append(s.rules, rawRule{resource: sc.resource, policy: sc.policy})
	}
	return nil
}

func addScope(parent *rawScope, resource string, ns *hclNamespace) error {
	s := &rawScope{resource: resource, name: ns.Name, policy: ns.Policy}
	if err := checkScopePolicy(resource, ns.Name, ns.Policy); err != nil {
		return err
	}
	if err := ns.hclPolicyRules.collect(s); err != nil {
		return err
	}
	parent.scopes = append(parent.scopes, s)
	return nil
}

func addPartition(parent *rawScope, resource string, pt *hclPartition) error {
	s := &rawScope{resource: resource, name: pt.Name, policy: pt.Policy}
	if err := checkScopePolicy(resource, pt.Name, pt.Policy); err != nil {
		return err
	}
	if err := pt.hclPolicyRules.collect(s); err != nil {
		return err
	}
	for _, ns := range pt.Namespaces {
		if err := addScope(s, "namespace", ns); err != nil {
			return err
		}
	}
	for _, ns := range pt.NamespacePrefixes {
		if err := addScope(s, "namespace_prefix", ns); err != nil {
			return err
		}
	}
	parent.scopes = append(parent.scopes, s)
	return nil
}

func checkScopePolicy(resource, name, policy string) error {
	if policy == "" {
		return nil
	}
	return checkDisposition(resource, name, "policy", policy, false)
}

// checkDisposition mirrors Consul's isPolicyValid: case-insensitive, and
// list only where the resource allows it. optional allows "".
func checkDisposition(resource, name, attr, v string, optional bool) error {
	if v == "" && optional {
		return nil
	}
	allowList := resourceSpecs[resource].list
	switch strings.ToLower(v) {
	case ACLPolicyDeny, ACLPolicyRead, ACLPolicyWrite:
		return nil
	case ACLPolicyList:
		if allowList {
			return nil
		}
	}
	want := "read, write or deny"
	if allowList {
		want = "read, write, list or deny"
	}
	if _, scope := scopeOrder[resource]; scope || resourceSpecs[resource].labelled {
		return fmt.Errorf("invalid ACL rules: %s %q: %s %q is not allowed; want %s", resource, name, attr, v, want)
	}
	return fmt.Errorf("invalid ACL rules: %s %q is not allowed; want %s", resource, v, want)
}

// takesPrecedenceOver is Consul's acl.takesPrecedenceOver: it compares the
// dispositions as written (case-sensitive), exactly like the merge does.
func takesPrecedenceOver(a, b string) bool {
	for _, p := range []string{ACLPolicyDeny, ACLPolicyWrite, ACLPolicyList, ACLPolicyRead} {
		if a == p {
			return true
		}
		if b == p {
			return false
		}
	}
	return false
}

// mergeRules merges rules for the same resource and name like
// acl.MergePolicies, lower-cases the dispositions and sorts canonically.
func mergeRules(raw []rawRule) []Rule {
	idx := make(map[[2]string]int, len(raw))
	var merged []rawRule
	for _, r := range raw {
		k := [2]string{r.resource, r.name}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(merged)
			merged = append(merged, r)
			continue
		}
		if takesPrecedenceOver(r.policy, merged[i].policy) {
			merged[i].policy = r.policy
		}
		if takesPrecedenceOver(r.intentions, merged[i].intentions) {
			merged[i].intentions = r.intentions
		}
	}
	out := make([]Rule, len(merged))
	for i, r := range merged {
		out[i] = Rule{
			Resource:   r.resource,
			Name:       r.name,
			Policy:     strings.ToLower(r.policy),
			Intentions: strings.ToLower(r.intentions),
		}
	}
	sort.Slice(out, func(i, j int) bool { return ruleLess(out[i], out[j]) })
	return out
}

func dispositionRank(p string) int {
	switch p {
	case ACLPolicyWrite:
		return 0
	case ACLPolicyList:
		return 1
	case ACLPolicyRead:
		return 2
	default:
		return 3
	}
}

func ruleLess(a, b Rule) bool {
	sa, sb := resourceSpecs[a.Resource], resourceSpecs[b.Resource]
	if sa.family != sb.family {
		return sa.family < sb.family
	}
	if ra, rb := dispositionRank(a.Policy), dispositionRank(b.Policy); ra != rb {
		return ra < rb
	}
	if sa.prefix != sb.prefix {
		return !sa.prefix
	}
	return a.Name < b.Name
}

// build merges duplicate scopes (their policies by precedence, their rules
// like any rules), drops scopes that grant nothing and sorts.
func (s *rawScope) build() ParsedRules {
	p := ParsedRules{Rules: mergeRules(s.rules)}
	idx := make(map[[2]string]*rawScope)
	var merged []*rawScope
	for _, c := range s.scopes {
		k := [2]string{c.resource, c.name}
		m, ok := idx[k]
		if !ok {
			m = &rawScope{resource: c.resource, name: c.name, policy: c.policy}
			idx[k] = m
			merged = append(merged, m)
		} else if takesPrecedenceOver(c.policy, m.policy) {
			m.policy = c.policy
		}
		m.rules = append(m.rules, c.rules...)
		m.scopes = append(m.scopes, c.scopes...)
	}
	for _, m := range merged {
		sc := &Scope{Resource: m.resource, Name: m.name, Policy: strings.ToLower(m.policy), ParsedRules: m.build()}
		if sc.Policy == "" && len(sc.Rules) == 0 && len(sc.Scopes) == 0 {
			continue
		}
		p.Scopes = append(p.Scopes, sc)
	}
	sort.Slice(p.Scopes, func(i, j int) bool {
		a, b := p.Scopes[i], p.Scopes[j]
		if a.Resource != b.Resource {
			return scopeOrder[a.Resource] < scopeOrder[b.Resource]
		}
		return a.Name < b.Name
	})
	return p
}

// --- refusing what hcl.Decode would silently drop ---------------------------

// schema is a node of the rules language: a body of named attributes and
// blocks, or a labelled block whose label leads to a body, or a leaf value.
type schema struct {
	fields map[string]*schema // body
	label  *schema            // labelled: the body after the label
}

var rootSchema = func() *schema {
	leaf := &schema{}
	ruleBody := &schema{fields: map[string]*schema{"policy": leaf}}
	serviceBody := &schema{fields: map[string]*schema{"policy": leaf, "intentions": leaf}}
	rulesBody := func() *schema {
		b := &schema{fields: map[string]*schema{}}
		for name, spec := range resourceSpecs {
			switch {
			case spec.intentions:
				b.fields[name] = &schema{label: serviceBody}
			case spec.labelled:
				b.fields[name] = &schema{label: ruleBody}
			default:
				b.fields[name] = leaf
			}
		}
		return b
	}
	ns := rulesBody()
	ns.fields["policy"] = leaf
	part := rulesBody()
	part.fields["policy"] = leaf
	part.fields["namespace"] = &schema{label: ns}
	part.fields["namespace_prefix"] = &schema{label: ns}
	root := rulesBody()
	root.fields["namespace"] = &schema{label: ns}
	root.fields["namespace_prefix"] = &schema{label: ns}
	root.fields["partition"] = &schema{label: part}
	root.fields["partition_prefix"] = &schema{label: part}
	return root
}()

// checkKnown walks the item with the remaining keys and value val against s
// and reports the first attribute or block the schema does not know.
func checkKnown(s *schema, keys []*ast.ObjectKey, val ast.Node, path string) error {
	switch {
	case s.fields == nil && s.label == nil:
		return nil // leaf: hcl.Decode judges the value
	case len(keys) > 0 && s.label != nil:
		return checkKnown(s.label, keys[1:], val, path+"["+fmt.Sprint(keys[0].Token.Value())+"]")
	case len(keys) > 0:
		name, _ := keys[0].Token.Value().(string)
		for field, child := range s.fields {
			if strings.EqualFold(field, name) {
				return checkKnown(child, keys[1:], val, joinPath(path, field))
			}
		}
		return fmt.Errorf("unsupported ACL rules: %q is not an attribute consullock can compare; "+
			"Consul 1.14 ignores or does not know it", joinPath(path, name))
	}
	switch v := val.(type) {
	case *ast.ObjectList:
		for _, item := range v.Items {
			if err := checkKnown(s, item.Keys, item.Val, path); err != nil {
				return err
			}
		}
	case *ast.ObjectType:
		return checkKnown(s, nil, v.List, path)
	case *ast.ListType:
		for _, elem := range v.List {
			if err := checkKnown(s, nil, elem, path); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
