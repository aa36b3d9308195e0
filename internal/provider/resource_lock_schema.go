package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

func (r *lockResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A Consul lock: a mutex (`limit = 1`) or a semaphore (`limit > 1`) whose key works with " +
			"`consul lock`, api.Lock and api.Semaphore. The resource creates the key create-only with Consul's lock flags, " +
			"adopts a compatible existing key untouched, repairs deleted keys and drifted flags, and refuses to destroy a " +
			"held lock unless `force_destroy` is set. It never changes what holders own: the key's value, session and " +
			"LockIndex. The declaration is recorded at `<registry_prefix>/locks/<name>` for the controller and `consullock run`.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				MarkdownDescription: "Lock name, unique per registry prefix; `consullock run -lock NAME` uses it. Use 1 to 128 letters, digits, `-` or `_`. Changing it replaces the lock.",
				Required:            true,
				Validators:          []validator.String{domainStringRule{check: lockmodel.ValidateName, what: allowedText(lockmodel.ValidateName("name", ""))}},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"prefix": schema.StringAttribute{
				MarkdownDescription: "KV prefix of the lock, as in `consul lock <prefix> <command>`. Leading and trailing `/` are " +
					"ignored. Letters, digits, `-`, `_`, `.`, `:`, `@` and `+` in segments separated by `/`; no `.` or `..` segments. " +
					"Changing it replaces the lock.",
				Required:      true,
				Validators:    []validator.String{keyPathValidator{}},
				PlanModifiers: []planmodifier.String{requiresReplaceIfPathChanged()},
			},
			"key": schema.StringAttribute{
				MarkdownDescription: "The key holders acquire. Default `<prefix>/.lock` (what `consul lock`, api.Lock and api.Semaphore " +
					"use), known at plan. A mutex may name another key at or under the prefix (`service/job/leader`). " +
					"Changing it replaces the lock.",
				Optional:      true,
				Computed:      true,
				Validators:    []validator.String{keyPathValidator{}},
				PlanModifiers: []planmodifier.String{requiresReplaceIfPathChanged()},
			},
			"limit": limitSchemaAttribute(),
			"session_defaults": schema.StringAttribute{
				MarkdownDescription: "Name of the `consullock_session_defaults` profile holders use; it must exist at apply (reference the " +
					"profile's `name`).",
				Optional:   true,
				Validators: []validator.String{domainStringRule{check: lockmodel.ValidateName, what: allowedText(lockmodel.ValidateName("session_defaults", ""))}},
			},
			"max_hold": schema.StringAttribute{
				MarkdownDescription: "Longest one holder may keep the lock, at least `1s` (e.g. `2h`): the controller reports longer " +
					"holds, and ends them in `enforce` mode. Unset: no limit.",
				Optional:   true,
				CustomType: timetypes.GoDurationType{},
				Validators: []validator.String{domainDurationRule{check: lockmodel.ValidateMaxHold, what: allowedText(lockmodel.ValidateMaxHold("max_hold", -1))}},
			},
			"description": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Free text for operators, at most %d characters.", lockmodel.MaxDescriptionLength),
				Optional:            true,
				Validators:          []validator.String{domainStringRule{check: lockmodel.ValidateDescription, what: fmt.Sprintf("text of at most %d characters", lockmodel.MaxDescriptionLength)}},
			},
			"always_held": schema.BoolAttribute{
				MarkdownDescription: "The lock must always have a holder (a singleton daemon): `consullock status` exits 1 without one, " +
					"and `ConsulLockUnheld` fires after `worst_case_gap` unheld. Rewrites only the declaration record. " +
					"Default `false`.",
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
			},
			"paused":         pausedSchemaAttribute(),
			"pause_key":      pauseKeySchemaAttribute(),
			"run_once":       runOnceSchemaAttribute(),
			"holder_service": holderServiceSchemaAttribute(),
			"waiters":        waitersSchemaAttribute(),
			"force_destroy":  forceDestroySchemaAttribute(),
			"flags": schema.StringAttribute{
				MarkdownDescription: "The key's flags in hex (a string: they exceed Terraform's exact numbers): `0x2ddccbc058a50c18` " +
					"(api.Lock) or `0xe0f69a2baa414de0` (api.Semaphore), live after refresh.",
				Computed: true,
			},
			"registry_key": schema.StringAttribute{
				MarkdownDescription: "KV key of the lock's record, `<registry_prefix>/locks/<name>`; empty after a refresh found it " +
					"missing or unreadable (the plan rewrites it).",
				Computed: true,
			},
		},
	}
}

