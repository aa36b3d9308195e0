// Command noop is the framework's floor for the CLI benchmark: a
// terraform-plugin-framework provider whose resources have the shape of
// consullock_lock and consullock_session_defaults and do no I/O at all.
// Their schemas are consullock's own (same attributes, types, defaults and
// computed values, the same resource identity), stripped of consullock's
// validators and plan modifiers, so that the floor cannot fall behind the
// provider's shape again. OpenTofu's own work per resource grows with that
// shape (it copies and decodes every attribute and the identity), and so
// does the framework's; whatever consullock costs above it is consullock's
// own work.
package main

import (
	"context"
	"log"
	"reflect"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	consullock "github.com/consullock/terraform-provider-consullock/internal/provider"
)

// Address is where the benchmark's dev_overrides install this provider.
const Address = "registry.opentofu.org/bench/noop"

func main() {
	if err := providerserver.Serve(context.Background(), func() provider.Provider { return &noopProvider{} },
		providerserver.ServeOpts{Address: Address, ProtocolVersion: 6}); err != nil {
		log.Fatal(err)
	}
}

var _ provider.Provider = (*noopProvider)(nil)

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
		func() resource.Resource {
			return &noopResource{suffix: "_lock", shape: consullock.NewLockResource, computed: func(m map[string]string) map[string]string {
				return map[string]string{"key": m["prefix"] + "/.lock", "flags": "0x2ddccbc058a50c18",
					"registry_key": "consul-lock/locks/" + m["name"], "pause_key": "consul-lock/pauses/" + m["name"]}
			}}
		},
		func() resource.Resource {
			return &noopResource{suffix: "_session_defaults", shape: consullock.NewSessionDefaultsResource, computed: func(m map[string]string) map[string]string {
				return map[string]string{"renew_every": "5s", "worst_case_gap": "45s", "registry_key": "consul-lock/session-defaults/" + m["name"]}
			}}
		},
	}
}

func (p *noopProvider) DataSources(context.Context) []func() datasource.DataSource { return nil }

// bare is consullock's schema without its validators and plan modifiers:
// name and prefix still force replacement, computed strings keep their
// state, as consullock's do.
func bare(s schema.Schema) schema.Schema {
	out := schema.Schema{Attributes: map[string]schema.Attribute{}}
	for name, a := range s.Attributes {
		out.Attributes[name] = bareAttribute(name, a)
	}
	return out
}

// bareAttribute is a with its validators, plan modifiers and descriptions
// cleared, also in its nested attributes; a string attribute then gets the
// plan modifiers bare gives it.
func bareAttribute(name string, a schema.Attribute) schema.Attribute {
	v := reflect.New(reflect.TypeOf(a)).Elem()
	v.Set(reflect.ValueOf(a))
	strip := func(v reflect.Value) {
		for _, field := range []string{"Validators", "PlanModifiers", "MarkdownDescription", "Description"} {
			if f := v.FieldByName(field); f.IsValid() {
				f.SetZero()
			}
		}
		if f := v.FieldByName("Attributes"); f.IsValid() {
			nested, _ := f.Interface().(map[string]schema.Attribute)
			f.Set(reflect.ValueOf(bareNested(nested)))
		}
	}
	strip(v)
	if nested := v.FieldByName("NestedObject"); nested.IsValid() {
		strip(nested)
	}
	out, _ := v.Interface().(schema.Attribute)
	if s, ok := out.(schema.StringAttribute); ok {
		switch {
		case name == "name" || name == "prefix":
			s.PlanModifiers = []planmodifier.String{stringplanmodifier.RequiresReplace()}
		case s.Computed && s.Default == nil:
			s.PlanModifiers = []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
		}
		return s
	}
	return out
}

func bareNested(attrs map[string]schema.Attribute) map[string]schema.Attribute {
	out := map[string]schema.Attribute{}
	for name, a := range attrs {
		// Nested names are not the lock's name and prefix.
		out[name] = bareAttribute("nested "+name, a)
	}
	return out
}

// noopResource has the shape of one of consullock's resources and keeps
// whatever it is given: Create and Update store the plan with the computed
// strings filled in, Read stores the state again (a whole-object Get and
// Set, as a provider's Read does).
type noopResource struct {
	suffix   string
	shape    func() resource.Resource
	computed func(known map[string]string) map[string]string
}

var _ resource.ResourceWithIdentity = (*noopResource)(nil)

func (r *noopResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + r.suffix
}

func (r *noopResource) Schema(ctx context.Context, req resource.SchemaRequest, resp *resource.SchemaResponse) {
	r.shape().Schema(ctx, req, resp)
	resp.Schema = bare(resp.Schema)
}

func (r *noopResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	nameIdentity(resp)
}

func (r *noopResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.store(ctx, req.Plan.Raw, &resp.State, &resp.Diagnostics)
	var name types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("name"), &name)...)
	setIdentity(ctx, resp.Identity, name, &resp.Diagnostics)
}

func (r *noopResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var obj types.Object
	resp.Diagnostics.Append(req.State.Get(ctx, &obj)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, obj)...)
}

func (r *noopResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.store(ctx, req.Plan.Raw, &resp.State, &resp.Diagnostics)
}

func (r *noopResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}

// store sets state to plan, with every unknown computed string set to the
// value r.computed gives it.
func (r *noopResource) store(ctx context.Context, plan tftypes.Value, state *tfsdk.State, diags *diag.Diagnostics) {
	var obj types.Object
	diags.Append((tfsdk.Plan{Schema: state.Schema, Raw: plan}).Get(ctx, &obj)...)
	if diags.HasError() {
		return
	}
	known := map[string]string{}
	for name, v := range obj.Attributes() {
		if s, ok := v.(types.String); ok && !s.IsUnknown() && !s.IsNull() {
			known[name] = s.ValueString()
		}
	}
	diags.Append(state.Set(ctx, obj)...)
	for name, v := range r.computed(known) {
		if a, ok := obj.Attributes()[name]; ok && a.IsUnknown() {
			diags.Append(state.SetAttribute(ctx, path.Root(name), types.StringValue(v))...)
		}
	}
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
