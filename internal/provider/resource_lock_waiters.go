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
)

// consullock_lock's waiters: the attribute and its conversion to
// lockmodel.Lock.Waiters (the rules are lockmodel's, waiters.go).

func waitersSchemaAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		MarkdownDescription: "How waiting `consullock run` processes take the lock when it is released. " +
			"`race` (the default, and what `consul lock` and api.Lock do): every waiter blocks on the lock key, so a release " +
			"wakes all of them and each tries to acquire: one Raft write per waiter and hand-over, all but one refused. " +
			"`queue`: each waiting runner first writes an entry `<prefix>/.queue/<session>`, acquired with its own session " +
			"(so Consul clears it when the session ends), and waits in the order of the entries' CreateIndex: the first in " +
			"line blocks on the lock key, every other entry blocks on the entry before it. A release then wakes one waiter, " +
			"and the hand-over costs the same requests for 2 waiters as for 100. Acquiring stays the same lock transaction " +
			"(the fencing token is unchanged); the queue only decides who tries, so waiters that do not queue (`consul lock`, " +
			"older runners) are still excluded and may still win a race. The price is liveness after a crash: a waiter killed " +
			"while first in line keeps the waiters behind it from trying until Consul ends its session (at most about " +
			"2 x `ttl` after its last renewal), as a killed holder does. " +
			"`handoff`: waiters queue as with `queue`, and a releasing `consullock run` hands the lock to the first in line " +
			"in its release transaction, so that waiter wakes holding it: one Raft write fewer per hand-over. Its price is a " +
			"longer stall after a crash: a waiter killed or paused while first in line is given the lock, which then waits " +
			"for Consul to end that session and for its lock-delay (at most 2 x `ttl` + `lock_delay`, against 2 x `ttl` with " +
			"`queue`). A run-once lock's release that records its outcome does not hand off. " +
			"Workers need `key_prefix \"<prefix>/.queue/\"` write " +
			"(`consullock_acl_policy`'s `queue_prefixes`) for `queue` and `handoff`, which are only on a mutex (`limit = 1`): a " +
			"semaphore's waiters already keep a contender key each. Changing it rewrites only the declaration record; a runner reads it when it " +
			"starts. Default `race`.",
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
	for _, fe := range lockmodel.AsFieldErrors(l.Validate()) {
		if fe.Field == lockmodel.FieldWaiters {
			diags.AddAttributeError(path.Root(lockmodel.FieldWaiters), "Queued Waiters On A Semaphore", fe.Error()+`. Remove waiters or set limit = 1.`)
		}
	}
}
