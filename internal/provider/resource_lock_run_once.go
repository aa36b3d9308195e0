package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// consullock_lock's run_once: the attribute, its model and its conversion
// to lockmodel.RunOnce (the rules are lockmodel's, runonce.go).

// lockRunOnceModel is run_once; a nil pointer in lockResourceModel is an
// unset run_once.
type lockRunOnceModel struct {
	Period      timetypes.GoDuration `tfsdk:"period"`
	Offset      timetypes.GoDuration `tfsdk:"offset"`
	MaxAttempts types.Int64          `tfsdk:"max_attempts"`
	Keep        types.Int64          `tfsdk:"keep"`
}

func runOnceSchemaAttribute() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		MarkdownDescription: "Run the command once per run, not merely one at a time: `consullock run` records each attempt in the " +
			"run ledger `<registry_prefix>/runs/<name>` and skips a run that already succeeded. Without `-run-id` " +
			"the run ID is the UTC `period` slot of the runner's start. Mutex only. Changing it rewrites only the " +
			"declaration record.",
		Optional: true,
		Attributes: map[string]schema.Attribute{
			"period": schema.StringAttribute{
				MarkdownDescription: "Width of a run slot, `1m` to `8784h` (366 days), e.g. `24h`. Triggers must fire further from a slot " +
					"boundary than the nodes' clock skew. Shorter than the profile's `worst_case_gap` warns: a crashed " +
					"run may not be taken over within it.",
				Required:   true,
				CustomType: timetypes.GoDurationType{},
				Validators: []validator.String{domainDurationRule{check: lockmodel.ValidateRunPeriod, what: allowedText(lockmodel.ValidateRunPeriod("period", 0))}},
			},
			"offset": schema.StringAttribute{
				MarkdownDescription: "Moves the slot boundaries: slots start at the Unix epoch + `offset` + whole periods (`24h` with " +
					"`2h`: 02:00 UTC). `0s` (default) to less than `period`.",
				Optional:   true,
				CustomType: timetypes.GoDurationType{},
			},
			"max_attempts": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Attempts per run: a run that failed, lost its lock or whose holder crashed is "+
					"attempted again by the next holder until this many attempts were made; then runners exit %d. `1` to `%d`, default `%d`.",
					lockmodel.ExitRunExhausted, lockmodel.MaxMaxAttempts, lockmodel.DefaultMaxAttempts),
				Optional:   true,
				Computed:   true,
				Default:    int64default.StaticInt64(lockmodel.DefaultMaxAttempts),
				Validators: []validator.Int64{int64validator.Between(1, lockmodel.MaxMaxAttempts)},
			},
			"keep": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Runs the ledger keeps, most recent first; the holder that writes it prunes the rest. "+
					"`1` to `%d`, default `%d`.", lockmodel.MaxRunKeep, lockmodel.DefaultRunKeep),
				Optional:   true,
				Computed:   true,
				Default:    int64default.StaticInt64(lockmodel.DefaultRunKeep),
				Validators: []validator.Int64{int64validator.Between(1, lockmodel.MaxRunKeep)},
			},
		},
	}
}

// runOnce converts a known run_once (nil for none).
func (m *lockRunOnceModel) runOnce(diags *diag.Diagnostics) *lockmodel.RunOnce {
	if m == nil {
		return nil
	}
	r := &lockmodel.RunOnce{MaxAttempts: int(m.MaxAttempts.ValueInt64()), Keep: int(m.Keep.ValueInt64())}
	r.Period = goDuration(m.Period, diags)
	r.Offset = goDuration(m.Offset, diags)
	return r
}

// goDuration is d's value; 0 when null or unknown.
func goDuration(d timetypes.GoDuration, diags *diag.Diagnostics) time.Duration {
	if d.IsNull() || d.IsUnknown() {
		return 0
	}
	v, ds := d.ValueGoDuration()
	diags.Append(ds...)
	return v
}

