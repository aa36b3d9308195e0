package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"

	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// consullock_lock's holder_service: the attribute, its model and its
// conversion to holdersvc.Service (the rules are lockmodel's,
// holderservice.go).

// lockHolderServiceModel is holder_service; a nil pointer in
// lockResourceModel is an unset holder_service.
type lockHolderServiceModel struct {
	Name types.String `tfsdk:"name"`
	Tags types.List   `tfsdk:"tags"`
	Port types.Int64  `tfsdk:"port"`
	Meta types.Map    `tfsdk:"meta"`
}

func holderServiceSchemaAttribute() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		MarkdownDescription: "Put each holder into Consul's catalog and DNS (`<name>.service.consul`) while, and only " +
			"while, it holds; workers need `service \"<name>\"` write (`consullock_acl_policy`'s `holder_services`).",
		Optional: true,
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				MarkdownDescription: "Service name, so that `<name>.service.consul` names the holder(s): " +
					allowedText(holdersvc.ValidateName("name", "")) + ".",
				Required:   true,
				Validators: []validator.String{domainStringRule{check: holdersvc.ValidateName, what: allowedText(holdersvc.ValidateName("name", ""))}},
			},
			"tags": schema.ListAttribute{
				MarkdownDescription: fmt.Sprintf("Service tags, each a DNS label (`<tag>.<name>.service.consul`), at most %d, no duplicates.", holdersvc.MaxTags),
				ElementType:         types.StringType,
				Optional:            true,
				Validators: []validator.List{
					listvalidator.SizeAtMost(holdersvc.MaxTags),
					listvalidator.UniqueValues(),
					listvalidator.ValueStringsAre(domainStringRule{check: holdersvc.ValidateTag, what: allowedText(holdersvc.ValidateTag("tags", ""))}),
				},
			},
			"port": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("The holder's port, `1` to `%d`, in SRV answers and the catalog. Unset: no port. "+
					"A runner may override it with `-service-port` (several holders on one host).", holdersvc.MaxPort),
				Optional:   true,
				Validators: []validator.Int64{int64validator.Between(1, holdersvc.MaxPort)},
			},
			"meta": schema.MapAttribute{
				MarkdownDescription: fmt.Sprintf("Service meta added to the runner's own. Keys follow Consul's rule (1 to %d "+
					"letters, digits, `-` or `_`, not starting with `consul-`) and may not be `lock`, `session`, `fencing_token` "+
					"or `holder`; values at most %d bytes; at most %d pairs.", holdersvc.MaxMetaKeyLength,
					holdersvc.MaxMetaValueLen, holdersvc.MaxMetaPairs-len(holdersvc.MetaKeys)),
				ElementType: types.StringType,
				Optional:    true,
				Validators: []validator.Map{
					mapvalidator.SizeAtMost(holdersvc.MaxMetaPairs - len(holdersvc.MetaKeys)),
					mapvalidator.KeysAre(domainStringRule{check: holdersvc.ValidateMetaKey, what: allowedText(holdersvc.ValidateMetaKey("meta", "consul-"))}),
					mapvalidator.ValueStringsAre(stringvalidator.LengthAtMost(holdersvc.MaxMetaValueLen)),
				},
			},
		},
	}
}

// holderService converts a known holder_service (nil for none).
func (m *lockHolderServiceModel) holderService(diags *diag.Diagnostics) *holdersvc.Service {
	if m == nil {
		return nil
	}
	h := &holdersvc.Service{Name: m.Name.ValueString(), Port: int(m.Port.ValueInt64())}
	if !m.Tags.IsNull() && !m.Tags.IsUnknown() {
		diags.Append(m.Tags.ElementsAs(context.Background(), &h.Tags, false)...)
	}
	if !m.Meta.IsNull() && !m.Meta.IsUnknown() {
		diags.Append(m.Meta.ElementsAs(context.Background(), &h.Meta, false)...)
	}
	return h
}

// holderServiceState is holder_service as recorded (h), keeping prior's
// null tags, port and meta where the record has none.
func holderServiceState(prior *lockHolderServiceModel, h *holdersvc.Service) *lockHolderServiceModel {
	if h == nil {
		return nil
	}
	m := &lockHolderServiceModel{Name: types.StringValue(h.Name), Tags: types.ListNull(types.StringType),
		Port: types.Int64Null(), Meta: types.MapNull(types.StringType)}
	if h.Port != 0 || (prior != nil && !prior.Port.IsNull()) {
		m.Port = types.Int64Value(int64(h.Port))
	}
	if len(h.Tags) > 0 || (prior != nil && !prior.Tags.IsNull()) {
		tags := make([]attr.Value, len(h.Tags))
		for i, t := range h.Tags {
			tags[i] = types.StringValue(t)
		}
		m.Tags = types.ListValueMust(types.StringType, tags)
	}
	if len(h.Meta) > 0 || (prior != nil && !prior.Meta.IsNull()) {
		meta := make(map[string]attr.Value, len(h.Meta))
		for k, v := range h.Meta {
			meta[k] = types.StringValue(v)
		}
		m.Meta = types.MapValueMust(types.StringType, meta)
	}
	return m
}

// holderServicePlanWarnings warns at plan time when the session profile
// makes the holder check flap (holdersvc.Check.Warnings), when the
// profile is already recorded (one consistent read; a profile created in
// the same apply is judged at apply, profileWarnings). A failed read adds
// nothing: apply reports it.
func (r *lockResource) holderServicePlanWarnings(ctx context.Context, plan lockResourceModel, diags *diag.Diagnostics) {
	if r.data == nil || plan.HolderService == nil || plan.SessionDefaults.IsUnknown() || plan.SessionDefaults.IsNull() ||
		lockmodel.ValidateName("session_defaults", plan.SessionDefaults.ValueString()) != nil {
		return
	}
	rec, found, err := store.New(r.data.client).Registry(r.data.registryPrefix).Get(ctx, lockmodel.KindSessionDefaults, plan.SessionDefaults.ValueString())
	if err != nil || !found {
		return
	}
	if p, err := record.DecodeSessionProfileRecord(rec.Value); err == nil {
		addWarnings(diags, lockmodel.NewHolderCheck(p).Warnings())
	}
}