// limitSchemaAttribute is the lock's limit: a mutex (1) or a semaphore, and
// the replacement when a lock changes between them.
func limitSchemaAttribute() schema.Int64Attribute {
	return schema.Int64Attribute{
		MarkdownDescription: fmt.Sprintf("How many holders at once: `1` is a mutex (api.Lock, `consul lock`), `2` to `%d` a "+
			"semaphore (api.Semaphore, `consul lock -n N`). Changing a semaphore's limit rewrites only the Limit in its key: "+
			"current holders keep their slots (a lower limit removes none). Changing between mutex and semaphore replaces "+
			"the lock. Default `1`.", lockmodel.MaxSemaphoreLimit),
		Optional:      true,
		Computed:      true,
		Default:       int64default.StaticInt64(1),
		Validators:    []validator.Int64{int64validator.Between(1, lockmodel.MaxSemaphoreLimit)},
		PlanModifiers: []planmodifier.Int64{requiresReplaceIfLockKindChanged()},
	}
}

// forceDestroySchemaAttribute is the lock's force_destroy: whether destroy
// may end a holder's session.
func forceDestroySchemaAttribute() schema.BoolAttribute {
	return schema.BoolAttribute{
		MarkdownDescription: "Allow destroying a held lock: the holders' sessions are ended (their lock-delay keeps the next " +
			"holder out while their commands stop), then the key is deleted. Needs `session` write on the " +
			"holders' nodes; apply `true` before destroying. Default `false`: destroy fails and names the holder.",
		Optional: true,
		Computed: true,
		Default:  booldefault.StaticBool(false),
	}
}

// requiresReplaceIfPathChanged replaces the lock when a KV path changes
// other than by surrounding slashes ("/jobs/a/" and "jobs/a" are one path).
func requiresReplaceIfPathChanged() planmodifier.String {
	return stringplanmodifier.RequiresReplaceIf(
		func(_ context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
			if req.PlanValue.IsUnknown() || req.StateValue.IsUnknown() {
				return
			}
			resp.RequiresReplace = strings.Trim(req.PlanValue.ValueString(), "/") != strings.Trim(req.StateValue.ValueString(), "/")
		},
		"Changing the path, other than by leading or trailing slashes, replaces the lock.",
		"Changing the path, other than by leading or trailing slashes, replaces the lock.",
	)
}

// requiresReplaceIfLockKindChanged replaces the lock when it changes between
// mutex and semaphore: the key's flags and value format differ, and running
// holders use one client or the other.
func requiresReplaceIfLockKindChanged() planmodifier.Int64 {
	return int64planmodifier.RequiresReplaceIf(
		func(_ context.Context, req planmodifier.Int64Request, resp *int64planmodifier.RequiresReplaceIfFuncResponse) {
			if req.PlanValue.IsUnknown() || req.StateValue.IsUnknown() || req.StateValue.IsNull() {
				return
			}
			resp.RequiresReplace = (req.PlanValue.ValueInt64() > 1) != (req.StateValue.ValueInt64() > 1)
		},
		"Changing between a mutex (limit 1) and a semaphore (limit > 1) replaces the lock.",
		"Changing between a mutex (`limit = 1`) and a semaphore (`limit > 1`) replaces the lock.",
	)
}