// runOnceState is run_once as recorded (r, normalised), keeping prior's
// spelling of values that say the same, and prior itself when nothing
// differs (so a refresh does not rewrite an unchanged state).
func runOnceState(prior *lockRunOnceModel, r *lockmodel.RunOnce) *lockRunOnceModel {
	if r == nil {
		return nil
	}
	m := &lockRunOnceModel{
		Period:      keepDuration(timetypes.NewGoDurationNull(), r.Period),
		Offset:      timetypes.NewGoDurationNull(),
		MaxAttempts: types.Int64Value(int64(r.MaxAttempts)),
		Keep:        types.Int64Value(int64(r.Keep)),
	}
	if prior != nil {
		m.Period = keepDuration(prior.Period, r.Period)
		if r.Offset != 0 || !(prior.Offset.IsNull() || prior.Offset.IsUnknown()) {
			m.Offset = keepDuration(prior.Offset, r.Offset)
		}
		if *m == *prior {
			return prior
		}
	} else if r.Offset != 0 {
		m.Offset = keepDuration(timetypes.NewGoDurationNull(), r.Offset)
	}
	return m
}

// validateRunOnceConfig reports, at plan time, the run_once rules that tie
// attributes together (each attribute's own range is its validators'):
// offset below period, and run_once only on a mutex.
func validateRunOnceConfig(cfg lockResourceModel, diags *diag.Diagnostics) {
	ro := cfg.RunOnce
	if ro == nil {
		return
	}
	if !ro.Period.IsUnknown() && !ro.Offset.IsUnknown() && !ro.Offset.IsNull() {
		var ds diag.Diagnostics
		r := lockmodel.RunOnce{Period: goDuration(ro.Period, &ds), Offset: goDuration(ro.Offset, &ds)}
		if !ds.HasError() {
			for _, fe := range lockmodel.AsFieldErrors(r.Validate()) {
				if fe.Field == lockmodel.FieldRunOnceOffset && r.Period >= lockmodel.MinRunPeriod {
					c := *fe
					c.Value = ro.Offset.ValueString()
					diags.AddAttributeError(path.Root("run_once").AtName("offset"), "Invalid Run Once Offset", c.Error()+".")
				}
			}
		}
	}
	if !cfg.Limit.IsUnknown() && !cfg.Limit.IsNull() && cfg.Limit.ValueInt64() > 1 {
		l := lockmodel.Lock{Limit: int(cfg.Limit.ValueInt64()), RunOnce: &lockmodel.RunOnce{}}
		for _, fe := range lockmodel.AsFieldErrors(l.Validate()) {
			if fe.Field == lockmodel.FieldRunOnce {
				diags.AddAttributeError(path.Root("run_once"), "Run Once On A Semaphore", fe.Error()+". Remove run_once or set limit = 1.")
			}
		}
	}
}

// runOncePlanWarnings warns at plan time when run_once's period is shorter
// than the session profile's worst_case_gap, when the profile is already
// recorded (one consistent read; a profile created in the same apply is
// judged at apply, profileWarnings). A failed read adds nothing: apply
// reports it.
func (r *lockResource) runOncePlanWarnings(ctx context.Context, plan lockResourceModel, diags *diag.Diagnostics) {
	if r.data == nil || plan.RunOnce == nil || plan.RunOnce.Period.IsUnknown() || plan.SessionDefaults.IsUnknown() || plan.SessionDefaults.IsNull() {
		return
	}
	var ds diag.Diagnostics
	ro := lockmodel.RunOnce{Period: goDuration(plan.RunOnce.Period, &ds)}
	if ds.HasError() || lockmodel.ValidateName("session_defaults", plan.SessionDefaults.ValueString()) != nil {
		return
	}
	rec, found, err := r.data.client.Registry(r.data.registryPrefix).Get(ctx, lockmodel.KindSessionDefaults, plan.SessionDefaults.ValueString())
	if err != nil || !found {
		return
	}
	if p, err := lockmodel.DecodeSessionProfileRecord(rec.Value); err == nil {
		addWarnings(diags, ro.PeriodWarnings(p))
	}
}
