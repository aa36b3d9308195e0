package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

var (
	_ resource.Resource                = (*aclTokenResource)(nil)
	_ resource.ResourceWithConfigure   = (*aclTokenResource)(nil)
	_ resource.ResourceWithImportState = (*aclTokenResource)(nil)
	_ planmodifier.String              = sameDurationUsesState{}
)

// Token expiration limits of a Consul server with default settings
// (acl.token_min_expiration_ttl and acl.token_max_expiration_ttl, consul
// agent/config/default.go).
// aclRoleNamePattern is Consul's role name rule (consul
// agent/consul/acl_endpoint.go, validRoleName).
const aclRoleNamePattern = `^[A-Za-z0-9\-_]{1,256}$`

const (
	minTokenExpirationTTL = time.Minute
	maxTokenExpirationTTL = 24 * time.Hour
)

// NewACLTokenResource is the consullock_acl_token resource.
func NewACLTokenResource() resource.Resource {
	return &aclTokenResource{}
}

type aclTokenResource struct {
	data *providerData
}

// aclTokenModel is consullock_acl_token.
type aclTokenModel struct {
	ID                types.String         `tfsdk:"id"`
	AccessorID        types.String         `tfsdk:"accessor_id"`
	SecretID          types.String         `tfsdk:"secret_id"`
	Description       types.String         `tfsdk:"description"`
	Policies          types.Set            `tfsdk:"policies"`
	Roles             types.Set            `tfsdk:"roles"`
	ServiceIdentities types.Set            `tfsdk:"service_identities"`
	NodeIdentities    types.Set            `tfsdk:"node_identities"`
	Local             types.Bool           `tfsdk:"local"`
	ExpirationTTL     timetypes.GoDuration `tfsdk:"expiration_ttl"`
	ExpirationTime    timetypes.RFC3339    `tfsdk:"expiration_time"`
	SecretIDWO        types.String         `tfsdk:"secret_id_wo"`
	SecretIDWOVersion types.Int64          `tfsdk:"secret_id_wo_version"`
}

// serviceIdentityModel is one element of service_identities.
type serviceIdentityModel struct {
	ServiceName types.String `tfsdk:"service_name"`
	Datacenters types.Set    `tfsdk:"datacenters"`
}

var serviceIdentityType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"service_name": types.StringType,
	"datacenters":  types.SetType{ElemType: types.StringType},
}}

// nodeIdentityModel is one element of node_identities.
type nodeIdentityModel struct {
	NodeName   types.String `tfsdk:"node_name"`
	Datacenter types.String `tfsdk:"datacenter"`
}

var nodeIdentityType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"node_name":  types.StringType,
	"datacenter": types.StringType,
}}

func (r *aclTokenResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_acl_token"
}

func (r *aclTokenResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A Consul ACL token holding policies and roles by name, service identities and node identities, typically a " +
			"`consullock_acl_policy` for lock holders. What the token holds is exactly what is declared: anything added to it outside " +
			"OpenTofu shows in the plan as a change and is removed by apply. " +
			"The secret is sensitive: it is kept out of plan output, logs and error messages, but it is stored in state, " +
			"so protect the state as you protect the token, or set the secret with the write-only `secret_id_wo`, " +
			"or use the ephemeral `consullock_acl_token`, neither of which is stored.",
		Attributes: withAttributes(map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "The token's accessor ID (same as `accessor_id`).",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"accessor_id": schema.StringAttribute{
				MarkdownDescription: "The token's accessor ID, its public identifier.",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"secret_id": schema.StringAttribute{
				MarkdownDescription: "The token's secret, what clients send as `X-Consul-Token` or `CONSUL_HTTP_TOKEN`. Null when `secret_id_wo` set it.",
				Computed:            true,
				Sensitive:           true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"description": schema.StringAttribute{
				MarkdownDescription: "Token description. Default `\"\"`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(""),
			},
			"policies": schema.SetAttribute{
				MarkdownDescription: "Names of the ACL policies the token holds, or `builtin/global-read-only`.",
				Optional:            true,
				ElementType:         types.StringType,
				Validators: []validator.Set{setvalidator.ValueStringsAre(
					stringvalidator.RegexMatches(tokenPolicyNameRE, tokenPolicyNameMessage))},
			},
			"roles": schema.SetAttribute{
				MarkdownDescription: "Names of the ACL roles the token holds.",
				Optional:            true,
				ElementType:         types.StringType,
				Validators: []validator.Set{setvalidator.ValueStringsAre(
					stringvalidator.RegexMatches(aclRoleNameRE, "must be 1 to 256 letters, digits, '-' or '_' (Consul's role name rule)"))},
			},
			"secret_id_wo":         secretIDWOAttribute,
			"secret_id_wo_version": secretIDWOVersionAttribute,
		}, tokenIdentityAttributes(), tokenLifetimeAttributes()),
	}
}

