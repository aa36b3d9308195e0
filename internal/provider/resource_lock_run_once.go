package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/validation"

	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// consullock_lock's run_once: the attribute, its model and its conversion
// to ledger.RunOnce (the rules are package ledger's, runonce.go).

// lockRunOnceModel is run_once; a nil pointer in lockResourceModel is an
// unset run_once.
type lockRunOnceModel struct {
	Period           timetypes.GoDuration `tfsdk:"period"`
	Offset           timetypes.GoDuration `tfsdk:"offset"`
	MaxAttempts      types.Int64          `tfsdk:"max_attempts"`
	Keep             types.Int64          `tfsdk:"keep"`
	Schedule         types.String         `tfsdk:"schedule"`
	TimeZone         types.String         `tfsdk:"time_zone"`
	StartingDeadline timetypes.GoDuration `tfsdk:"starting_deadline"`
	NextSlots        types.List           `tfsdk:"next_slots"`
	MaxRuntime       timetypes.GoDuration `tfsdk:"max_runtime"`
	RetryAfter       timetypes.GoDuration `tfsdk:"retry_after"`
	RetryBackoff     types.Float64        `tfsdk:"retry_backoff"`
	Overlap          types.String         `tfsdk:"overlap"`
}

// nextSlotCount is how many slots run_once.next_slots shows.
const nextSlotCount = 3

// sameDeclared reports whether m and o declare the same (next_slots aside).
func (m *lockRunOnceModel) sameDeclared(o *lockRunOnceModel) bool {
	return m.Period == o.Period && m.Offset == o.Offset && m.MaxAttempts == o.MaxAttempts && m.Keep == o.Keep &&
		m.sameSlots(o) && m.StartingDeadline == o.StartingDeadline &&
		m.MaxRuntime == o.MaxRuntime && m.RetryAfter == o.RetryAfter && m.RetryBackoff.Equal(o.RetryBackoff) && m.Overlap.Equal(o.Overlap)
}

// sameSlots reports whether m and o name the same slots.
func (m *lockRunOnceModel) sameSlots(o *lockRunOnceModel) bool {
	return m.Period.Equal(o.Period) && m.Offset.Equal(o.Offset) && m.Schedule.Equal(o.Schedule) && m.TimeZone.Equal(o.TimeZone)
}

// nextSlots is run_once.next_slots for r after now: the next three run IDs
// (ledger.Schedule.NextSlots, or the period slots after now's).
func nextSlots(r *ledger.RunOnce, now time.Time) types.List {
	var ids []attr.Value
	if r.Schedule != "" {
		s, err := r.ParsedSchedule()
		if err != nil {
			return types.ListUnknown(types.StringType)
		}
		for _, at := range s.NextSlots(now, nextSlotCount) {
			ids = append(ids, types.StringValue(s.SlotID(at)))
		}
	} else if r.Period >= ledger.MinRunPeriod {
		_, start := ledger.RunSlot(now, r.Period, r.Offset)
		for i := 1; i <= nextSlotCount; i++ {
			id, _ := ledger.RunSlot(start.Add(time.Duration(i)*r.Period), r.Period, r.Offset)
			ids = append(ids, types.StringValue(id))
		}
	}
	return types.ListValueMust(types.StringType, ids)
}

