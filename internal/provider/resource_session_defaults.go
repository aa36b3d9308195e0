package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

var (
	_ resource.Resource                   = (*sessionDefaultsResource)(nil)
	_ resource.ResourceWithConfigure      = (*sessionDefaultsResource)(nil)
	_ resource.ResourceWithImportState    = (*sessionDefaultsResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*sessionDefaultsResource)(nil)
	_ resource.ResourceWithValidateConfig = (*sessionDefaultsResource)(nil)
)

// NewSessionDefaultsResource is the consullock_session_defaults resource.
func NewSessionDefaultsResource() resource.Resource {
	return &sessionDefaultsResource{}
}

// sessionDefaultsResource declares a session profile. Its remote object is
// the registry record <registry>/session-defaults/<name>; lock holders
// (`consullock run`) create their sessions from it and the controller checks
// live sessions against it.
type sessionDefaultsResource struct {
	data *providerData
}

type sessionDefaultsModel struct {
	Name          types.String         `tfsdk:"name"`
	TTL           timetypes.GoDuration `tfsdk:"ttl"`
	LockDelay     timetypes.GoDuration `tfsdk:"lock_delay"`
	Behavior      types.String         `tfsdk:"behavior"`
	NodeChecks    types.List           `tfsdk:"node_checks"`
	ServiceChecks types.List           `tfsdk:"service_checks"`
	RenewEvery    timetypes.GoDuration `tfsdk:"renew_every"`
	WorstCaseGap  timetypes.GoDuration `tfsdk:"worst_case_gap"`
	RegistryKey   types.String         `tfsdk:"registry_key"`
}

type sessionServiceCheckModel struct {
	ID        types.String `tfsdk:"id"`
	Namespace types.String `tfsdk:"namespace"`
}

var sessionServiceCheckAttrTypes = map[string]attr.Type{
	"id":        types.StringType,
	"namespace": types.StringType,
}

func (r *sessionDefaultsResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_session_defaults"
}

func (r *sessionDefaultsResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A named session profile: the TTL, lock-delay, behavior and health checks that lock holders " +
			"give their Consul sessions. It is recorded in Consul KV at `<registry_prefix>/session-defaults/<name>`, " +
			"where `consullock run` and the controller read it. `worst_case_gap` shows at plan time how long a crashed " +
			"holder can leave the job unrun.",
		Attributes: withAttributes(map[string]schema.Attribute{
			"name": schema.StringAttribute{
				MarkdownDescription: "Profile name, referenced by `consullock_lock.session_defaults`. Use 1 to 128 letters, digits, `-` or `_`. Changing it replaces the profile.",
				Required:            true,
				Validators:          []validator.String{domainStringRule{check: lockmodel.ValidateName, what: allowedText(lockmodel.ValidateName("name", ""))}},
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"ttl": schema.StringAttribute{
				MarkdownDescription: "Session TTL, `10s` to `24h`; Consul invalidates an unrenewed session after about 2 x TTL. Default " +
					"`15s`.",
				Optional:   true,
				Computed:   true,
				CustomType: timetypes.GoDurationType{},
				Default:    stringdefault.StaticString(lockmodel.FormatDuration(lockmodel.DefaultSessionTTL)),
				Validators: []validator.String{domainDurationRule{check: lockmodel.ValidateTTL, what: allowedText(lockmodel.ValidateTTL("ttl", -1))}},
			},
			"lock_delay": schema.StringAttribute{
				MarkdownDescription: "How long Consul keeps a key unacquirable after the holder's session is invalidated (destroyed, " +
					"expired, failed a check); a release starts none. `0s` to `60s` (Consul silently clamps more); `0s` " +
					"warns: safe only for idempotent work. Default `15s`.",
				Optional:   true,
				Computed:   true,
				CustomType: timetypes.GoDurationType{},
				Default:    stringdefault.StaticString(lockmodel.FormatDuration(lockmodel.DefaultLockDelay)),
				Validators: []validator.String{domainDurationRule{check: lockmodel.ValidateLockDelay, what: allowedText(lockmodel.ValidateLockDelay("lock_delay", -1))}},
			},
			"behavior": schema.StringAttribute{
				MarkdownDescription: "What Consul does with held keys when the session is invalidated: `release` keeps them, `delete` " +
					"deletes them (as api.Semaphore and `consul lock -n`). Default `release`.",
				Optional:   true,
				Computed:   true,
				Default:    stringdefault.StaticString(string(lockmodel.BehaviorRelease)),
				Validators: []validator.String{stringvalidator.OneOf(lockmodel.Behaviors()...)},
			},
			"renew_every": schema.StringAttribute{
				MarkdownDescription: "How often holders renew: above `0s`, below ttl/2 (one renewal may fail). Default ttl/3, shown at " +
					"plan.",
				Optional:   true,
				Computed:   true,
				CustomType: timetypes.GoDurationType{},
			},
			"worst_case_gap": schema.StringAttribute{
				MarkdownDescription: "2 x ttl + lock_delay: the longest nobody runs the job after a holder crashes " +
					"(from its last renewal or a later leader election), and the longest a holder whose session was " +
					"invalidated (e.g. partitioned) may still run.",
				Computed:   true,
				CustomType: timetypes.GoDurationType{},
			},
			"registry_key": schema.StringAttribute{
				MarkdownDescription: "Consul KV key of the profile's record, `<registry_prefix>/session-defaults/<name>`.",
				Computed:            true,
			},
		}, sessionChecksAttributes()),
	}
}