// tokenIdentityAttributes are the service and node identities the token is linked to.
func tokenIdentityAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"service_identities": schema.SetNestedAttribute{
			MarkdownDescription: "Service identities the token holds: the privileges to register and discover a service, " +
				"as Consul grants them for `service_name`.",
			Optional: true,
			NestedObject: schema.NestedAttributeObject{
				Attributes: map[string]schema.Attribute{
					"service_name": schema.StringAttribute{
						MarkdownDescription: "The service's name.",
						Required:            true,
						Validators:          []validator.String{stringvalidator.LengthBetween(1, 256)},
					},
					"datacenters": schema.SetAttribute{
						MarkdownDescription: "Datacenters where the identity is valid. Default: all.",
						Optional:            true,
						ElementType:         types.StringType,
						Validators:          []validator.Set{setvalidator.SizeAtLeast(1)},
					},
				},
			},
		},
		"node_identities": schema.SetNestedAttribute{
			MarkdownDescription: "Node identities the token holds: the privileges of a Consul agent on `node_name` in `datacenter`.",
			Optional:            true,
			NestedObject: schema.NestedAttributeObject{
				Attributes: map[string]schema.Attribute{
					"node_name": schema.StringAttribute{
						MarkdownDescription: "The node's name.",
						Required:            true,
						Validators:          []validator.String{stringvalidator.LengthBetween(1, 256)},
					},
					"datacenter": schema.StringAttribute{
						MarkdownDescription: "The node's datacenter.",
						Required:            true,
						Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
					},
				},
			},
		},
	}
}

// tokenLifetimeAttributes say where the token lives and until when.
func tokenLifetimeAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"local": schema.BoolAttribute{
			MarkdownDescription: "Make the token valid only in the datacenter it is created in. Changing it replaces the token. Default `false`.",
			Optional:            true,
			Computed:            true,
			Default:             booldefault.StaticBool(false),
			PlanModifiers:       []planmodifier.Bool{boolplanmodifier.RequiresReplace()},
		},
		"expiration_ttl": schema.StringAttribute{
			MarkdownDescription: fmt.Sprintf("Lifetime of the token from its creation, a Go duration from `%s` to `%s` "+
				"(Consul's default limits). Changing it replaces the token. Default: never expires.",
				minTokenExpirationTTL, maxTokenExpirationTTL),
			Optional:   true,
			CustomType: timetypes.GoDurationType{},
			Validators: []validator.String{durationBetween(minTokenExpirationTTL, maxTokenExpirationTTL)},
			PlanModifiers: []planmodifier.String{
				sameDurationUsesState{},
				stringplanmodifier.RequiresReplace(),
			},
		},
		"expiration_time": schema.StringAttribute{
			MarkdownDescription: "When the token expires (RFC 3339), if it has an `expiration_ttl`.",
			Computed:            true,
			CustomType:          timetypes.RFC3339Type{},
			PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
	}
}

