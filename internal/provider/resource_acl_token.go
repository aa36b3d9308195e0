package provider

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
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
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
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
	ID             types.String         `tfsdk:"id"`
	AccessorID     types.String         `tfsdk:"accessor_id"`
	SecretID       types.String         `tfsdk:"secret_id"`
	Description    types.String         `tfsdk:"description"`
	Policies       types.Set            `tfsdk:"policies"`
	Local          types.Bool           `tfsdk:"local"`
	ExpirationTTL  timetypes.GoDuration `tfsdk:"expiration_ttl"`
	ExpirationTime timetypes.RFC3339    `tfsdk:"expiration_time"`
}

func (r *aclTokenResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_acl_token"
}

func (r *aclTokenResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A Consul ACL token holding policies by name, typically a `consullock_acl_policy` for lock holders. " +
			"The secret is sensitive: it is kept out of plan output, logs and error messages, but it is stored in state, " +
			"so protect the state as you protect the token.",
		Attributes: map[string]schema.Attribute{
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
				MarkdownDescription: "The token's secret, what clients send as `X-Consul-Token` or `CONSUL_HTTP_TOKEN`.",
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
				MarkdownDescription: "Names of the ACL policies the token holds.",
				Optional:            true,
				ElementType:         types.StringType,
				Validators: []validator.Set{setvalidator.ValueStringsAre(
					stringvalidator.RegexMatches(regexp.MustCompile(lockmodel.NamePattern), aclPolicyNameMessage))},
			},
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
		Policies:    policyLinks(aclSetStrings(ctx, plan.Policies, &resp.Diagnostics)),
	}
	if !plan.ExpirationTTL.IsNull() {
		ttl, diags := plan.ExpirationTTL.ValueGoDuration()
		resp.Diagnostics.Append(diags...)
		tok.ExpirationTTL = ttl
	}
	if resp.Diagnostics.HasError() {
		return
	}
	created, err := r.data.client.CreateACLToken(ctx, tok)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Create ACL Token", err)
		return
	}
	tflog.Info(ctx, "created ACL token", map[string]any{"accessor_id": created.AccessorID})
	plan.fromLive(created)
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
	live, err := r.data.client.ACLToken(ctx, state.AccessorID.ValueString())
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
	state.fromLive(live)
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
		Policies:    policyLinks(aclSetStrings(ctx, plan.Policies, &resp.Diagnostics)),
	}
	if resp.Diagnostics.HasError() {
		return
	}
	updated, err := r.data.client.UpdateACLToken(ctx, tok)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Update ACL Token", err)
		return
	}
	tflog.Info(ctx, "updated ACL token", map[string]any{"accessor_id": updated.AccessorID})
	plan.SecretID = state.SecretID
	plan.fromLive(updated)
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
	if err := r.data.client.DeleteACLToken(ctx, state.AccessorID.ValueString()); err != nil {
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
func (m *aclTokenModel) fromLive(t *api.ACLToken) {
	m.ID = types.StringValue(t.AccessorID)
	m.AccessorID = types.StringValue(t.AccessorID)
	if t.SecretID != "" && t.SecretID != "<hidden>" {
		m.SecretID = types.StringValue(t.SecretID)
	}
	m.Description = types.StringValue(t.Description)
	m.Local = types.BoolValue(t.Local)
	names := make([]string, 0, len(t.Policies))
	for _, p := range t.Policies {
		names = append(names, p.Name)
	}
	// policies = [] stays [], as written; otherwise null stands for none.
	writtenEmpty := !m.Policies.IsNull() && !m.Policies.IsUnknown() && len(m.Policies.Elements()) == 0
	if len(names) > 0 || !writtenEmpty {
		m.Policies = aclStringSet(names)
	}
	if t.ExpirationTime != nil && !t.ExpirationTime.IsZero() {
		m.ExpirationTime = timetypes.NewRFC3339TimeValue(t.ExpirationTime.UTC())
	} else {
		m.ExpirationTime = timetypes.NewRFC3339Null()
	}
}

func policyLinks(names []string) []*api.ACLTokenPolicyLink {
	links := make([]*api.ACLTokenPolicyLink, 0, len(names))
	for _, n := range names {
		links = append(links, &api.ACLTokenPolicyLink{Name: n})
	}
	return links
}

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