func runOnceSchemaAttribute() schema.SingleNestedAttribute {
	a := schema.SingleNestedAttribute{
		MarkdownDescription: "Run the command once per run, not merely one at a time, with a run ledger at " +
			"`<registry_prefix>/runs/<name>` ([run once](../guides/run-once.md)). Set one of `period` and `schedule`. " +
			"Mutex only. Changing it rewrites only the declaration record.",
		Optional: true,
		Attributes: map[string]schema.Attribute{
			"period": schema.StringAttribute{
				MarkdownDescription: "Width of a UTC run slot, `1m` to `8784h` (366 days), e.g. `24h`. Shorter than the " +
					"profile's `worst_case_gap` warns: a crashed run may not be taken over within it.",
				Optional:   true,
				CustomType: timetypes.GoDurationType{},
				Validators: []validator.String{domainDurationRule{check: ledger.ValidateRunPeriod, what: allowedText(ledger.ValidateRunPeriod("period", 0))}},
			},
			"schedule": schema.StringAttribute{
				MarkdownDescription: "Instead of `period`: a 5-field cron expression read in `time_zone` (`\"0 2 * * 1-5\"`: " +
					"02:00 on weekdays; day-of-week `0`-`6` or `sun`-`sat`) or `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`. " +
					"Run IDs, early triggers, daylight saving: [run once](../guides/run-once.md#on-a-calendar-in-a-time-zone).",
				Optional:   true,
				Validators: []validator.String{domainStringRule{check: validateScheduleExpr, what: ledger.ScheduleAllowed}},
			},
			"time_zone": schema.StringAttribute{
				MarkdownDescription: "The IANA time zone `schedule` is read in, e.g. `Europe/Berlin`; default `UTC`. Only with " +
					"`schedule` (`period` slots are UTC). Nodes need the same zone rules: the binary embeds Go's tz " +
					"database for systems without one.",
				Optional:      true,
				Computed:      true,
				Validators:    []validator.String{domainStringRule{check: validateTimeZone, what: ledger.TimeZoneAllowed}},
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"starting_deadline": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("A runner starting more than this after its slot exits %d without running it "+
					"([run once](../guides/run-once.md#on-a-calendar-in-a-time-zone)). `1s` to `%s`; unset, a slot may start "+
					"until the next one.",
					ledger.ExitRunPastDeadline, lockmodel.FormatDuration(ledger.MaxStartingDeadline)),
				Optional:   true,
				CustomType: timetypes.GoDurationType{},
				Validators: []validator.String{domainDurationRule{check: validateStartingDeadline, what: allowedText(validateStartingDeadline("starting_deadline", 0))}},
			},
			"next_slots": schema.ListAttribute{
				MarkdownDescription: "The run IDs of the next three slots, known at plan, so that a reviewer sees what " +
					"`schedule` means in `time_zone` (or where `period` slots fall). Set when the slots' attributes change " +
					"(and at create and import), not as time passes: plans of an unchanged lock stay empty.",
				Computed:    true,
				ElementType: types.StringType,
			},
			"offset": schema.StringAttribute{
				MarkdownDescription: "Moves the slot boundaries: slots start at the Unix epoch + `offset` + whole periods (`24h` with " +
					"`2h`: 02:00 UTC). `0s` (default) to less than `period`.",
				Optional:   true,
				CustomType: timetypes.GoDurationType{},
			},
		},
	}
	a.Attributes = withAttributes(a.Attributes, runOnceAttemptAttributes(), runOnceJobControlAttributes(), runOnceOverlapAttributes())
	return a
}

// runOnceAttemptAttributes are how many attempts a run gets and how many
// runs the ledger keeps.
func runOnceAttemptAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"max_attempts": schema.Int64Attribute{
			MarkdownDescription: fmt.Sprintf("Attempts per run ([retries](../guides/run-once.md#what-the-holder-does)); "+
				"then runners exit %d. `1` to `%d`, default `%d`.",
				ledger.ExitRunExhausted, ledger.MaxMaxAttempts, ledger.DefaultMaxAttempts),
			Optional:   true,
			Computed:   true,
			Default:    int64default.StaticInt64(ledger.DefaultMaxAttempts),
			Validators: []validator.Int64{int64validator.Between(1, ledger.MaxMaxAttempts)},
		},
		"keep": schema.Int64Attribute{
			MarkdownDescription: fmt.Sprintf("Runs the ledger keeps, most recent first; the holder that writes it prunes the rest. "+
				"`1` to `%d`, default `%d`.", ledger.MaxRunKeep, ledger.DefaultRunKeep),
			Optional:   true,
			Computed:   true,
			Default:    int64default.StaticInt64(ledger.DefaultRunKeep),
			Validators: []validator.Int64{int64validator.Between(1, ledger.MaxRunKeep)},
		},
	}
}

