package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

var (
	_ resource.Resource                = (*aclPolicyResource)(nil)
	_ resource.ResourceWithConfigure   = (*aclPolicyResource)(nil)
	_ resource.ResourceWithImportState = (*aclPolicyResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*aclPolicyResource)(nil)
	_ validator.String                 = rulesValueValidator{}
)

// NewACLPolicyResource is the consullock_acl_policy resource.
func NewACLPolicyResource() resource.Resource {
	return &aclPolicyResource{}
}

type aclPolicyResource struct {
	data *providerData
}

// aclPolicyModel is consullock_acl_policy.
type aclPolicyModel struct {
	ID                  types.String `tfsdk:"id"`
	Name                types.String `tfsdk:"name"`
	Description         types.String `tfsdk:"description"`
	Datacenters         types.Set    `tfsdk:"datacenters"`
	LockKeys            types.Set    `tfsdk:"lock_keys"`
	SemaphorePrefixes   types.Set    `tfsdk:"semaphore_prefixes"`
	SessionNodePrefixes types.Set    `tfsdk:"session_node_prefixes"`
	ReadKeys            types.Set    `tfsdk:"read_keys"`
	AgentRead           types.Bool   `tfsdk:"agent_read"`
	RunLedgers          types.Set    `tfsdk:"run_ledgers"`
	HolderServices      types.Set    `tfsdk:"holder_services"`
	QueuePrefixes       types.Set    `tfsdk:"queue_prefixes"`
	Rules               aclRules     `tfsdk:"rules"`
	RegistryKey         types.String `tfsdk:"registry_key"`
}

// Compiled once: the framework asks for a schema more than once per
// process, and requests must not pay for regular expressions again.
var (
	namePatternRE       = regexp.MustCompile(lockmodel.NamePattern)
	datacenterPatternRE = regexp.MustCompile(record.DatacenterPattern)
	aclRoleNameRE       = regexp.MustCompile(aclRoleNamePattern)
)

// aclUUID matches Consul's ACL object IDs, to tell an import ID from a name.
var aclUUID = regexp.MustCompile(record.UUIDPattern)

// aclPolicyNameMessage completes "Attribute name ..." in the validator's error.
const aclPolicyNameMessage = "must be 1 to 128 letters, digits, '-' or '_' (Consul's rule for policy names: " + lockmodel.NamePattern + ")"

// tokenPolicyNameRE is a policy a token may name: a policy name, or
// Consul's builtin read-only policy, whose name has a "/" no other may.
var tokenPolicyNameRE = regexp.MustCompile(`^([A-Za-z0-9_-]{1,128}|builtin/global-read-only)$`)

const tokenPolicyNameMessage = "must be a policy name (1 to 128 letters, digits, '-' or '_') or builtin/global-read-only"

func (r *aclPolicyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_acl_policy"
}

