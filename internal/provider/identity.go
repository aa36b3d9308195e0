package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Resource identity: every managed resource is identified by one string
// attribute of its state (locks, session profiles and policies by name,
// tokens by accessor ID), so that `import { identity = {...} }` works and
// the CLI can check that a refresh still describes the same object.
//
// withIdentity adds that to a resource without touching its own code: it
// copies the attribute into the response identity after Create, Read,
// Update and ImportState, and turns an identity import into the import by
// ID the resource already has.

var (
	_ resource.ResourceWithIdentity         = (*withIdentity)(nil)
	_ resource.ResourceWithConfigure        = (*withIdentity)(nil)
	_ resource.ResourceWithImportState      = (*withIdentity)(nil)
	_ resource.ResourceWithModifyPlan       = (*withIdentity)(nil)
	_ resource.ResourceWithValidateConfig   = (*withIdentity)(nil)
	_ resource.ResourceWithConfigValidators = (*withIdentity)(nil)
)

type withIdentity struct {
	inner resource.Resource
	// attr names both the identity attribute and the state attribute it
	// is copied from.
	attr        string
	description string
	// mutable: the attribute can change in place (a policy is renamed
	// without replacement).
	mutable bool
}

// identified wraps the resource factory f with identity attribute attr.
func identified(f func() resource.Resource, attr, description string) func() resource.Resource {
	return func() resource.Resource {
		return &withIdentity{inner: f(), attr: attr, description: description}
	}
}

// identifiedMutable is identified for an attribute that an update may
// change.
func identifiedMutable(f func() resource.Resource, attr, description string) func() resource.Resource {
	return func() resource.Resource {
		return &withIdentity{inner: f(), attr: attr, description: description, mutable: true}
	}
}

func (w *withIdentity) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{
		Attributes: map[string]identityschema.Attribute{
			w.attr: identityschema.StringAttribute{RequiredForImport: true, Description: w.description},
		},
	}
}

func (w *withIdentity) Metadata(ctx context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	w.inner.Metadata(ctx, req, resp)
	resp.ResourceBehavior.MutableIdentity = w.mutable
}

func (w *withIdentity) Schema(ctx context.Context, req resource.SchemaRequest, resp *resource.SchemaResponse) {
	w.inner.Schema(ctx, req, resp)
}

func (w *withIdentity) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	w.inner.Create(ctx, req, resp)
	w.setIdentity(ctx, resp.Identity, resp.State, types.StringNull(), &resp.Diagnostics)
}

func (w *withIdentity) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	w.inner.Read(ctx, req, resp)
	if req.Identity != nil && !req.Identity.Raw.IsFullyNull() && resp.State.Raw.Equal(req.State.Raw) {
		return // the usual refresh: same object, and resp.Identity starts as its identity
	}
	prior := w.stateValue(ctx, req.State, &resp.Diagnostics)
	w.setIdentity(ctx, resp.Identity, resp.State, prior, &resp.Diagnostics)
}

func (w *withIdentity) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	prior := w.stateValue(ctx, req.State, &resp.Diagnostics)
	w.inner.Update(ctx, req, resp)
	w.setIdentity(ctx, resp.Identity, resp.State, prior, &resp.Diagnostics)
}

func (w *withIdentity) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	w.inner.Delete(ctx, req, resp)
}

func (w *withIdentity) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	inner, ok := w.inner.(resource.ResourceWithImportState)
	if !ok {
		resp.Diagnostics.AddError("Import Not Supported", "This resource cannot be imported. This is a bug in the provider; please report it.")
		return
	}
	if req.ID == "" && req.Identity != nil {
		var id types.String
		resp.Diagnostics.Append(req.Identity.GetAttribute(ctx, path.Root(w.attr), &id)...)
		if resp.Diagnostics.HasError() {
			return
		}
		if id.IsNull() || id.IsUnknown() || id.ValueString() == "" {
			resp.Diagnostics.AddAttributeError(path.Root(w.attr), "Missing Import Identity",
				"The import block's identity must set "+w.attr+" to a known, non-empty value.")
			return
		}
		req.ID = id.ValueString()
	}
	inner.ImportState(ctx, req, resp)
	w.setIdentity(ctx, resp.Identity, resp.State, types.StringNull(), &resp.Diagnostics)
}

func (w *withIdentity) Configure(ctx context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if r, ok := w.inner.(resource.ResourceWithConfigure); ok {
		r.Configure(ctx, req, resp)
	}
}

func (w *withIdentity) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if r, ok := w.inner.(resource.ResourceWithModifyPlan); ok {
		r.ModifyPlan(ctx, req, resp)
	}
}

func (w *withIdentity) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	if r, ok := w.inner.(resource.ResourceWithValidateConfig); ok {
		r.ValidateConfig(ctx, req, resp)
	}
}

func (w *withIdentity) ConfigValidators(ctx context.Context) []resource.ConfigValidator {
	if r, ok := w.inner.(resource.ResourceWithConfigValidators); ok {
		return r.ConfigValidators(ctx)
	}
	return nil
}

func (w *withIdentity) stateValue(ctx context.Context, state tfsdk.State, diags *diag.Diagnostics) types.String {
	var v types.String
	if state.Raw.IsNull() {
		return types.StringNull()
	}
	diags.Append(state.GetAttribute(ctx, path.Root(w.attr), &v)...)
	return v
}

// setIdentity sets the identity from state, or from fallback when the
// state is gone (a Read that found the object deleted keeps the identity
// it had).
func (w *withIdentity) setIdentity(ctx context.Context, id *tfsdk.ResourceIdentity, state tfsdk.State, fallback types.String, diags *diag.Diagnostics) {
	if id == nil || diags.HasError() {
		return
	}
	v := w.stateValue(ctx, state, diags)
	if v.IsNull() || v.IsUnknown() {
		v = fallback
	}
	if v.IsNull() || v.IsUnknown() {
		return
	}
	diags.Append(id.SetAttribute(ctx, path.Root(w.attr), v)...)
}