func (r *aclTokenResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *aclTokenResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan aclTokenModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tok := &api.ACLToken{
		Description: plan.Description.ValueString(),
		Local:       plan.Local.ValueBool(),
	}
	plan.holdings(ctx, &resp.Diagnostics).into(tok)
	tok.SecretID = writeOnlySecret(ctx, req.Config, &resp.Diagnostics)
	if !plan.ExpirationTTL.IsNull() {
		ttl, diags := plan.ExpirationTTL.ValueGoDuration()
		resp.Diagnostics.Append(diags...)
		tok.ExpirationTTL = ttl
	}
	if resp.Diagnostics.HasError() {
		return
	}
	created, err := store.New(r.data.client).CreateACLToken(ctx, tok)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Create ACL Token", err)
		return
	}
	tflog.Info(ctx, "created ACL token", map[string]any{"accessor_id": created.AccessorID})
	plan.fromLive(ctx, created, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *aclTokenResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state aclTokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	live, err := store.New(r.data.client).ACLToken(ctx, state.AccessorID.ValueString())
	if err != nil {
		if consul.KindOf(err) == consul.KindNotFound {
			tflog.Info(ctx, "ACL token is gone (deleted or expired); removing it from state", map[string]any{"accessor_id": state.AccessorID.ValueString()})
			resp.State.RemoveResource(ctx)
			return
		}
		addACLReadError(&resp.Diagnostics, "consullock_acl_token "+state.AccessorID.ValueString(), "Cannot Read ACL Token", err)
		return
	}
	if state.ExpirationTTL.IsNull() && live.ExpirationTime != nil && !live.CreateTime.IsZero() {
		// Import: the TTL is what separates creation and expiry.
		state.ExpirationTTL = timetypes.NewGoDurationValue(live.ExpirationTime.Sub(live.CreateTime))
	}
	if len(live.TemplatedPolicies) > 0 {
		resp.Diagnostics.AddWarning("ACL Token Holds Templated Policies",
			fmt.Sprintf("Token %s holds templated policies, which this provider does not manage (Consul 1.14 has none). "+
				"The next update of the token removes them; remove them in Consul, or manage the token elsewhere.", live.AccessorID))
	}
	state.fromLive(ctx, live, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *aclTokenResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan, state aclTokenModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Local and the expiration cannot change (they replace the token), and
	// an empty SecretID keeps the secret.
	tok := &api.ACLToken{
		AccessorID:  state.AccessorID.ValueString(),
		Description: plan.Description.ValueString(),
		Local:       state.Local.ValueBool(),
	}
	want := plan.holdings(ctx, &resp.Diagnostics)
	want.into(tok)
	prior := state.holdings(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	// An update replaces everything the token holds. What was added since
	// the plan's refresh (or with -refresh=false) is in no plan: refuse
	// rather than remove it unseen. (What the plan keeps is no removal: a
	// policy renamed by this apply reads back under its planned name.)
	live, err := store.New(r.data.client).ACLToken(ctx, tok.AccessorID)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Read ACL Token", err)
		return
	}
	if unseen := holdingsOf(live).minus(prior).minus(want); len(unseen.items()) > 0 {
		resp.Diagnostics.AddError("ACL Token Changed Outside OpenTofu",
			fmt.Sprintf("Token %s now also holds %s, which it did not hold when the plan was made, so the plan does not show its removal. "+
				"Run plan again (with refresh) to see the change, then apply.", tok.AccessorID, unseen))
		return
	}
	updated, err := store.New(r.data.client).UpdateACLToken(ctx, tok)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Update ACL Token", err)
		return
	}
	tflog.Info(ctx, "updated ACL token", map[string]any{"accessor_id": updated.AccessorID})
	plan.SecretID = state.SecretID
	plan.fromLive(ctx, updated, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *aclTokenResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state aclTokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := store.New(r.data.client).DeleteACLToken(ctx, state.AccessorID.ValueString()); err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Delete ACL Token", err)
		return
	}
	tflog.Info(ctx, "deleted ACL token", map[string]any{"accessor_id": state.AccessorID.ValueString()})
}