func (r *aclPolicyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keyList := func(what string) schema.SetAttribute {
		return schema.SetAttribute{
			MarkdownDescription: what +
				" Each a [KV path](#behavior).",
			Optional:    true,
			ElementType: types.StringType,
		}
	}
	lockKeys := keyList("Keys the holders acquire: `key \"<k>\" { policy = \"write\" }` on each. " +
		"For a `consullock_lock` (and `consul lock <prefix>`) this is `<prefix>/.lock`.")
	lockKeys.Validators = []validator.Set{setvalidator.ValueStringsAre(rulesValueValidator{field: "lock_keys"})}
	semaphores := keyList("Semaphore prefixes: `key_prefix \"<p>/\" { policy = \"write\" }` on each, which covers " +
		"the semaphore's `<p>/.lock` and the holders' contender keys `<p>/<session>` (`consul lock -n N <p>`).")
	semaphores.Validators = []validator.Set{setvalidator.ValueStringsAre(rulesValueValidator{field: "semaphore_prefixes"})}
	readKeys := keyList("Keys to read: `key \"<k>\" { policy = \"read\" }` on each, for example the declaration " +
		"records under the registry prefix. A key also listed in `lock_keys` gets write.")
	readKeys.Validators = []validator.Set{setvalidator.ValueStringsAre(rulesValueValidator{field: "read_keys"})}
	queues := keyList("Prefixes of locks declared with `waiters = \"queue\"` or `\"handoff\"`: `key_prefix \"<p>/.queue/\" { policy = \"write\" }` " +
		"on each, the folder where each waiting `consullock run` keeps its queue entry `<p>/.queue/<session>`. It grants " +
		"nothing else under the prefix: the lock key itself is in `lock_keys`.")
	queues.Validators = []validator.Set{setvalidator.ValueStringsAre(rulesValueValidator{field: "queue_prefixes"})}

	resp.Schema = schema.Schema{
		MarkdownDescription: "A least-privilege Consul ACL policy for lock holders, rendered from lock inputs. " +
			"The canonical `rules` are computed at plan time, so a plan review shows exactly what is granted. " +
			"Live rules are compared semantically: formatting, comments, ordering and HCL-vs-JSON differences are " +
			"not drift; any change in what is granted is, and apply puts the declared rules back. The declaration " +
			"(policy ID and canonical rules) is recorded at `<registry_prefix>/acl-policies/<name>`.",
		Attributes: withAttributes(map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "The Consul policy ID.",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				MarkdownDescription: "Policy name: 1 to 128 letters, digits, `-` or `_` (`" + lockmodel.NamePattern + "`), unique in the cluster.",
				Required:            true,
				Validators: []validator.String{
					stringvalidator.RegexMatches(namePatternRE, aclPolicyNameMessage),
				},
			},
			"description": schema.StringAttribute{
				MarkdownDescription: "Policy description. Default `\"\"`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(""),
			},
			"datacenters": schema.SetAttribute{
				MarkdownDescription: "Datacenters the policy is valid in. Default: all.",
				Optional:            true,
				ElementType:         types.StringType,
				Validators: []validator.Set{setvalidator.ValueStringsAre(stringvalidator.RegexMatches(
					datacenterPatternRE, "must be a datacenter name of 1 to 64 lower-case letters, digits, '-' or '_'"))},
			},
			"lock_keys":          lockKeys,
			"semaphore_prefixes": semaphores,
			"read_keys":          readKeys,
			"queue_prefixes":     queues,
			"rules": schema.StringAttribute{
				MarkdownDescription: "The canonical HCL rules, known at plan. After a refresh, the live rules when they grant something " +
					"else (the plan shows the drift).",
				Computed:   true,
				CustomType: aclRulesType{},
			},
			"registry_key": schema.StringAttribute{
				MarkdownDescription: "KV key of the declaration record (`<registry_prefix>/acl-policies/<name>`) that the controller reads.",
				Computed:            true,
			},
		}, policyGrantAttributes()),
	}
}

// policyGrantAttributes are the inputs that grant sessions, run ledgers, holder services and agent reads.
func policyGrantAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"session_node_prefixes": schema.SetAttribute{
			MarkdownDescription: "Node-name prefixes where holders create their sessions: `session_prefix \"<n>\" { policy = \"write\" }` " +
				"on each. Consul session rules match the **node** a session is created on, not the session's name. " +
				"`\"\"` means any node and earns a plan warning.",
			Required:    true,
			ElementType: types.StringType,
			Validators: []validator.Set{
				setvalidator.SizeAtLeast(1),
				setvalidator.ValueStringsAre(rulesValueValidator{field: "session_node_prefixes"}),
			},
		},
		"run_ledgers": runLedgersSchemaAttribute(),
		"holder_services": schema.SetAttribute{
			MarkdownDescription: "Holder service names (`consullock_lock`'s `holder_service.name`): `service \"<name>\" { policy = " +
				"\"write\" }` on each, all a holder needs to register, check and deregister its instance. Also grants " +
				"`node_prefix \"<p>\" { policy = \"read\" }` on each `session_node_prefixes` entry, so an agentless " +
				"runner can list (and remove) former holders' instances on its node. No node write.",
			Optional:    true,
			ElementType: types.StringType,
			Validators: []validator.Set{setvalidator.ValueStringsAre(domainStringRule{
				check: holdersvc.ValidateName, what: allowedText(holdersvc.ValidateName("holder_services", "")),
			})},
		},
		"agent_read": schema.BoolAttribute{
			MarkdownDescription: "Grant `agent_prefix \"\" { policy = \"read\" }`, which only `consul lock` needs (to learn its node " +
				"name). Default `false`.",
			Optional: true,
			Computed: true,
			Default:  booldefault.StaticBool(false),
		},
	}
}