// sessionChecksAttributes are the health checks a session is bound to.
func sessionChecksAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"node_checks": schema.ListAttribute{
			MarkdownDescription: "Node checks the session is bound to; a failing one invalidates it. Default `[\"serfHealth\"]`; `[]` " +
				"warns (a dead node's lock then lasts until the TTL lapses).",
			Optional:    true,
			Computed:    true,
			ElementType: types.StringType,
			Default: listdefault.StaticValue(types.ListValueMust(types.StringType,
				[]attr.Value{types.StringValue(lockmodel.DefaultNodeCheck)})),
		},
		"service_checks": schema.ListNestedAttribute{
			MarkdownDescription: "Service health checks the session is bound to.",
			Optional:            true,
			NestedObject: schema.NestedAttributeObject{
				Attributes: map[string]schema.Attribute{
					"id": schema.StringAttribute{
						MarkdownDescription: "Check ID, e.g. `service:report`.",
						Required:            true,
					},
					"namespace": schema.StringAttribute{
						MarkdownDescription: "Namespace of the check's service (Consul Enterprise).",
						Optional:            true,
						Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
					},
				},
			},
		},
	}
}

func (r *sessionDefaultsResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

// profile converts the model into the domain type. Unknown fields are
// reported in unknown (by attribute name) and left at their zero value; null
// fields take the values Terraform's defaults would give them.
func (m sessionDefaultsModel) profile(ctx context.Context) (p lockmodel.SessionProfile, unknown map[string]bool, diags diag.Diagnostics) {
	unknown = map[string]bool{}
	p.Name = m.Name.ValueString()
	if m.Name.IsUnknown() {
		unknown["name"] = true
	}
	p.TTL = durationOf(m.TTL, lockmodel.DefaultSessionTTL, "ttl", unknown, &diags)
	p.LockDelay = durationOf(m.LockDelay, lockmodel.DefaultLockDelay, "lock_delay", unknown, &diags)
	p.RenewEvery = durationOf(m.RenewEvery, 0, "renew_every", unknown, &diags)
	p.Behavior = lockmodel.Behavior(m.Behavior.ValueString())
	if m.Behavior.IsUnknown() {
		unknown["behavior"] = true
	}
	switch {
	case m.NodeChecks.IsUnknown():
		unknown["node_checks"] = true
	case !m.NodeChecks.IsNull():
		var checks []types.String
		diags.Append(m.NodeChecks.ElementsAs(ctx, &checks, false)...)
		p.NodeChecks = []string{}
		for _, c := range checks {
			if c.IsUnknown() {
				unknown["node_checks"] = true
				continue
			}
			p.NodeChecks = append(p.NodeChecks, c.ValueString())
		}
	}
	switch {
	case m.ServiceChecks.IsUnknown():
		unknown["service_checks"] = true
	case !m.ServiceChecks.IsNull():
		var checks []sessionServiceCheckModel
		diags.Append(m.ServiceChecks.ElementsAs(ctx, &checks, true)...)
		for _, c := range checks {
			if c.ID.IsUnknown() || c.Namespace.IsUnknown() {
				unknown["service_checks"] = true
				continue
			}
			p.ServiceChecks = append(p.ServiceChecks, lockmodel.ServiceCheck{ID: c.ID.ValueString(), Namespace: c.Namespace.ValueString()})
		}
	}
	return p, unknown, diags
}

// setProfile writes p (a resolved profile, as records hold it) into the
// model. Values equal to what the model already holds keep their
// spelling ("1m" stays "1m", not "1m0s"), so a refresh shows no false drift.
func (m *sessionDefaultsModel) setProfile(p lockmodel.Profile, registryKey string) {
	m.Name = types.StringValue(p.Name)
	m.TTL = keepDuration(m.TTL, p.TTL)
	m.LockDelay = keepDuration(m.LockDelay, p.LockDelay)
	m.Behavior = types.StringValue(string(p.Behavior))
	if !m.RenewEvery.IsNull() || p.RenewEvery != lockmodel.DefaultRenewEvery(p.TTL) {
		m.RenewEvery = keepDuration(m.RenewEvery, p.RenewEvery)
	}
	// else: read with no prior value (an import) and the default of the
	// ttl: it stays null, so that -generate-config-out does not pin it and
	// it keeps following ttl (ModifyPlan keeps it null while ttl stays).
	m.WorstCaseGap = keepDurationAs(m.WorstCaseGap, p.WorstCaseGap(), lockmodel.FormatDuration)
	checks := make([]attr.Value, 0, len(p.NodeChecks))
	for _, c := range p.NodeChecks {
		checks = append(checks, types.StringValue(c))
	}
	m.NodeChecks = types.ListValueMust(types.StringType, checks)
	svcType := types.ObjectType{AttrTypes: sessionServiceCheckAttrTypes}
	if len(p.ServiceChecks) == 0 && (m.ServiceChecks.IsNull() || m.ServiceChecks.IsUnknown()) {
		m.ServiceChecks = types.ListNull(svcType)
	} else {
		svc := make([]attr.Value, 0, len(p.ServiceChecks))
		for _, c := range p.ServiceChecks {
			ns := types.StringNull()
			if c.Namespace != "" {
				ns = types.StringValue(c.Namespace)
			}
			svc = append(svc, types.ObjectValueMust(sessionServiceCheckAttrTypes, map[string]attr.Value{
				"id": types.StringValue(c.ID), "namespace": ns,
			}))
		}
		m.ServiceChecks = types.ListValueMust(svcType, svc)
	}
	m.RegistryKey = types.StringValue(registryKey)
}

// durationOf reads a duration attribute: null gives ifNull, unknown marks
// field in unknown.
func durationOf(v timetypes.GoDuration, ifNull time.Duration, field string, unknown map[string]bool, diags *diag.Diagnostics) time.Duration {
	switch {
	case v.IsUnknown():
		unknown[field] = true
		return 0
	case v.IsNull():
		return ifNull
	}
	d, ds := v.ValueGoDuration()
	diags.Append(ds...)
	return d
}

// ValidateConfig applies the profile rules that involve several attributes
// or list elements (renew_every against ttl, check IDs); single attributes
// are checked by their own validators.
func (r *sessionDefaultsResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg sessionDefaultsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, unknown, diags := cfg.profile(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if unknown["ttl"] {
		unknown["renew_every"] = true
	}
	for _, fe := range validation.AsFieldErrors(p.Validate()) {
		switch fe.Field {
		case "node_checks", "service_checks", "renew_every":
			if !unknown[fe.Field] {
				resp.Diagnostics.AddAttributeError(path.Root(fe.Field), "Invalid Session Profile", fe.Error()+".")
			}
		}
	}
}

// ModifyPlan shows what follows from the inputs before apply: renew_every's
// default, worst_case_gap and registry_key; and warns about risky choices.
func (r *sessionDefaultsResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan, cfg sessionDefaultsModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, unknown, diags := plan.profile(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfg.RenewEvery.IsNull() {
		switch {
		case unknown["ttl"]:
			plan.RenewEvery = timetypes.NewGoDurationUnknown()
		case r.importedDefaultRenewEvery(ctx, req, p.TTL):
			plan.RenewEvery = timetypes.NewGoDurationNull()
			p.RenewEvery = lockmodel.DefaultRenewEvery(p.TTL)
		default:
			plan.RenewEvery = keepDuration(plan.RenewEvery, lockmodel.DefaultRenewEvery(p.TTL))
			p.RenewEvery = lockmodel.DefaultRenewEvery(p.TTL)
		}
	}
	if unknown["ttl"] || unknown["lock_delay"] {
		plan.WorstCaseGap = timetypes.NewGoDurationUnknown()
	} else {
		plan.WorstCaseGap = keepDurationAs(plan.WorstCaseGap, lockmodel.WorstCaseGap(p.TTL, p.LockDelay), lockmodel.FormatDuration)
	}
	plan.RegistryKey = types.StringUnknown()
	if r.data != nil && !unknown["name"] {
		r.data.planned.addProfile(p.Name)
		plan.RegistryKey = types.StringValue(lockmodel.RegistryKey(r.data.registryPrefix, lockmodel.KindSessionDefaults, p.Name))
	}
	var warnings []validation.Warning
	for _, w := range p.Warnings() {
		if !unknown[w.Field] {
			warnings = append(warnings, w)
		}
	}
	// Whether a runner cut off from Consul can stop in time depends on all
	// the timing attributes: judge the configuration (defaults filled in
	// as the runner fills them) only when they are all known.
	if cp, cu, d := cfg.profile(ctx); !d.HasError() && !cu["ttl"] && !cu["lock_delay"] && !cu["renew_every"] &&
		!cu["node_checks"] && !cu["service_checks"] {
		if w := cp.Resolve().StopWarning(); w != nil {
			warnings = append(warnings, *w)
		}
	}
	addWarnings(&resp.Diagnostics, warnings)
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}

// importedDefaultRenewEvery reports whether the state holds renew_every
// null (an imported default, see setProfile) with the same ttl: the plan
// keeps it null.
func (r *sessionDefaultsResource) importedDefaultRenewEvery(ctx context.Context, req resource.ModifyPlanRequest, ttl time.Duration) bool {
	if req.State.Raw.IsNull() {
		return false
	}
	var renew, priorTTL timetypes.GoDuration
	if d := req.State.GetAttribute(ctx, path.Root("renew_every"), &renew); d.HasError() || !renew.IsNull() {
		return false
	}
	if d := req.State.GetAttribute(ctx, path.Root("ttl"), &priorTTL); d.HasError() || priorTTL.IsNull() || priorTTL.IsUnknown() {
		return false
	}
	prior, d := priorTTL.ValueGoDuration()
	return !d.HasError() && prior == ttl
}

// record renders the model's registry record, reporting invalid input on its
// attributes, and returns the profile resolved as the record holds it.
func (m sessionDefaultsModel) record(ctx context.Context, diags *diag.Diagnostics) (lockmodel.Profile, []byte) {
	p, _, ds := m.profile(ctx)
	diags.Append(ds...)
	if diags.HasError() {
		return lockmodel.Profile{}, nil
	}
	data, err := record.EncodeSessionProfileRecord(p)
	if err != nil {
		addFieldErrors(diags, "Invalid Session Profile", err)
		return lockmodel.Profile{}, nil
	}
	return p.Resolve(), data
}

func (r *sessionDefaultsResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan sessionDefaultsModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, data := plan.record(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	reg := store.New(r.data.client).Registry(r.data.registryPrefix)
	index, err := reg.Put(ctx, lockmodel.KindSessionDefaults, p.Name, data, 0)
	var conflict *store.ErrConflict
	switch {
	case errors.As(err, &conflict):
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Session Profile Already Declared",
			fmt.Sprintf("A session profile named %q is already recorded at %s, by another configuration or an earlier apply whose state was lost. "+
				"Import it to manage it here (tofu import consullock_session_defaults.<resource name> %s), or choose another name.",
				p.Name, conflict.Key, p.Name))
		return
	case err != nil:
		addConsulError(&resp.Diagnostics, "Cannot Record Session Profile", err)
		return
	}
	plan.setProfile(p, reg.Key(lockmodel.KindSessionDefaults, p.Name))
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, index)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *sessionDefaultsResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state sessionDefaultsModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Read the record where the last apply wrote it: after a change of the
	// provider's registry_prefix the plan then moves it (Update).
	key := r.data.recordKey(state.RegistryKey, lockmodel.KindSessionDefaults, state.Name.ValueString())
	rec, err := store.New(r.data.client).ReadRecord(ctx, key)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Read Session Profile", err)
		return
	}
	if rec == nil {
		// Absent from a consistent read whose results the token could all
		// see: the record is gone for certain.
		resp.State.RemoveResource(ctx)
		return
	}
	p, err := record.DecodeSessionProfileRecord(rec.Value)
	switch {
	case errors.Is(err, record.ErrNewerSchema):
		resp.Diagnostics.AddError("Registry Record From A Newer consullock",
			fmt.Sprintf("The record %s was written by a newer consullock and this provider will not overwrite it. Upgrade the provider.\n\n%s", rec.Key, err))
		return
	case err != nil:
		// Unreadable: keep the declared values and show registry_key as
		// missing, so that the plan rewrites the record.
		resp.Diagnostics.AddAttributeWarning(path.Root("registry_key"), "Unreadable Session Profile Record",
			fmt.Sprintf("The record %s cannot be read; the next apply rewrites it from this configuration.\n\n%s", rec.Key, err))
		state.RegistryKey = types.StringValue("")
	default:
		state.setProfile(p, rec.Key)
	}
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, rec.ModifyIndex)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *sessionDefaultsResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan, state sessionDefaultsModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, data := plan.record(ctx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	reg := store.New(r.data.client).Registry(r.data.registryPrefix)
	newKey := reg.Key(lockmodel.KindSessionDefaults, p.Name)
	index, diags := writeRegistryRecord(ctx, reg, req.Private, state.RegistryKey.ValueString() == newKey, lockmodel.KindSessionDefaults, p.Name, data)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	removeMovedRecord(ctx, r.data.client, state.RegistryKey.ValueString(), newKey, &resp.Diagnostics)
	plan.setProfile(p, newKey)
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, index)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *sessionDefaultsResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state sessionDefaultsModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	key := r.data.recordKey(state.RegistryKey, lockmodel.KindSessionDefaults, state.Name.ValueString())
	index, diags := registryIndex(ctx, req.Private)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ok, err := store.New(r.data.client).DeleteKeyIfIndex(ctx, key, index)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Delete Session Profile Record", err)
		return
	}
	if !ok {
		if pair, err := store.New(r.data.client).ReadKeyConsistent(ctx, key); err == nil && pair == nil {
			return
		}
		resp.Diagnostics.AddError("Session Profile Record Changed",
			fmt.Sprintf("The record %s was changed by someone else since it was last read, so it was not deleted (check-and-set). "+
				"Run a refresh (or plan) and destroy again.", key))
	}
}