// runOnce converts a known run_once (nil for none).
func (m *lockRunOnceModel) runOnce(diags *diag.Diagnostics) *ledger.RunOnce {
	if m == nil {
		return nil
	}
	r := &ledger.RunOnce{MaxAttempts: int(m.MaxAttempts.ValueInt64()), Keep: int(m.Keep.ValueInt64())}
	r.Period = goDuration(m.Period, diags)
	r.Offset = goDuration(m.Offset, diags)
	r.Schedule = m.Schedule.ValueString()
	if r.Schedule != "" {
		r.TimeZone = m.TimeZone.ValueString()
	}
	r.StartingDeadline = goDuration(m.StartingDeadline, diags)
	r.MaxRuntime = goDuration(m.MaxRuntime, diags)
	r.RetryAfter = goDuration(m.RetryAfter, diags)
	if v := m.RetryBackoff.ValueFloat64(); !m.RetryBackoff.IsUnknown() && v != ledger.DefaultRetryBackoff {
		r.RetryBackoff = v // the default is recorded as absent, as before retry_backoff existed
	}
	r.Overlap = overlapOf(m.Overlap)
	return r
}

// validateScheduleExpr judges a schedule on its own (its zone is judged by
// time_zone's validator).
func validateScheduleExpr(field, expr string) error {
	_, err := ledger.ParseSchedule(expr, ledger.DefaultTimeZone)
	return renamed(err, ledger.FieldRunOnceSchedule, field)
}

func validateTimeZone(field, zone string) error {
	_, err := ledger.LoadTimeZone(zone)
	return renamed(err, ledger.FieldRunOnceTimeZone, field)
}

func validateStartingDeadline(field string, d time.Duration) error {
	if d == 0 {
		d = -1 // lockmodel reads 0 as "no deadline", which is written as unset here
	}
	err := renamed(ledger.RunOnce{Schedule: "@daily", StartingDeadline: d}.Validate(), ledger.FieldRunOnceStartingDeadline, field)
	if fe := (*validation.FieldError)(nil); errors.As(err, &fe) && d == -1 {
		fe.Value = "0s"
	}
	return err
}

