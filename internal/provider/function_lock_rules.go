package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/function"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

var _ function.Function = (*lockRulesFunction)(nil)

// NewLockRulesFunction is provider::consullock::lock_rules.
func NewLockRulesFunction() function.Function { return &lockRulesFunction{} }

type lockRulesFunction struct{}

// lockRulesFields are the attributes lock_rules accepts: the rule-shaping
// inputs of consullock_acl_policy, under the same names.
var lockRulesFields = []string{"lock_keys", "semaphore_prefixes", "session_node_prefixes", "read_keys", "agent_read", "run_ledgers", "holder_services", "queue_prefixes", "registry_prefix"}

func (f *lockRulesFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "lock_rules"
}

func (f *lockRulesFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "Least-privilege Consul ACL rules for lock holders",
		MarkdownDescription: "Returns the rules text `consullock_acl_policy` renders for the same inputs (one implementation), for " +
			"`consul_acl_policy`, Vault's Consul secrets engine or Nomad. The object takes `lock_keys`, " +
			"`semaphore_prefixes`, `session_node_prefixes` (required, at least one), `read_keys`, `run_ledgers`, " +
			"`holder_services`, `queue_prefixes` (lists of strings) and `agent_read` (bool), as on " +
			"`consullock_acl_policy`; omitted ones are empty. A function cannot see the provider's configuration: " +
			"give `registry_prefix` for `run_ledgers` when it is not `consul-lock`.",
		Parameters: []function.Parameter{
			function.DynamicParameter{
				Name:                "inputs",
				MarkdownDescription: "An object with the attributes of `consullock_acl_policy` that shape its rules.",
			},
		},
		Return: function.StringReturn{},
	}
}

func (f *lockRulesFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var arg types.Dynamic
	resp.Error = req.Arguments.Get(ctx, &arg)
	if resp.Error != nil {
		return
	}
	in, err := rulesInputFromDynamic(arg)
	if err == nil {
		err = in.ledgerKeys()
	}
	if err != nil {
		resp.Error = function.NewArgumentFuncError(0, "inputs: "+err.Error())
		return
	}
	if err := in.RulesInput.Validate(); err != nil {
		resp.Error = function.NewArgumentFuncError(0, "inputs: "+err.Error())
		return
	}
	resp.Error = resp.Result.Set(ctx, aclrules.RenderRules(in.RulesInput))
}

// lockRulesInput is lock_rules' argument: the rules input, and the run
// ledgers by lock name under a registry prefix.
type lockRulesInput struct {
	aclrules.RulesInput
	runLedgers     []string
	registryPrefix string
}

// ledgerKeys validates run_ledgers and registry_prefix and adds the
// ledgers' keys to the rules input.
func (in *lockRulesInput) ledgerKeys() error {
	prefix := lockmodel.DefaultRegistryPrefix
	if in.registryPrefix != "" {
		p, err := lockmodel.ValidateRegistryPrefix(in.registryPrefix)
		if err != nil {
			return err
		}
		prefix = p
	}
	for _, n := range in.runLedgers {
		if err := lockmodel.ValidateName("run_ledgers", n); err != nil {
			return err
		}
		in.RunLedgerKeys = append(in.RunLedgerKeys, record.RunLedgerKey(prefix, n))
	}
	return nil
}

// rulesInputFromDynamic reads an object (or map) of lockRulesFields.
func rulesInputFromDynamic(arg types.Dynamic) (lockRulesInput, error) {
	var in lockRulesInput
	if arg.IsNull() || arg.IsUnderlyingValueNull() {
		return in, fmt.Errorf("must be an object, not null")
	}
	var attrs map[string]attr.Value
	switch v := arg.UnderlyingValue().(type) {
	case types.Object:
		attrs = v.Attributes()
	case types.Map:
		attrs = v.Elements()
	default:
		return in, fmt.Errorf("must be an object with attributes %s, got %s", strings.Join(lockRulesFields, ", "), v.Type(context.Background()))
	}
	for name, v := range attrs {
		if v.IsNull() {
			continue
		}
		var err error
		switch name {
		case "lock_keys":
			in.LockKeys, err = stringsOf(name, v)
		case "semaphore_prefixes":
			in.SemaphorePrefixes, err = stringsOf(name, v)
		case "session_node_prefixes":
			in.SessionNodePrefixes, err = stringsOf(name, v)
		case "read_keys":
			in.ReadKeys, err = stringsOf(name, v)
		case "run_ledgers":
			in.runLedgers, err = stringsOf(name, v)
		case "holder_services":
			in.HolderServices, err = stringsOf(name, v)
		case "queue_prefixes":
			in.QueuePrefixes, err = stringsOf(name, v)
		case "registry_prefix":
			s, ok := v.(types.String)
			if !ok {
				err = fmt.Errorf("registry_prefix must be a string, got %s", v.Type(context.Background()))
			} else {
				in.registryPrefix = s.ValueString()
			}
		case "agent_read":
			b, ok := v.(types.Bool)
			if !ok {
				err = fmt.Errorf("agent_read must be a bool, got %s", v.Type(context.Background()))
			} else {
				in.AgentRead = b.ValueBool()
			}
		default:
			err = fmt.Errorf("unknown attribute %q; the attributes are %s", name, strings.Join(lockRulesFields, ", "))
		}
		if err != nil {
			return in, err
		}
	}
	return in, nil
}

// stringsOf reads a list, set or tuple of strings.
func stringsOf(name string, v attr.Value) ([]string, error) {
	var elems []attr.Value
	switch c := v.(type) {
	case types.List:
		elems = c.Elements()
	case types.Set:
		elems = c.Elements()
	case types.Tuple:
		elems = c.Elements()
	default:
		return nil, fmt.Errorf("%s must be a list of strings, got %s", name, v.Type(context.Background()))
	}
	out := make([]string, 0, len(elems))
	for _, e := range elems {
		s, ok := e.(types.String)
		if !ok || s.IsNull() {
			return nil, fmt.Errorf("%s must be a list of strings; it holds %s", name, e.String())
		}
		out = append(out, s.ValueString())
	}
	slices.Sort(out)
	return out, nil
}
