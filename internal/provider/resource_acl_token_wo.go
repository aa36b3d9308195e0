package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The write-only secret of consullock_acl_token: a SecretID chosen
// elsewhere (Vault, a secret manager, an ephemeral value) that the
// provider sends to Consul at creation and never stores.

var (
	_ resource.ResourceWithConfigValidators = (*aclTokenResource)(nil)
	_ resource.ResourceWithValidateConfig   = (*aclTokenResource)(nil)
)

var secretIDWOAttribute = schema.StringAttribute{
	MarkdownDescription: "The token's secret (a UUID) chosen elsewhere, sent at creation and never stored; `secret_id` is then " +
		"null. Rotate with `secret_id_wo_version` (the token is replaced). OpenTofu or Terraform 1.11+.",
	Optional:  true,
	Sensitive: true,
	WriteOnly: true,
	Validators: []validator.String{
		stringvalidator.RegexMatches(aclUUID, "must be a UUID, the form of Consul's token secrets"),
		stringvalidator.AlsoRequires(path.MatchRoot("secret_id_wo_version")),
	},
}

var secretIDWOVersionAttribute = schema.Int64Attribute{
	MarkdownDescription: "Version of `secret_id_wo`. The provider cannot see a write-only value change, so change this number " +
		"to rotate the secret: the token is replaced by one with the current `secret_id_wo`. Required with `secret_id_wo`.",
	Optional:      true,
	PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
}

func (r *aclTokenResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.RequiredTogether(path.MatchRoot("secret_id_wo"), path.MatchRoot("secret_id_wo_version")),
	}
}

// ValidateConfig refuses secret_id_wo on a CLI that cannot send write-only
// values: it would treat the attribute as an ordinary one and store the
// secret in plan and state.
func (r *aclTokenResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	if req.ClientCapabilities.WriteOnlyAttributesAllowed {
		return
	}
	var wo types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("secret_id_wo"), &wo)...)
	if resp.Diagnostics.HasError() || wo.IsNull() {
		return
	}
	resp.Diagnostics.AddAttributeError(path.Root("secret_id_wo"), "Write-Only Secret Not Supported By This CLI",
		"This Terraform/OpenTofu version cannot send write-only attributes, so it would store secret_id_wo in plan and state. "+
			"Use OpenTofu 1.11 or Terraform 1.11 or later, or remove secret_id_wo and secret_id_wo_version to let Consul generate "+
			"the secret (kept in state as secret_id).")
}

// writeOnlySecret is secret_id_wo from the configuration, "" when unset (then
// Consul generates the secret).
func writeOnlySecret(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) string {
	var wo types.String
	diags.Append(config.GetAttribute(ctx, path.Root("secret_id_wo"), &wo)...)
	return wo.ValueString()
}
