package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// ValidateConfig checks the rule that ties key to prefix and limit; each
// attribute's own rules are checked by its validators. It reads only the
// attributes these rules use: a whole-model Get per lock (the framework
// matches each struct tag against a pattern on every Get) cost as much as
// the rest of our code in a refresh-only plan.
func (r *lockResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg lockResourceModel
	for _, a := range []struct {
		name   string
		target any
	}{{"prefix", &cfg.Prefix}, {"key", &cfg.Key}, {"limit", &cfg.Limit}, {"waiters", &cfg.Waiters}, {"run_once", &cfg.RunOnce}} {
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root(a.name), a.target)...)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	validateRunOnceConfig(cfg, &resp.Diagnostics)
	validateWaitersConfig(cfg, &resp.Diagnostics)
	if cfg.Prefix.IsUnknown() || cfg.Key.IsUnknown() || cfg.Limit.IsUnknown() {
		return
	}
	l := lockmodel.Lock{Prefix: cfg.Prefix.ValueString(), Key: cfg.Key.ValueString(), Limit: 1}
	if !cfg.Limit.IsNull() {
		l.Limit = int(cfg.Limit.ValueInt64())
	}
	if err := l.KeyPlacementError(); err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("key"), "Invalid Key", err.Error()+".")
	}
}

// ModifyPlan shows at plan time what apply will write: the key, the flags
// and the registry key; and warns about limit changes that running
// contenders must follow.
func (r *lockResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.planKeepsState(ctx, req) {
		return
	}
	var plan, cfg lockResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	key, flags, registryKey := r.computed(plan.Name, plan.Prefix, plan.Limit)
	if cfg.Key.IsNull() {
		plan.Key = key
	}
	plan.Flags, plan.RegistryKey, plan.PauseKey = flags, registryKey, r.pauseKeyOf(plan.Name)
	if r.data != nil {
		r.data.planned.addLock(knownString(plan.Name), knownString(plan.Prefix), knownString(plan.Key))
	}
	r.checkProfileAtPlan(ctx, req, plan, &resp.Diagnostics)
	var state lockResourceModel
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	planRunOnce(plan.RunOnce, cfg.RunOnce, state.RunOnce)
	r.runOncePlanWarnings(ctx, plan, &resp.Diagnostics)
	maxRuntimePlanWarnings(plan, &resp.Diagnostics)
	r.holderServicePlanWarnings(ctx, plan, &resp.Diagnostics)

	if !req.State.Raw.IsNull() {
		// A computed key follows the prefix; the attribute's own plan
		// modifier cannot see that value yet.
		if !plan.Key.IsUnknown() && !state.Key.IsNull() && strings.Trim(plan.Key.ValueString(), "/") != strings.Trim(state.Key.ValueString(), "/") {
			resp.RequiresReplace = append(resp.RequiresReplace, path.Root("key"))
		}
		if !plan.Limit.IsUnknown() {
			from, to := state.Limit.ValueInt64(), plan.Limit.ValueInt64()
			if from > 1 && to > 1 && from != to {
				resp.Diagnostics.AddAttributeWarning(path.Root("limit"), "Semaphore Limit Change",
					fmt.Sprintf("Apply rewrites the Limit in %s from %d to %d and keeps the current holders. Contenders started with "+
						"`consul lock -n %d` (or api.Semaphore with Limit %d) refuse a holder table with another limit "+
						"(\"semaphore limit conflict\") until they are restarted with -n %d.",
						plan.Key.ValueString(), from, to, from, from, to))
			}
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}

// knownString is v's value, "" when null or unknown.
func knownString(v types.String) string {
	if v.IsNull() || v.IsUnknown() {
		return ""
	}
	return v.ValueString()
}

// checkProfileAtPlan makes a session_defaults name that is neither
// declared in this plan nor recorded in Consul a plan error, as apply
// would find it (profileNotFound). A name unknown at plan, unchanged
// from the state, or that Consul cannot be asked about is left to apply.
func (r *lockResource) checkProfileAtPlan(ctx context.Context, req resource.ModifyPlanRequest, plan lockResourceModel, diags *diag.Diagnostics) {
	name := knownString(plan.SessionDefaults)
	if r.data == nil || name == "" || r.data.planned.hasProfile(name) {
		return
	}
	if !req.State.Raw.IsNull() {
		var prior types.String
		if d := req.State.GetAttribute(ctx, path.Root("session_defaults"), &prior); !d.HasError() && knownString(prior) == name {
			return
		}
	}
	_, found, err := store.New(r.data.client).Registry(r.data.registryPrefix).Get(ctx, lockmodel.KindSessionDefaults, name)
	if err != nil {
		tflog.Debug(ctx, "cannot read the session profile at plan; apply checks it", map[string]any{"session_defaults": name, "error": err.Error()})
		return
	}
	if !found {
		r.profileNotFound(lockmodel.Lock{SessionDefaults: name}, diags)
	}
}

// computed returns what ModifyPlan computes from a lock's inputs, unknown
// where an input is: the default key of prefix (<prefix>/.lock), the flags
// of limit and the registry key of name.
func (r *lockResource) computed(name, prefix types.String, limit types.Int64) (key, flags, registryKey types.String) {
	key, flags, registryKey = types.StringUnknown(), types.StringUnknown(), types.StringUnknown()
	if !prefix.IsUnknown() {
		if p, err := lockmodel.NormalizeKeyPath("prefix", prefix.ValueString()); err == nil {
			key = types.StringValue(lockmodel.DefaultLockKey(p))
		}
	}
	if !limit.IsUnknown() {
		flags = types.StringValue(lockmodel.FormatFlags(lockmodel.Lock{Limit: int(limit.ValueInt64())}.Flags()))
	}
	if r.data != nil && !name.IsUnknown() {
		registryKey = types.StringValue(lockmodel.RegistryKey(r.data.registryPrefix, lockmodel.KindLock, name.ValueString()))
	}
	return key, flags, registryKey
}

// planKeepsState tells whether the plan is the prior state unchanged and
// the state already holds every value ModifyPlan computes (key, flags,
// registry_key): the usual plan, where nothing was changed. It reads only
// the attributes it needs, because a whole-model Get and Set per resource
// cost more than the rest of a refresh-only plan.
func (r *lockResource) planKeepsState(ctx context.Context, req resource.ModifyPlanRequest) bool {
	if req.State.Raw.IsNull() || !req.Plan.Raw.Equal(req.State.Raw) {
		return false
	}
	var name, prefix, key, flags, registryKey types.String
	var limit types.Int64
	var diags diag.Diagnostics
	diags.Append(req.State.GetAttribute(ctx, path.Root("name"), &name)...)
	diags.Append(req.State.GetAttribute(ctx, path.Root("prefix"), &prefix)...)
	diags.Append(req.State.GetAttribute(ctx, path.Root("key"), &key)...)
	diags.Append(req.State.GetAttribute(ctx, path.Root("limit"), &limit)...)
	diags.Append(req.State.GetAttribute(ctx, path.Root("flags"), &flags)...)
	diags.Append(req.State.GetAttribute(ctx, path.Root("registry_key"), &registryKey)...)
	if diags.HasError() {
		return false // the full path reports it
	}
	wantKey, wantFlags, wantRegistryKey := r.computed(name, prefix, limit)
	return key.Equal(wantKey) && flags.Equal(wantFlags) && registryKey.Equal(wantRegistryKey)
}
