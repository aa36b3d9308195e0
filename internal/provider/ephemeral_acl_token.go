package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/consullock/terraform-provider-consullock/internal/store"
)

var (
	_ ephemeral.EphemeralResource              = (*aclTokenEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithConfigure = (*aclTokenEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithClose     = (*aclTokenEphemeral)(nil)
)

// NewACLTokenEphemeral is the consullock_acl_token ephemeral resource: a
// short-lived token whose secret never reaches plan or state.
func NewACLTokenEphemeral() ephemeral.EphemeralResource { return &aclTokenEphemeral{} }

type aclTokenEphemeral struct {
	data *providerData
}

type aclTokenEphemeralModel struct {
	Description types.String         `tfsdk:"description"`
	Policies    types.Set            `tfsdk:"policies"`
	Local       types.Bool           `tfsdk:"local"`
	TTL         timetypes.GoDuration `tfsdk:"ttl"`
	AccessorID  types.String         `tfsdk:"accessor_id"`
	SecretID    types.String         `tfsdk:"secret_id"`
}

const ephemeralTokenKey = "accessor_id"

func (e *aclTokenEphemeral) Metadata(_ context.Context, req ephemeral.MetadataRequest, resp *ephemeral.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_acl_token"
}

func (e *aclTokenEphemeral) Schema(_ context.Context, _ ephemeral.SchemaRequest, resp *ephemeral.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A short-lived Consul ACL token for the given policies, for the duration of a run: Open creates it " +
			"with an expiration TTL, Close deletes it, and if Close never runs Consul deletes it when the TTL is up. " +
			"Its secret is never written to plan or state: feed it to a write-only attribute, a provisioner or " +
			"`consullock run` in a `local-exec`. The CLI opens ephemeral resources in the plan and again in the apply: " +
			"each phase gets its own token. Needs OpenTofu 1.11 or Terraform 1.10 or later.",
		Attributes: map[string]schema.Attribute{
			"policies": schema.SetAttribute{
				MarkdownDescription: "Names of the ACL policies the token holds, e.g. a `consullock_acl_policy`.",
				Required:            true,
				ElementType:         types.StringType,
				Validators: []validator.Set{
					setvalidator.SizeAtLeast(1),
					setvalidator.ValueStringsAre(stringvalidator.RegexMatches(namePatternRE, aclPolicyNameMessage)),
				},
			},
			"ttl": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Consul expiration TTL of the token, from `%s` to `%s` (Consul's default limits): "+
					"the longest it can outlive a run whose Close did not run. Choose it longer than the run.",
					minTokenExpirationTTL, maxTokenExpirationTTL),
				Required:   true,
				CustomType: timetypes.GoDurationType{},
				Validators: []validator.String{durationBetween(minTokenExpirationTTL, maxTokenExpirationTTL)},
			},
			"description": schema.StringAttribute{
				MarkdownDescription: "Token description. Default `consullock ephemeral token`.",
				Optional:            true,
			},
			"local": schema.BoolAttribute{
				MarkdownDescription: "Make the token valid only in the datacenter it is created in. Default `false`.",
				Optional:            true,
			},
			"accessor_id": schema.StringAttribute{
				MarkdownDescription: "The token's accessor ID.",
				Computed:            true,
			},
			"secret_id": schema.StringAttribute{
				MarkdownDescription: "The token's secret.",
				Computed:            true,
				Sensitive:           true,
			},
		},
	}
}

func (e *aclTokenEphemeral) Configure(_ context.Context, req ephemeral.ConfigureRequest, resp *ephemeral.ConfigureResponse) {
	e.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

func (e *aclTokenEphemeral) Open(ctx context.Context, req ephemeral.OpenRequest, resp *ephemeral.OpenResponse) {
	if !resourceConfigured(e.data, &resp.Diagnostics) {
		return
	}
	var m aclTokenEphemeralModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ttl, ds := m.TTL.ValueGoDuration()
	resp.Diagnostics.Append(ds...)
	var names []string
	resp.Diagnostics.Append(m.Policies.ElementsAs(ctx, &names, false)...)
	if resp.Diagnostics.HasError() {
		return
	}
	slices.Sort(names)
	tok := &api.ACLToken{Description: "consullock ephemeral token", Local: m.Local.ValueBool(), ExpirationTTL: ttl}
	if !m.Description.IsNull() {
		tok.Description = m.Description.ValueString()
	}
	for _, n := range names {
		tok.Policies = append(tok.Policies, &api.ACLTokenPolicyLink{Name: n})
	}
	created, err := store.New(e.data.client).CreateACLToken(ctx, tok)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Create ACL Token", err)
		return
	}
	tflog.Info(ctx, "created ephemeral ACL token", map[string]any{"accessor_id": created.AccessorID})
	// Private data must be JSON.
	idJSON, _ := json.Marshal(created.AccessorID)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, ephemeralTokenKey, idJSON)...)
	client, accessor := e.data.client, created.AccessorID
	trackUnclosed("token "+accessor, func(ctx context.Context) {
		_ = store.New(client).DeleteACLToken(ctx, accessor) // best effort at shutdown; the token expires by its ttl otherwise
	})
	m.AccessorID = types.StringValue(created.AccessorID)
	m.SecretID = types.StringValue(created.SecretID)
	resp.Diagnostics.Append(resp.Result.Set(ctx, &m)...)
}

// Close deletes the token. A failure is a warning: the token expires by
// its TTL anyway.
func (e *aclTokenEphemeral) Close(ctx context.Context, req ephemeral.CloseRequest, resp *ephemeral.CloseResponse) {
	if !resourceConfigured(e.data, &resp.Diagnostics) {
		return
	}
	idJSON, ds := req.Private.GetKey(ctx, ephemeralTokenKey)
	resp.Diagnostics.Append(ds...)
	var id string
	if resp.Diagnostics.HasError() || len(idJSON) == 0 || json.Unmarshal(idJSON, &id) != nil {
		return
	}
	closed("token " + id)
	if err := store.New(e.data.client).DeleteACLToken(context.WithoutCancel(ctx), id); err != nil {
		resp.Diagnostics.AddWarning("Ephemeral ACL Token Not Deleted",
			fmt.Sprintf("Token %s could not be deleted; Consul deletes it when its ttl runs out. Delete it with `consul acl token delete -id %s` to end it now.\n\n%s",
				id, id, err))
		return
	}
	tflog.Info(ctx, "deleted ephemeral ACL token", map[string]any{"accessor_id": id})
}
