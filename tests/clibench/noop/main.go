// Command noop is the framework's floor for the CLI benchmark: a
// terraform-plugin-framework provider whose resources have the shape of
// consullock_lock and consullock_session_defaults (same attributes, same
// defaults and computed values, the same resource identity) and do no I/O at
// all. OpenTofu's own work per resource grows with that shape (it copies and
// decodes every attribute and the identity), so the floor keeps it; whatever
// consullock costs above it is consullock's own work.
package main

import (
	"context"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is where the benchmark's dev_overrides install this provider.
const Address = "registry.opentofu.org/bench/noop"

func main() {
	if err := providerserver.Serve(context.Background(), func() provider.Provider { return &noopProvider{} },
		providerserver.ServeOpts{Address: Address, ProtocolVersion: 6}); err != nil {
		log.Fatal(err)
	}
}

var (
	_ provider.Provider             = (*noopProvider)(nil)
	_ resource.ResourceWithIdentity = (*lockResource)(nil)
	_ resource.ResourceWithIdentity = (*profileResource)(nil)
)

type noopProvider struct{}

func (p *noopProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "noop"
}

func (p *noopProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = pschema.Schema{}
}

func (p *noopProvider) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {
}

func (p *noopProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		func() resource.Resource { return &lockResource{} },
		func() resource.Resource { return &profileResource{} },
	}
}

func (p *noopProvider) DataSources(context.Context) []func() datasource.DataSource { return nil }

func computedString() schema.StringAttribute {
	return schema.StringAttribute{Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}}
}

// nameIdentity is consullock's identity schema: the declaration's name.
func nameIdentity(resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{Attributes: map[string]identityschema.Attribute{
		"name": identityschema.StringAttribute{RequiredForImport: true},
	}}
}

func setIdentity(ctx context.Context, identity *tfsdk.ResourceIdentity, name types.String, diags *diag.Diagnostics) {
	diags.Append(identity.SetAttribute(ctx, path.Root("name"), name)...)
}

type lockModel struct {
	Name            types.String `tfsdk:"name"`
	Prefix          types.String `tfsdk:"prefix"`
	Key             types.String `tfsdk:"key"`
	Limit           types.Int64  `tfsdk:"limit"`
	SessionDefaults types.String `tfsdk:"session_defaults"`
	MaxHold         types.String `tfsdk:"max_hold"`
	Description     types.String `tfsdk:"description"`
	ForceDestroy    types.Bool   `tfsdk:"force_destroy"`
	AlwaysHeld      types.Bool   `tfsdk:"always_held"`
	Flags           types.String `tfsdk:"flags"`
	RegistryKey     types.String `tfsdk:"registry_key"`
}

type lockResource struct{}

func (r *lockResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	nameIdentity(resp)
}

func (r *lockResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lock"
}

func (r *lockResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	key := computedString()
	key.Optional = true
	resp.Schema = schema.Schema{Attributes: map[string]schema.Attribute{
		"name":             schema.StringAttribute{Required: true, PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
		"prefix":           schema.StringAttribute{Required: true, PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
		"key":              key,
		"limit":            schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(1)},
		"session_defaults": schema.StringAttribute{Required: true},
		"max_hold":         schema.StringAttribute{Optional: true},
		"description":      schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("")},
		"force_destroy":    schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false)},
		"always_held":      schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false)},
		"flags":            computedString(),
		"registry_key":     computedString(),
	}}
}

func (r *lockResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m lockModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.Key.IsUnknown() {
		m.Key = types.StringValue(m.Prefix.ValueString() + "/.lock")
	}
	m.Flags = types.StringValue("0x2ddccbc058a50c18")
	m.RegistryKey = types.StringValue("consul-lock/locks/" + m.Name.ValueString())
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	setIdentity(ctx, resp.Identity, m.Name, &resp.Diagnostics)
}

func (r *lockResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m lockModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *lockResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m lockModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *lockResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}

type profileModel struct {
	Name          types.String `tfsdk:"name"`
	TTL           types.String `tfsdk:"ttl"`
	LockDelay     types.String `tfsdk:"lock_delay"`
	Behavior      types.String `tfsdk:"behavior"`
	NodeChecks    types.List   `tfsdk:"node_checks"`
	ServiceChecks types.List   `tfsdk:"service_checks"`
	RenewEvery    types.String `tfsdk:"renew_every"`
	WorstCaseGap  types.String `tfsdk:"worst_case_gap"`
	RegistryKey   types.String `tfsdk:"registry_key"`
}

type profileResource struct{}

func (r *profileResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	nameIdentity(resp)
}

func (r *profileResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_session_defaults"
}

func (r *profileResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	renew := computedString()
	renew.Optional = true
	resp.Schema = schema.Schema{Attributes: map[string]schema.Attribute{
		"name":        schema.StringAttribute{Required: true, PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}},
		"ttl":         schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("15s")},
		"lock_delay":  schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("15s")},
		"behavior":    schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("release")},
		"node_checks": schema.ListAttribute{ElementType: types.StringType, Optional: true, Computed: true, Default: listdefault.StaticValue(types.ListValueMust(types.StringType, []attr.Value{types.StringValue("serfHealth")}))},
		"service_checks": schema.ListNestedAttribute{Optional: true, NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"id":        schema.StringAttribute{Required: true},
			"namespace": schema.StringAttribute{Optional: true},
		}}},
		"renew_every": renew,
		// Computed at plan by consullock; here the same value is known after apply.
		"worst_case_gap": computedString(),
		"registry_key":   computedString(),
	}}
}

func (r *profileResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m profileModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.RenewEvery.IsUnknown() {
		m.RenewEvery = types.StringValue("5s")
	}
	m.WorstCaseGap = types.StringValue("45s")
	m.RegistryKey = types.StringValue("consul-lock/session-defaults/" + m.Name.ValueString())
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	setIdentity(ctx, resp.Identity, m.Name, &resp.Diagnostics)
}

func (r *profileResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m profileModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *profileResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m profileModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *profileResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}
