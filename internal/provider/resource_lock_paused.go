package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// consullock_lock.paused: the lock's pause record (record.Pause) at
// <registry>/pauses/<name>. Set, Terraform owns the record: apply writes
// it (by "terraform"), refresh reads it back, so a `consullock pause` with
// another reason or a `consullock resume` shows as drift. Unset, the
// provider never reads or writes the record: `consullock pause` and
// `resume` own it. Removing the attribute (set -> unset) resumes the
// lock; destroying the lock deletes its pause record.

// pausedBy is the "by" of a pause the provider writes (`consullock
// resume` refuses it without -force).
const pausedBy = record.PausedByTerraform

func pausedSchemaAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		MarkdownDescription: fmt.Sprintf("Pauses the lock, with this reason (one line, at most %d characters): no run starts "+
			"([pause](../guides/runner.md#pause-and-release)). Stored at `pause_key`. Set, Terraform owns the pause: "+
			"a `consullock pause` or `consullock resume` shows as drift in the next plan and apply puts it back. Removing it "+
			"resumes the lock. Unset (the default), the provider leaves the pause record alone until destroy, which deletes "+
			"it with the lock in one transaction.", record.MaxPauseReasonLength),
		Optional:   true,
		Validators: []validator.String{domainStringRule{check: record.ValidateReason, what: fmt.Sprintf("one line of at most %d characters", record.MaxPauseReasonLength)}},
	}
}

func pauseKeySchemaAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		MarkdownDescription: "Consul KV key of the lock's pause record, `<registry_prefix>/pauses/<name>`, known at plan time. " +
			"Put it in the workers' `consullock_acl_policy.read_keys`: reading it is all a runner needs for pauses (a runner " +
			"that may not read it warns and runs as if not paused).",
		Computed: true,
	}
}

// pauseKeyOf is pause_key for name, unknown while name is.
func (r *lockResource) pauseKeyOf(name types.String) types.String {
	if r.data == nil || name.IsUnknown() {
		return types.StringUnknown()
	}
	return types.StringValue(record.PauseKey(r.data.registryPrefix, name.ValueString()))
}

// applyPaused makes the pause record follow plan after a create or an
// update (prior is the state before, nil on create): written while paused
// is set, deleted when it was set and is no more, untouched otherwise.
func (r *lockResource) applyPaused(ctx context.Context, plan lockResourceModel, prior *lockResourceModel, diags *diag.Diagnostics) {
	reg := store.New(r.data.client).Registry(r.data.registryPrefix)
	name := plan.Name.ValueString()
	switch {
	case !plan.Paused.IsNull():
		old, index, err := reg.ReadPause(ctx, name)
		if err != nil && !isRecordError(err) {
			addConsulError(diags, "Cannot Pause Lock", err)
			return
		}
		if old != nil && old.Reason == plan.Paused.ValueString() {
			return
		}
		p := record.Pause{Lock: name, Reason: plan.Paused.ValueString(), By: pausedBy, At: time.Now().UTC().Truncate(time.Second)}
		if _, err := reg.WritePause(ctx, p, index); err != nil {
			addConsulError(diags, "Cannot Pause Lock", err)
		}
	case prior != nil && !prior.Paused.IsNull():
		if err := reg.DeletePause(ctx, name, 0); err != nil {
			addConsulError(diags, "Cannot Resume Lock", err)
		}
	}
}

// readPaused refreshes paused when Terraform owns it (set in state): the
// record's reason, or null when the lock is not paused.
func (r *lockResource) readPaused(ctx context.Context, state *lockResourceModel, diags *diag.Diagnostics) {
	state.PauseKey = types.StringValue(record.PauseKey(r.data.registryPrefix, state.Name.ValueString()))
	if state.Paused.IsNull() {
		return
	}
	p, _, err := store.New(r.data.client).Registry(r.data.registryPrefix).ReadPause(ctx, state.Name.ValueString())
	switch {
	case err != nil && !isRecordError(err):
		addConsulError(diags, "Cannot Read Pause", err)
	case err != nil:
		diags.AddAttributeWarning(path.Root("paused"), "Unreadable Pause Record",
			fmt.Sprintf("The pause record %s cannot be read; the next apply rewrites it.\n\n%s", state.PauseKey.ValueString(), err))
		state.Paused = types.StringValue("")
	case p == nil:
		state.Paused = types.StringNull()
	default:
		state.Paused = types.StringValue(p.Reason)
	}
}

// isRecordError: err is a record that does not decode, not a Consul
// error.
func isRecordError(err error) bool {
	var ce *consul.Error
	return err != nil && !errors.As(err, &ce)
}

// pauseLeftBehind warns that a destroyed lock's pause record is still
// there (the lock's delete removes it in its own transaction when the
// token may).
func pauseLeftBehind(key string, err error, diags *diag.Diagnostics) {
	diags.AddWarning("Pause Record Left Behind",
		fmt.Sprintf("The lock was destroyed but its pause record %s could not be deleted; delete it with consul kv delete.\n\n%s", key, err))
}