func (r *sessionDefaultsResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	name := req.ID
	if err := lockmodel.ValidateName("name", name); err != nil {
		resp.Diagnostics.AddError("Invalid Import ID",
			fmt.Sprintf("Import a session profile by its name. %s.", err))
		return
	}
	reg := store.New(r.data.client).Registry(r.data.registryPrefix)
	rec, found, err := reg.Get(ctx, lockmodel.KindSessionDefaults, name)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Read Session Profile", err)
		return
	}
	if !found {
		resp.Diagnostics.AddError("Session Profile Not Found",
			fmt.Sprintf("No session profile named %q is recorded under registry prefix %q (key %s). Import reads the record that "+
				"consullock_session_defaults writes; check the name and the provider's registry_prefix, or declare the profile instead.",
				name, r.data.registryPrefix, rec.Key))
		return
	}
	p, err := record.DecodeSessionProfileRecord(rec.Value)
	if err != nil {
		resp.Diagnostics.AddError("Unreadable Session Profile Record",
			fmt.Sprintf("The record %s cannot be imported. Fix or delete it, then declare the profile.\n\n%s", rec.Key, err))
		return
	}
	state := sessionDefaultsModel{
		TTL: timetypes.NewGoDurationNull(), LockDelay: timetypes.NewGoDurationNull(),
		RenewEvery: timetypes.NewGoDurationNull(), WorstCaseGap: timetypes.NewGoDurationNull(),
		ServiceChecks: types.ListNull(types.ObjectType{AttrTypes: sessionServiceCheckAttrTypes}),
	}
	state.setProfile(p, rec.Key)
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, rec.ModifyIndex)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}