func (r *aclPolicyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

// rulesInput converts the rule-shaping attributes; known is false while any
// of them is unknown (then the rules are unknown at plan time too).
func (m aclPolicyModel) rulesInput(ctx context.Context, diags *diag.Diagnostics) (in aclrules.RulesInput, known bool) {
	for _, s := range []types.Set{m.LockKeys, m.SemaphorePrefixes, m.SessionNodePrefixes, m.ReadKeys, m.HolderServices, m.QueuePrefixes} {
		if s.IsUnknown() || slices.ContainsFunc(s.Elements(), func(v attr.Value) bool { return v.IsUnknown() }) {
			return in, false
		}
	}
	if m.AgentRead.IsUnknown() {
		return in, false
	}
	in.LockKeys = aclSetStrings(ctx, m.LockKeys, diags)
	in.SemaphorePrefixes = aclSetStrings(ctx, m.SemaphorePrefixes, diags)
	in.SessionNodePrefixes = aclSetStrings(ctx, m.SessionNodePrefixes, diags)
	in.ReadKeys = aclSetStrings(ctx, m.ReadKeys, diags)
	in.AgentRead = m.AgentRead.ValueBool()
	in.HolderServices = aclSetStrings(ctx, m.HolderServices, diags)
	in.QueuePrefixes = aclSetStrings(ctx, m.QueuePrefixes, diags)
	return in, true
}

// setRulesInput puts in back into the model, for import; empty lists
// become null, as an omitted attribute is.
func (m *aclPolicyModel) setRulesInput(in aclrules.RulesInput) {
	m.LockKeys = aclStringSet(in.LockKeys)
	m.SemaphorePrefixes = aclStringSet(in.SemaphorePrefixes)
	m.SessionNodePrefixes = aclStringSet(in.SessionNodePrefixes)
	m.ReadKeys = aclStringSet(in.ReadKeys)
	m.AgentRead = types.BoolValue(in.AgentRead)
	m.HolderServices = aclStringSet(in.HolderServices)
	m.QueuePrefixes = aclStringSet(in.QueuePrefixes)
}

// spec is the declaration record of m, with rules the canonical rules.
func (m aclPolicyModel) spec(ctx context.Context, rules string, diags *diag.Diagnostics) record.ACLPolicySpec {
	return record.ACLPolicySpec{
		Name:        m.Name.ValueString(),
		ID:          m.ID.ValueString(),
		Rules:       rules,
		Datacenters: aclSetStrings(ctx, m.Datacenters, diags),
		Description: m.Description.ValueString(),
	}
}

// policy is the Consul policy of m, with rules the canonical rules.
func (m aclPolicyModel) policy(ctx context.Context, rules string, diags *diag.Diagnostics) *api.ACLPolicy {
	return &api.ACLPolicy{
		ID:          m.ID.ValueString(),
		Name:        m.Name.ValueString(),
		Description: m.Description.ValueString(),
		Rules:       rules,
		Datacenters: aclSetStrings(ctx, m.Datacenters, diags),
	}
}

// ModifyPlan renders the canonical rules and the registry key into the plan
// and gives lockmodel's advice on the inputs.
func (r *aclPolicyResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan aclPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var state *aclPolicyModel
	if !req.State.Raw.IsNull() {
		state = &aclPolicyModel{}
		resp.Diagnostics.Append(req.State.Get(ctx, state)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}

	in, known := r.rulesInput(ctx, plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	if known {
		if err := in.Validate(); err != nil {
			addFieldErrors(&resp.Diagnostics, "Invalid ACL Policy Input", err)
			return
		}
		canonical := aclrules.RenderRules(in)
		plan.Rules = newACLRulesValue(canonical)
		if state != nil && !state.Rules.IsNull() && !state.Rules.IsUnknown() {
			if rulesEquivalent(state.Rules.ValueString(), canonical) {
				// Same grants in other words (an imported policy): no change.
				plan.Rules = state.Rules
			} else {
				addWarnings(&resp.Diagnostics, aclrules.SessionRuleWarnings(state.Rules.ValueString()))
			}
		}
		addWarnings(&resp.Diagnostics, r.inputWarnings(ctx, in))
	}
	if !plan.Name.IsUnknown() && r.data != nil {
		plan.RegistryKey = types.StringValue(lockmodel.RegistryKey(r.data.registryPrefix, lockmodel.KindACLPolicy, plan.Name.ValueString()))
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// inputWarnings is lockmodel's advice on in, checked against the declared
// locks when the registry can be read (one list request).
func (r *aclPolicyResource) inputWarnings(ctx context.Context, in aclrules.RulesInput) []validation.Warning {
	var lockPrefixes, lockNames []string
	if r.data != nil {
		recs, _, err := store.New(r.data.client).Registry(r.data.registryPrefix).List(ctx, lockmodel.KindLock)
		if err != nil {
			tflog.Debug(ctx, "cannot list declared locks; skipping the lock key check", map[string]any{"error": err.Error()})
		}
		for _, rec := range recs {
			l, err := record.DecodeLockRecord(rec.Value)
			if err != nil {
				continue
			}
			lockPrefixes = append(lockPrefixes, l.Prefix, l.Key)
			lockNames = append(lockNames, l.Name)
		}
	}
	// With no lock declared, every key would be "outside the declared locks":
	// say nothing rather than something useless. The locks this plan
	// declares count as declared.
	if lockPrefixes != nil && r.data != nil {
		names, paths := r.data.planned.locks()
		lockPrefixes, lockNames = append(lockPrefixes, paths...), append(lockNames, names...)
	}
	ws := in.Warnings(lockPrefixes)
	return append(ws, aclrules.SessionNodePrefixWarnings(in.SessionNodePrefixes, lockNames)...)
}

func (r *aclPolicyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan aclPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	canonical := r.canonicalRules(ctx, plan, &resp.Diagnostics)
	policy := plan.policy(ctx, canonical, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	created, err := store.New(r.data.client).CreateACLPolicy(ctx, policy)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Create ACL Policy", err)
		return
	}
	tflog.Info(ctx, "created ACL policy", map[string]any{"name": created.Name, "id": created.ID})
	plan.ID = types.StringValue(created.ID)
	key, err := r.writeRecord(ctx, plan.spec(ctx, canonical, &resp.Diagnostics), true)
	if err != nil {
		// Do not leave a policy behind that no state knows about.
		if derr := store.New(r.data.client).DeleteACLPolicy(ctx, created.ID); derr != nil {
			resp.Diagnostics.AddError("Cannot Remove ACL Policy After Failure",
				fmt.Sprintf("The policy %q (%s) was created, but its declaration record could not be written and the policy could not be deleted again. Delete it by hand before the next apply.\n\n%s", created.Name, created.ID, derr))
		}
		addConsulError(&resp.Diagnostics, "Cannot Record ACL Policy Declaration", err)
		return
	}
	plan.RegistryKey = types.StringValue(key)
	plan.Rules = rulesForState(plan.Rules, canonical)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *aclPolicyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state aclPolicyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	what := fmt.Sprintf("consullock_acl_policy %q", state.Name.ValueString())
	live, err := store.New(r.data.client).ACLPolicy(ctx, state.ID.ValueString())
	if err != nil {
		if consul.KindOf(err) == consul.KindNotFound {
			tflog.Info(ctx, "ACL policy is gone; removing it from state", map[string]any{"id": state.ID.ValueString()})
			resp.State.RemoveResource(ctx)
			return
		}
		addACLReadError(&resp.Diagnostics, what, "Cannot Read ACL Policy", err)
		return
	}

	importing := state.SessionNodePrefixes.IsNull()
	state.ID = types.StringValue(live.ID)
	state.Name = types.StringValue(live.Name)
	state.Description = types.StringValue(live.Description)
	state.Datacenters = liveDatacenters(state.Datacenters, live.Datacenters)
	if importing {
		in, exact, err := aclrules.RulesInputFromRules(live.Rules)
		in = in.SplitRunLedgers(r.data.registryPrefix)
		if err != nil || !exact {
			resp.Diagnostics.AddWarning("Imported Rules Not Expressible",
				fmt.Sprintf("The rules of ACL policy %q grant more or other than consullock_acl_policy renders "+
					"(key write, key_prefix write, key read, session_prefix write, agent_prefix \"\" read, service write). "+
					"The inputs were read back as far as possible; the next plan shows the rules being replaced by those the configuration renders.", live.Name))
		}
		state.setRulesInput(in)
		state.RunLedgers = runLedgerNames(r.data.registryPrefix, in)
	}
	// Same grants in other words is not drift: keep the text in state.
	if state.Rules.IsNull() || state.Rules.IsUnknown() || !rulesEquivalent(state.Rules.ValueString(), live.Rules) {
		state.Rules = newACLRulesValue(live.Rules)
	}

	// The declaration record must say what this policy is meant to be; if it
	// is missing or says something else, a null registry_key makes the plan
	// rewrite it.
	in, _ := r.rulesInput(ctx, state, &resp.Diagnostics)
	desired := state.spec(ctx, aclrules.RenderRules(in), &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	upToDate, key, err := r.recordUpToDate(ctx, desired)
	if err != nil {
		addACLReadError(&resp.Diagnostics, what, "Cannot Read ACL Policy Declaration", err)
		return
	}
	if upToDate {
		state.RegistryKey = types.StringValue(key)
	} else {
		state.RegistryKey = types.StringNull()
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *aclPolicyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan, state aclPolicyModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.ID = state.ID
	canonical := r.canonicalRules(ctx, plan, &resp.Diagnostics)
	policy := plan.policy(ctx, canonical, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	// The declaration first, then the policy: a controller watching sees
	// the new declaration before the new rules, never new rules that its
	// declaration calls drift (it would put the old ones back).
	key, err := r.writeRecord(ctx, plan.spec(ctx, canonical, &resp.Diagnostics), false)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Record ACL Policy Declaration", err)
		return
	}
	if oldName := state.Name.ValueString(); oldName != plan.Name.ValueString() {
		if err := r.deleteRecord(ctx, oldName, state.ID.ValueString()); err != nil {
			addConsulError(&resp.Diagnostics, "Cannot Remove Old ACL Policy Declaration", err)
			return
		}
	}
	updated, err := store.New(r.data.client).UpdateACLPolicy(ctx, policy)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Update ACL Policy", err)
		return
	}
	tflog.Info(ctx, "updated ACL policy", map[string]any{"name": updated.Name, "id": updated.ID})
	plan.RegistryKey = types.StringValue(key)
	plan.Rules = rulesForState(plan.Rules, canonical)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *aclPolicyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state aclPolicyModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// The record first: the controller must not restore a policy that is
	// being destroyed.
	if err := r.deleteRecord(ctx, state.Name.ValueString(), state.ID.ValueString()); err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Remove ACL Policy Declaration", err)
		return
	}
	if err := store.New(r.data.client).DeleteACLPolicy(ctx, state.ID.ValueString()); err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Delete ACL Policy", err)
		return
	}
	tflog.Info(ctx, "deleted ACL policy", map[string]any{"name": state.Name.ValueString(), "id": state.ID.ValueString()})
}

// ImportState accepts a policy name or a policy ID.
func (r *aclPolicyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var (
		live *api.ACLPolicy
		err  error
	)
	switch {
	case aclUUID.MatchString(req.ID):
		live, err = store.New(r.data.client).ACLPolicy(ctx, req.ID)
	case lockmodel.ValidateName("name", req.ID) == nil:
		live, err = store.New(r.data.client).ACLPolicyByName(ctx, req.ID)
	default:
		resp.Diagnostics.AddError("Invalid Import ID",
			fmt.Sprintf("%q is neither a policy name (%s) nor a policy ID (a UUID). Import a consullock_acl_policy by its name or its ID.", req.ID, lockmodel.NamePattern))
		return
	}
	if err != nil {
		if consul.KindOf(err) == consul.KindNotFound {
			resp.Diagnostics.AddError("ACL Policy Not Found",
				fmt.Sprintf("Consul has no ACL policy with the name or ID %q. Check the import ID and the datacenter.", req.ID))
			return
		}
		addConsulError(&resp.Diagnostics, "Cannot Import ACL Policy", err)
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), live.ID)...)
}

// canonicalRules renders the rules of m, which are known at apply.
func (r *aclPolicyResource) canonicalRules(ctx context.Context, m aclPolicyModel, diags *diag.Diagnostics) string {
	in, known := r.rulesInput(ctx, m, diags)
	if !known {
		diags.AddError("Unknown ACL Policy Input", "An input that shapes the rules is still unknown at apply. This is a bug in the provider; please report it.")
		return ""
	}
	if err := in.Validate(); err != nil {
		addFieldErrors(diags, "Invalid ACL Policy Input", err)
		return ""
	}
	return aclrules.RenderRules(in)
}

// rulesForState keeps the planned text when it grants the same as canonical
// (the framework requires the planned value back), else canonical.
func rulesForState(planned aclRules, canonical string) aclRules {
	if !planned.IsNull() && !planned.IsUnknown() && rulesEquivalent(planned.ValueString(), canonical) {
		return planned
	}
	return newACLRulesValue(canonical)
}

// writeRecord writes the declaration record of spec with check-and-set
// against what it read, and returns its key. A record that already says
// the same is left alone. creating tries a create-only write first.
func (r *aclPolicyResource) writeRecord(ctx context.Context, spec record.ACLPolicySpec, creating bool) (string, error) {
	data, err := record.EncodeACLPolicyRecord(spec)
	if err != nil {
		return "", err
	}
	reg := store.New(r.data.client).Registry(r.data.registryPrefix)
	if creating {
		// A new policy's record is usually new too: write it create-only,
		// and read what is there only when that loses.
		var conflict *store.ErrConflict
		_, err := reg.Put(ctx, lockmodel.KindACLPolicy, spec.Name, data, 0)
		if !errors.As(err, &conflict) {
			return reg.Key(lockmodel.KindACLPolicy, spec.Name), err
		}
	}
	rec, found, err := reg.Get(ctx, lockmodel.KindACLPolicy, spec.Name)
	if err != nil {
		return "", err
	}
	if found && bytes.Equal(rec.Value, data) {
		return rec.Key, nil
	}
	// Consul policy names are unique, so a record under this name that
	// names another policy ID is stale: replace it, but only the version
	// read (CAS), never one written concurrently.
	var index uint64
	if found {
		index = rec.ModifyIndex
	}
	if _, err := reg.Put(ctx, lockmodel.KindACLPolicy, spec.Name, data, index); err != nil {
		return "", err
	}
	return reg.Key(lockmodel.KindACLPolicy, spec.Name), nil
}

// deleteRecord removes the declaration record of the policy name with ID id
// (CAS); a record that names another policy is left alone.
func (r *aclPolicyResource) deleteRecord(ctx context.Context, name, id string) error {
	reg := store.New(r.data.client).Registry(r.data.registryPrefix)
	rec, found, err := reg.Get(ctx, lockmodel.KindACLPolicy, name)
	if err != nil || !found {
		return err
	}
	if spec, err := record.DecodeACLPolicyRecord(rec.Value); err == nil && spec.ID != "" && spec.ID != id {
		tflog.Warn(ctx, "leaving a declaration record that names another policy", map[string]any{"key": rec.Key, "record_id": spec.ID, "id": id})
		return nil
	}
	return reg.Delete(ctx, lockmodel.KindACLPolicy, name, rec.ModifyIndex)
}

// recordUpToDate reports whether the declaration record says desired.
func (r *aclPolicyResource) recordUpToDate(ctx context.Context, desired record.ACLPolicySpec) (bool, string, error) {
	key := lockmodel.RegistryKey(r.data.registryPrefix, lockmodel.KindACLPolicy, desired.Name)
	rec, err := store.New(r.data.client).ReadRecord(ctx, key)
	if err != nil || rec == nil {
		return false, key, err
	}
	got, decodeErr := record.DecodeACLPolicyRecord(rec.Value)
	if errors.Is(decodeErr, record.ErrNewerSchema) {
		return true, rec.Key, nil // a newer consullock owns the format: do not downgrade it
	}
	// An unreadable record is out of date: apply rewrites it.
	same := decodeErr == nil && got.ID == desired.ID && got.Name == desired.Name && got.Rules == desired.Rules &&
		got.Description == desired.Description && slices.Equal(aclSortedCopy(got.Datacenters), aclSortedCopy(desired.Datacenters))
	return same, rec.Key, nil
}

// liveDatacenters is the datacenters attribute for what Consul returned:
// none stays as the configuration wrote it (null or []).
func liveDatacenters(prior types.Set, live []string) types.Set {
	if len(live) == 0 {
		if !prior.IsNull() && !prior.IsUnknown() && len(prior.Elements()) == 0 {
			return prior
		}
		return types.SetNull(types.StringType)
	}
	return aclStringSet(live)
}

// rulesValueValidator checks each element of a rules input list with
// lockmodel, so the provider, the controller and the runner refuse the same
// keys with the same words.
type rulesValueValidator struct{ field string }

func (v rulesValueValidator) Description(context.Context) string {
	if v.field == "session_node_prefixes" {
		return "must be \"\" (any node) or a node-name prefix of letters, digits, '-', '_' and '.'"
	}
	return "must be a KV path of letters, digits, '-', '_', '.', ':', '@' or '+' in segments separated by '/'"
}

func (v rulesValueValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v rulesValueValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := aclrules.ValidateRulesValue(v.field, req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+aclFieldTitle(v.field), err.Error()+".")
	}
}

func aclFieldTitle(field string) string {
	switch field {
	case "lock_keys":
		return "Lock Key"
	case "semaphore_prefixes":
		return "Semaphore Prefix"
	case "read_keys":
		return "Read Key"
	case "queue_prefixes":
		return "Queue Prefix"
	default:
		return "Session Node Prefix"
	}
}

// addACLReadError reports a failed refresh of what (not the "gone" case,
// which the caller handles). When the provider's own token is not accepted,
// state is kept: "ACL not found" from Consul then says nothing about the
// object.
func addACLReadError(diags *diag.Diagnostics, what, summary string, err error) {
	if consul.KindOf(err) != consul.KindInvalidToken {
		addConsulError(diags, summary, err)
		return
	}
	diags.AddError("Invalid Or Expired Consul Token",
		fmt.Sprintf("Cannot refresh %s: the provider's token is invalid or expired, so Consul's 403 \"ACL not found\" "+
			"says nothing about the object. Nothing was removed from state. Configure a valid token (token, token_file "+
			"or CONSUL_HTTP_TOKEN) and run again.\n\n%s", what, err))
}

// aclSetStrings returns the elements of a set of strings, sorted; nil for
// a null or empty set.
func aclSetStrings(ctx context.Context, s types.Set, diags *diag.Diagnostics) []string {
	if s.IsNull() || s.IsUnknown() {
		return nil
	}
	var out []string
	diags.Append(s.ElementsAs(ctx, &out, false)...)
	slices.Sort(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// aclStringSet is a set of values; null when there are none.
func aclStringSet(values []string) types.Set {
	if len(values) == 0 {
		return types.SetNull(types.StringType)
	}
	elems := make([]attr.Value, 0, len(values))
	for _, v := range values {
		elems = append(elems, types.StringValue(v))
	}
	set, _ := types.SetValue(types.StringType, elems)
	return set
}

func aclSortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