// renamed is err's first error for the lockmodel field from, named field.
func renamed(err error, from, field string) error {
	for _, fe := range validation.AsFieldErrors(err) {
		if fe.Field == from {
			c := *fe
			c.Field = field
			return &c
		}
	}
	return nil
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
// differs (so a refresh does not rewrite an unchanged state). next_slots
// is prior's while the slots are declared the same, else computed from now
// (an import).
func runOnceState(prior *lockRunOnceModel, r *ledger.RunOnce) *lockRunOnceModel {
	if r == nil {
		return nil
	}
	m := &lockRunOnceModel{
		Period:           timetypes.NewGoDurationNull(),
		Offset:           timetypes.NewGoDurationNull(),
		MaxAttempts:      types.Int64Value(int64(r.MaxAttempts)),
		Keep:             types.Int64Value(int64(r.Keep)),
		Schedule:         types.StringNull(),
		TimeZone:         types.StringNull(),
		StartingDeadline: timetypes.NewGoDurationNull(),
		MaxRuntime:       timetypes.NewGoDurationNull(),
		RetryAfter:       timetypes.NewGoDurationNull(),
		RetryBackoff:     types.Float64Value(ledger.DefaultRetryBackoff),
		Overlap:          overlapState(r.Overlap),
	}
	if r.RetryBackoff != 0 {
		m.RetryBackoff = types.Float64Value(r.RetryBackoff)
	}
	if r.Schedule != "" {
		m.Schedule, m.TimeZone = types.StringValue(r.Schedule), types.StringValue(r.TimeZone)
	}
	if prior == nil {
		prior = &lockRunOnceModel{Period: timetypes.NewGoDurationNull(), Offset: timetypes.NewGoDurationNull(), StartingDeadline: timetypes.NewGoDurationNull(),
			MaxRuntime: timetypes.NewGoDurationNull(), RetryAfter: timetypes.NewGoDurationNull()}
	}
	if r.MaxRuntime != 0 {
		m.MaxRuntime = keepDuration(prior.MaxRuntime, r.MaxRuntime)
	}
	if r.RetryAfter != 0 || !(prior.RetryAfter.IsNull() || prior.RetryAfter.IsUnknown()) {
		m.RetryAfter = keepDuration(prior.RetryAfter, r.RetryAfter)
	}
	if r.Period != 0 {
		m.Period = keepDuration(prior.Period, r.Period)
	}
	if r.Schedule == "" && (r.Offset != 0 || !(prior.Offset.IsNull() || prior.Offset.IsUnknown())) {
		m.Offset = keepDuration(prior.Offset, r.Offset)
	}
	if r.StartingDeadline != 0 {
		m.StartingDeadline = keepDuration(prior.StartingDeadline, r.StartingDeadline)
	}
	if m.sameSlots(prior) && !prior.NextSlots.IsNull() && !prior.NextSlots.IsUnknown() {
		m.NextSlots = prior.NextSlots
	} else {
		m.NextSlots = nextSlots(r, time.Now())
	}
	if m.sameDeclared(prior) && m.NextSlots.Equal(prior.NextSlots) {
		return prior
	}
	return m
}

// planRunOnce sets run_once's plan-time values: time_zone (UTC by default
// with a schedule, null without) and next_slots (the state's while the
// slots are declared the same, else computed from now).
func planRunOnce(plan, cfg, state *lockRunOnceModel) {
	if plan == nil || cfg == nil {
		return
	}
	switch {
	case cfg.Schedule.IsNull():
		plan.TimeZone = types.StringNull()
	case cfg.TimeZone.IsNull() && !cfg.Schedule.IsUnknown():
		plan.TimeZone = types.StringValue(ledger.DefaultTimeZone)
	}
	if state != nil && plan.sameSlots(state) && !state.NextSlots.IsNull() {
		plan.NextSlots = state.NextSlots
		return
	}
	if plan.Period.IsUnknown() || plan.Offset.IsUnknown() || plan.Schedule.IsUnknown() || plan.TimeZone.IsUnknown() {
		plan.NextSlots = types.ListUnknown(types.StringType)
		return
	}
	var ds diag.Diagnostics
	r := plan.runOnce(&ds)
	if ds.HasError() || r.WithDefaults().Validate() != nil {
		plan.NextSlots = types.ListUnknown(types.StringType)
		return
	}
	plan.NextSlots = nextSlots(r, time.Now())
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
		r := ledger.RunOnce{Period: goDuration(ro.Period, &ds), Offset: goDuration(ro.Offset, &ds)}
		if !ds.HasError() {
			for _, fe := range validation.AsFieldErrors(r.Validate()) {
				if fe.Field == ledger.FieldRunOnceOffset && r.Period >= ledger.MinRunPeriod {
					c := *fe
					c.Value = ro.Offset.ValueString()
					diags.AddAttributeError(path.Root("run_once").AtName("offset"), "Invalid Run Once Offset", c.Error()+".")
				}
			}
		}
	}
	switch {
	case ro.Schedule.IsUnknown() || ro.Period.IsUnknown() || ro.TimeZone.IsUnknown():
	case !ro.Schedule.IsNull() && !ro.Period.IsNull():
		diags.AddAttributeError(path.Root("run_once").AtName("schedule"), "Conflicting Run Once Slots", fmt.Sprintf(
			"run_once.schedule (%q) and run_once.period (%q) both name the runs' slots: set one of run_once.schedule and "+
				"run_once.period (with run_once.offset).", ro.Schedule.ValueString(), ro.Period.ValueString()))
	case !ro.Schedule.IsNull() && !ro.Offset.IsNull():
		diags.AddAttributeError(path.Root("run_once").AtName("offset"), "Conflicting Run Once Slots",
			"run_once.offset moves run_once.period slots; with run_once.schedule, remove it.")
	case ro.Schedule.IsNull() && ro.Period.IsNull():
		diags.AddAttributeError(path.Root("run_once"), "Missing Run Once Slots",
			"run_once needs run_once.period (fixed UTC slots, e.g. \"24h\") or run_once.schedule (a cron expression, e.g. \"0 2 * * *\").")
	case ro.Schedule.IsNull() && !ro.TimeZone.IsNull():
		diags.AddAttributeError(path.Root("run_once").AtName("time_zone"), "Time Zone Without Schedule",
			fmt.Sprintf("run_once.time_zone (%q) applies to run_once.schedule only: run_once.period slots are UTC. Remove it or set run_once.schedule.", ro.TimeZone.ValueString()))
	}
	if !cfg.Limit.IsUnknown() && !cfg.Limit.IsNull() && cfg.Limit.ValueInt64() > 1 {
		l := lockmodel.Lock{Limit: int(cfg.Limit.ValueInt64()), RunOnce: &ledger.RunOnce{}}
		for _, fe := range validation.AsFieldErrors(l.Validate()) {
			if fe.Field == ledger.FieldRunOnce {
				diags.AddAttributeError(path.Root("run_once"), "Run Once On A Semaphore", fe.Error()+". Remove run_once or set limit = 1.")
			}
		}
	}
}

