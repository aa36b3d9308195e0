package provider

import (
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// consullock_lock's waiters: the attribute and its conversion to
// lockmodel.Lock.Waiters (the rules are lockmodel's, waiters.go).

func waitersSchemaAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		MarkdownDescription: "How waiting runners take the lock on a release: `race` (all wake and try, as `consul lock`), " +
			"`queue` or `handoff` ([waiters](../guides/waiters.md)): mutex only, workers need `queue_prefixes`. " +
			"Default `race`.",
		Optional:   true,
		Computed:   true,
		Default:    stringdefault.StaticString(lockmodel.WaitersRace),
		Validators: []validator.String{stringvalidator.OneOf(lockmodel.WaiterModes...)},
	}
}

// lockWaiters is the domain value of waiters: "" for race (as a record
// without the field reads), the mode otherwise.
func lockWaiters(v types.String) string {
	if s := v.ValueString(); s != lockmodel.WaitersRace {
		return s
	}
	return ""
}

// waitersState is waiters as recorded: "race" for a record without the
// field, which is every record written before waiters existed.
func waitersState(w string) types.String {
	if w == "" {
		return types.StringValue(lockmodel.WaitersRace)
	}
	return types.StringValue(w)
}

// validateWaitersConfig reports, at plan time, the waiters rule that ties
// it to limit (the value itself is the validator's): a queued mode (queue
// or handoff, lockmodel's Queued) only on a mutex, in lockmodel's words.
func validateWaitersConfig(cfg lockResourceModel, diags *diag.Diagnostics) {
	l := lockmodel.Lock{Waiters: cfg.Waiters.ValueString()}
	if !l.Queued() || cfg.Limit.IsUnknown() || cfg.Limit.IsNull() {
		return
	}
	l.Limit = int(cfg.Limit.ValueInt64())
	for _, fe := range validation.AsFieldErrors(l.Validate()) {
		if fe.Field == lockmodel.FieldWaiters {
			diags.AddAttributeError(path.Root(lockmodel.FieldWaiters), "Queued Waiters On A Semaphore", fe.Error()+`. Remove waiters or set limit = 1.`)
		}
	}
}