// ImportState takes the accessor ID; the secret comes from Consul, which
// hands it to a caller with acl:write.
func (r *aclTokenResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !aclUUID.MatchString(req.ID) {
		resp.Diagnostics.AddError("Invalid Import ID",
			fmt.Sprintf("%q is not a token accessor ID. Import a consullock_acl_token by its accessor ID (a UUID), never by its secret.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("accessor_id"), req.ID)...)
}

// fromLive copies what Consul reports into m. A secret Consul hides
// ("<hidden>", for callers without acl:write) keeps the one in state.
func (m *aclTokenModel) fromLive(ctx context.Context, t *api.ACLToken, diags *diag.Diagnostics) {
	m.ID = types.StringValue(t.AccessorID)
	m.AccessorID = types.StringValue(t.AccessorID)
	switch {
	case !m.SecretIDWOVersion.IsNull():
		// The secret came from secret_id_wo: it is never stored.
		m.SecretID = types.StringNull()
	case t.SecretID != "" && t.SecretID != "<hidden>":
		m.SecretID = types.StringValue(t.SecretID)
	}
	m.Description = types.StringValue(t.Description)
	m.Local = types.BoolValue(t.Local)
	h := holdingsOf(t)
	m.Policies = keepWrittenEmpty(m.Policies, aclStringSet(h.policies))
	m.Roles = keepWrittenEmpty(m.Roles, aclStringSet(h.roles))

	services := make([]serviceIdentityModel, 0, len(h.services))
	for _, si := range h.services {
		services = append(services, serviceIdentityModel{ServiceName: types.StringValue(si.name), Datacenters: aclStringSet(si.datacenters)})
	}
	m.ServiceIdentities = keepWrittenEmpty(m.ServiceIdentities, objectSet(ctx, serviceIdentityType, services, diags))
	nodes := make([]nodeIdentityModel, 0, len(h.nodes))
	for _, ni := range h.nodes {
		nodes = append(nodes, nodeIdentityModel{NodeName: types.StringValue(ni.name), Datacenter: types.StringValue(ni.datacenter)})
	}
	m.NodeIdentities = keepWrittenEmpty(m.NodeIdentities, objectSet(ctx, nodeIdentityType, nodes, diags))

	if t.ExpirationTime != nil && !t.ExpirationTime.IsZero() {
		m.ExpirationTime = timetypes.NewRFC3339TimeValue(t.ExpirationTime.UTC())
	} else {
		m.ExpirationTime = timetypes.NewRFC3339Null()
	}
}

// keepWrittenEmpty returns live, except that an attribute written as an
// empty set stays empty when Consul reports none (null stands for none).
func keepWrittenEmpty(prior, live types.Set) types.Set {
	if live.IsNull() && !prior.IsNull() && !prior.IsUnknown() && len(prior.Elements()) == 0 {
		return prior
	}
	return live
}

// objectSet is a set of nested objects; null when there are none.
func objectSet[T any](ctx context.Context, t types.ObjectType, items []T, diags *diag.Diagnostics) types.Set {
	if len(items) == 0 {
		return types.SetNull(t)
	}
	set, ds := types.SetValueFrom(ctx, t, items)
	diags.Append(ds...)
	return set
}

// tokenHoldings is what a token holds, in one canonical form (sorted, by
// name) for both the configuration and Consul's answer, so that the two
// compare exactly.
type tokenHoldings struct {
	policies, roles []string
	services        []serviceIdentity
	nodes           []nodeIdentity
}

type serviceIdentity struct {
	name        string
	datacenters []string
}

type nodeIdentity struct{ name, datacenter string }

// holdings reads what the model declares.
func (m aclTokenModel) holdings(ctx context.Context, diags *diag.Diagnostics) tokenHoldings {
	h := tokenHoldings{
		policies: aclSetStrings(ctx, m.Policies, diags),
		roles:    aclSetStrings(ctx, m.Roles, diags),
	}
	if !m.ServiceIdentities.IsNull() && !m.ServiceIdentities.IsUnknown() {
		var items []serviceIdentityModel
		diags.Append(m.ServiceIdentities.ElementsAs(ctx, &items, false)...)
		for _, it := range items {
			h.services = append(h.services, serviceIdentity{name: it.ServiceName.ValueString(), datacenters: aclSetStrings(ctx, it.Datacenters, diags)})
		}
	}
	if !m.NodeIdentities.IsNull() && !m.NodeIdentities.IsUnknown() {
		var items []nodeIdentityModel
		diags.Append(m.NodeIdentities.ElementsAs(ctx, &items, false)...)
		for _, it := range items {
			h.nodes = append(h.nodes, nodeIdentity{name: it.NodeName.ValueString(), datacenter: it.Datacenter.ValueString()})
		}
	}
	h.sort()
	return h
}

// holdingsOf reads what a live token holds.
func holdingsOf(t *api.ACLToken) tokenHoldings {
	var h tokenHoldings
	for _, p := range t.Policies {
		h.policies = append(h.policies, p.Name)
	}
	for _, r := range t.Roles {
		h.roles = append(h.roles, r.Name)
	}
	for _, si := range t.ServiceIdentities {
		h.services = append(h.services, serviceIdentity{name: si.ServiceName, datacenters: aclSortedCopy(si.Datacenters)})
	}
	for _, ni := range t.NodeIdentities {
		h.nodes = append(h.nodes, nodeIdentity{name: ni.NodeName, datacenter: ni.Datacenter})
	}
	h.sort()
	return h
}

func (h *tokenHoldings) sort() {
	slices.Sort(h.policies)
	slices.Sort(h.roles)
	for i := range h.services {
		if len(h.services[i].datacenters) == 0 {
			h.services[i].datacenters = nil
		}
	}
	slices.SortFunc(h.services, func(a, b serviceIdentity) int { return strings.Compare(a.String(), b.String()) })
	slices.SortFunc(h.nodes, func(a, b nodeIdentity) int { return strings.Compare(a.String(), b.String()) })
}

// into sets the token's links and identities to h.
func (h tokenHoldings) into(t *api.ACLToken) {
	t.Policies = make([]*api.ACLTokenPolicyLink, 0, len(h.policies))
	for _, n := range h.policies {
		t.Policies = append(t.Policies, &api.ACLTokenPolicyLink{Name: n})
	}
	t.Roles = make([]*api.ACLTokenRoleLink, 0, len(h.roles))
	for _, n := range h.roles {
		t.Roles = append(t.Roles, &api.ACLTokenRoleLink{Name: n})
	}
	t.ServiceIdentities = make([]*api.ACLServiceIdentity, 0, len(h.services))
	for _, si := range h.services {
		t.ServiceIdentities = append(t.ServiceIdentities, &api.ACLServiceIdentity{ServiceName: si.name, Datacenters: si.datacenters})
	}
	t.NodeIdentities = make([]*api.ACLNodeIdentity, 0, len(h.nodes))
	for _, ni := range h.nodes {
		t.NodeIdentities = append(t.NodeIdentities, &api.ACLNodeIdentity{NodeName: ni.name, Datacenter: ni.datacenter})
	}
}

// minus is what h holds that o does not.
func (h tokenHoldings) minus(o tokenHoldings) tokenHoldings {
	out := tokenHoldings{}
	for _, p := range h.policies {
		if !slices.Contains(o.policies, p) {
			out.policies = append(out.policies, p)
		}
	}
	for _, r := range h.roles {
		if !slices.Contains(o.roles, r) {
			out.roles = append(out.roles, r)
		}
	}
	for _, si := range h.services {
		if !slices.ContainsFunc(o.services, func(x serviceIdentity) bool { return x.String() == si.String() }) {
			out.services = append(out.services, si)
		}
	}
	for _, ni := range h.nodes {
		if !slices.Contains(o.nodes, ni) {
			out.nodes = append(out.nodes, ni)
		}
	}
	return out
}

// items names everything held (names only, never a secret).
func (h tokenHoldings) items() []string {
	var parts []string
	for _, p := range h.policies {
		parts = append(parts, "policy "+p)
	}
	for _, r := range h.roles {
		parts = append(parts, "role "+r)
	}
	for _, si := range h.services {
		parts = append(parts, si.String())
	}
	for _, ni := range h.nodes {
		parts = append(parts, ni.String())
	}
	return parts
}

func (h tokenHoldings) String() string {
	if parts := h.items(); len(parts) > 0 {
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return "nothing"
}

func (s serviceIdentity) String() string {
	if len(s.datacenters) == 0 {
		return "service identity " + s.name
	}
	return "service identity " + s.name + " in " + strings.Join(s.datacenters, ",")
}

func (n nodeIdentity) String() string { return "node identity " + n.name + " in " + n.datacenter }

// sameDurationUsesState plans the state's text when the configuration
// says the same duration in other words ("1h" and "1h0m0s"), so that
// RequiresReplace does not replace a token over spelling.
type sameDurationUsesState struct{}

func (sameDurationUsesState) Description(context.Context) string {
	return "Keeps the state value when the configured duration is the same length."
}

func (m sameDurationUsesState) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (sameDurationUsesState) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.StateValue.IsNull() || req.StateValue.IsUnknown() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
		return
	}
	planned, err1 := time.ParseDuration(req.PlanValue.ValueString())
	stored, err2 := time.ParseDuration(req.StateValue.ValueString())
	if err1 == nil && err2 == nil && planned == stored {
		resp.PlanValue = req.StateValue
	}
}