// runOncePlanWarnings warns at plan time when a schedule has no
// starting_deadline (lockmodel DeadlineWarnings), and when run_once's
// period is shorter than the session profile's worst_case_gap, when the
// profile is already recorded (one consistent read; a profile created in
// the same apply is judged at apply, profileWarnings). A failed read adds
// nothing: apply reports it.
func (r *lockResource) runOncePlanWarnings(ctx context.Context, plan lockResourceModel, diags *diag.Diagnostics) {
	if ro := plan.RunOnce; ro != nil && !ro.Schedule.IsNull() && !ro.Schedule.IsUnknown() && ro.StartingDeadline.IsNull() {
		addWarnings(diags, ledger.RunOnce{Schedule: ro.Schedule.ValueString()}.DeadlineWarnings())
	}
	if r.data == nil || plan.RunOnce == nil || plan.RunOnce.Period.IsUnknown() || plan.RunOnce.Period.IsNull() || plan.SessionDefaults.IsUnknown() || plan.SessionDefaults.IsNull() {
		return
	}
	var ds diag.Diagnostics
	ro := ledger.RunOnce{Period: goDuration(plan.RunOnce.Period, &ds)}
	if ds.HasError() || lockmodel.ValidateName("session_defaults", plan.SessionDefaults.ValueString()) != nil {
		return
	}
	rec, found, err := store.New(r.data.client).Registry(r.data.registryPrefix).Get(ctx, lockmodel.KindSessionDefaults, plan.SessionDefaults.ValueString())
	if err != nil || !found {
		return
	}
	if p, err := record.DecodeSessionProfileRecord(rec.Value); err == nil {
		addWarnings(diags, lockmodel.RunOncePeriodWarnings(ro, p))
	}
}

// runOnceSinceKey is the private-state key holding run_once.Since as the
// record last said (RFC 3339), so that an update which keeps the slots
// keeps it.
const runOnceSinceKey = "run_once_since"

func setRunOnceSince(ctx context.Context, p privateState, l lockmodel.Lock) diag.Diagnostics {
	v := ""
	if l.RunOnce != nil && !l.RunOnce.Since.IsZero() {
		v = l.RunOnce.Since.UTC().Format(time.RFC3339)
	}
	data, _ := json.Marshal(v)
	return p.SetKey(ctx, runOnceSinceKey, data)
}

// runOnceSince is when plan's slots were declared: the recorded time when
// state declares the same slots, else now (created, or the slots changed).
func runOnceSince(ctx context.Context, p privateState, plan, state *lockRunOnceModel, now time.Time) time.Time {
	if plan == nil {
		return time.Time{}
	}
	if state != nil && plan.sameSlots(state) && p != nil {
		data, _ := p.GetKey(ctx, runOnceSinceKey)
		var v string
		if json.Unmarshal(data, &v) == nil && v != "" {
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				return t
			}
		}
	}
	return now.UTC().Truncate(time.Second)
}
