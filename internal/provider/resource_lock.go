package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

var (
	_ resource.Resource                   = (*lockResource)(nil)
	_ resource.ResourceWithConfigure      = (*lockResource)(nil)
	_ resource.ResourceWithImportState    = (*lockResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*lockResource)(nil)
	_ resource.ResourceWithValidateConfig = (*lockResource)(nil)
)

// NewLockResource is the consullock_lock resource.
func NewLockResource() resource.Resource {
	return &lockResource{}
}

// lockResource declares a lock: a KV key that Consul's api.Lock (limit 1) or
// api.Semaphore (limit > 1) and `consul lock` can use, plus its registry
// record <registry>/locks/<name>. It owns the key's existence and flags (and
// a semaphore's Limit); holders own its value, session and LockIndex, which
// it never reports as drift and never changes.
type lockResource struct {
	data *providerData
}

type lockResourceModel struct {
	Name            types.String            `tfsdk:"name"`
	Prefix          types.String            `tfsdk:"prefix"`
	Key             types.String            `tfsdk:"key"`
	Limit           types.Int64             `tfsdk:"limit"`
	SessionDefaults types.String            `tfsdk:"session_defaults"`
	MaxHold         timetypes.GoDuration    `tfsdk:"max_hold"`
	Description     types.String            `tfsdk:"description"`
	AlwaysHeld      types.Bool              `tfsdk:"always_held"`
	RunOnce         *lockRunOnceModel       `tfsdk:"run_once"`
	HolderService   *lockHolderServiceModel `tfsdk:"holder_service"`
	Waiters         types.String            `tfsdk:"waiters"`
	ForceDestroy    types.Bool              `tfsdk:"force_destroy"`
	Flags           types.String            `tfsdk:"flags"`
	RegistryKey     types.String            `tfsdk:"registry_key"`
	Paused          types.String            `tfsdk:"paused"`
	PauseKey        types.String            `tfsdk:"pause_key"`
}

func (r *lockResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lock"
}

func (r *lockResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

// lock converts a fully known model into the normalised domain lock.
func (m lockResourceModel) lock() (lockmodel.Lock, diag.Diagnostics) {
	var diags diag.Diagnostics
	l := lockmodel.Lock{
		Name:            m.Name.ValueString(),
		Prefix:          m.Prefix.ValueString(),
		Key:             m.Key.ValueString(),
		Limit:           int(m.Limit.ValueInt64()),
		SessionDefaults: m.SessionDefaults.ValueString(),
		Description:     m.Description.ValueString(),
		AlwaysHeld:      m.AlwaysHeld.ValueBool(),
		RunOnce:         m.RunOnce.runOnce(&diags),
		HolderService:   m.HolderService.holderService(&diags),
		Waiters:         lockWaiters(m.Waiters),
	}
	if !m.MaxHold.IsNull() && !m.MaxHold.IsUnknown() {
		d, ds := m.MaxHold.ValueGoDuration()
		diags.Append(ds...)
		l.MaxHold = d
	}
	if err := l.Validate(); err != nil {
		addFieldErrors(&diags, "Invalid Lock", err)
		return l, diags
	}
	n, _ := l.Normalize()
	return n, diags
}

// setDeclared writes the declared fields of a registry record into the
// model. Values that say the same as the model keep their spelling, and
// empty record fields stay null where the model has them null.
func (m *lockResourceModel) setDeclared(l lockmodel.Lock) {
	m.Name = types.StringValue(l.Name)
	if strings.Trim(m.Prefix.ValueString(), "/") != l.Prefix {
		m.Prefix = types.StringValue(l.Prefix)
	}
	if strings.Trim(m.Key.ValueString(), "/") != l.Key {
		m.Key = types.StringValue(l.Key)
	}
	m.Limit = types.Int64Value(int64(l.Limit))
	m.SessionDefaults = keepOptionalString(m.SessionDefaults, l.SessionDefaults)
	m.Description = keepOptionalString(m.Description, l.Description)
	m.AlwaysHeld = types.BoolValue(l.AlwaysHeld)
	m.RunOnce = runOnceState(m.RunOnce, l.RunOnce)
	m.HolderService = holderServiceState(m.HolderService, l.HolderService)
	m.Waiters = waitersState(l.Waiters)
	switch {
	case l.MaxHold == 0 && (m.MaxHold.IsNull() || m.MaxHold.IsUnknown()):
		m.MaxHold = timetypes.NewGoDurationNull()
	default:
		m.MaxHold = keepDuration(m.MaxHold, l.MaxHold)
	}
}

// keepOptionalString maps "" to null unless the model holds "" itself.
func keepOptionalString(prior types.String, s string) types.String {
	if s == "" && (prior.IsNull() || prior.IsUnknown()) {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// Create declares the lock: consul.ApplyLock writes the record, creates
// the key create-only and checks that the session profile exists, all in
// one Consul transaction, so a lock is either fully declared or not at all;
// an existing record of the same lock is taken over and a compatible key
// adopted as it is.
func (r *lockResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan lockResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	l, data := r.declaration(ctx, plan, runOnceSince(ctx, nil, plan.RunOnce, nil, time.Now()), &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	recordKey := store.New(r.data.client).Registry(r.data.registryPrefix).Key(lockmodel.KindLock, l.Name)
	res, err := store.New(r.data.client).ApplyLock(ctx, store.LockApply{
		Op: store.LockCreate, Lock: l, ProfileKey: r.profileKey(l), RecordKey: recordKey, Record: data,
	})
	if res != nil && res.ReplacedRecord != nil {
		resp.Diagnostics.AddAttributeWarning(path.Root("registry_key"), "Unreadable Lock Record Replaced",
			fmt.Sprintf("The record %s could not be read and is replaced by this declaration.\n\n%s", recordKey, res.ReplacedRecord))
	}
	if err != nil {
		if res != nil && res.LeftBehind {
			resp.Diagnostics.AddWarning("Lock Left Behind",
				fmt.Sprintf("The record %s and the key %s were written before the lock was found unusable, and could not be removed again. "+
					"Delete them with consul kv delete, or fix the problem below and apply again.", recordKey, l.Key))
		}
		r.lockApplyError(ctx, store.LockCreate, l, recordKey, err, &resp.Diagnostics)
		return
	}
	r.profileWarnings(l, res.Profile, &resp.Diagnostics)
	if res.Adopted {
		resp.Diagnostics.AddAttributeWarning(path.Root("key"), "Existing Lock Key Adopted",
			fmt.Sprintf("The key %s already existed as a compatible %s (flags %s). consullock adopted it as it is, without changing its value or holder.",
				l.Key, l.LockKindText(), lockmodel.FormatFlags(res.Key.Flags)))
	}
	flags := l.Flags()
	if res.Adopted {
		flags = res.Key.Flags
	}
	plan.Flags = types.StringValue(lockmodel.FormatFlags(flags))
	plan.RegistryKey = types.StringValue(recordKey)
	r.applyPaused(ctx, plan, nil, &resp.Diagnostics)
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, res.RecordIndex)...)
	resp.Diagnostics.Append(setRunOnceSince(ctx, resp.Private, l)...)
	resp.Diagnostics.Append(setUnheldKeyIndex(ctx, resp.Private, res.Key)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// lockApplyError turns what consul.ApplyLock refused or failed with, in
// operation op, into its diagnostic.
func (r *lockResource) lockApplyError(ctx context.Context, op store.LockOp, l lockmodel.Lock, recordKey string, err error, diags *diag.Diagnostics) {
	summary := map[store.LockOp]string{store.LockCreate: "Cannot Create Lock", store.LockUpdate: "Cannot Update Lock", store.LockDelete: "Cannot Delete Lock"}[op]
	var (
		claimed    *store.RecordClaimedError
		newer      *store.NewerRecordError
		bad        *store.IncompatibleKeyError
		unusable   *store.UnusableSemaphoreKeyError
		badProfile *store.UnreadableProfileError
		held       *store.LockHeldError
	)
	switch {
	case errors.Is(err, store.ErrProfileMissing):
		r.profileNotFound(l, diags)
	case errors.Is(err, store.ErrRecordChanged) && op == store.LockCreate:
		diags.AddError("Registry Record Changed Concurrently",
			fmt.Sprintf("The record %s was written by someone else at the same moment, so it was not overwritten (check-and-set) and the lock key %s was not created. "+
				"Another configuration may declare lock %q. Run apply again.", recordKey, l.Key, l.Name))
	case errors.Is(err, store.ErrRecordChanged):
		diags.AddError("Registry Record Changed Concurrently",
			fmt.Sprintf("The record %s was changed by someone else since it was last read, so it was not overwritten (check-and-set). "+
				"Another configuration may declare the same name. Refresh (tofu plan) to see the change, then apply again.", recordKey))
	case errors.Is(err, store.ErrKeyKeepsChanging) && op == store.LockDelete:
		diags.AddError("Lock Key Keeps Changing",
			fmt.Sprintf("The key %s changed between every read and delete (holders acquiring and releasing); it was not deleted. Destroy again.", l.Key))
	case errors.Is(err, store.ErrKeyKeepsChanging):
		diags.AddError("Lock Key Keeps Changing",
			fmt.Sprintf("The key %s changed between every read and write (holders acquiring and releasing), so it was not written. Apply again.", l.Key))
	case errors.As(err, &newer):
		diags.AddError("Registry Record From A Newer consullock",
			fmt.Sprintf("The record %s was written by a newer consullock and this provider will not overwrite it. Upgrade the provider.\n\n%s", newer.RecordKey, newer.Err))
	case errors.As(err, &claimed):
		diags.AddAttributeError(path.Root("name"), "Lock Name Already Declared",
			fmt.Sprintf("A lock named %q is already recorded at %s, for key %q, by another configuration or an earlier apply whose state was lost. "+
				"Lock names are unique per registry prefix. Import it to manage it here (tofu import consullock_lock.<resource name> %s), or choose another name.",
				l.Name, claimed.RecordKey, claimed.DeclaredKey, l.Name))
	case errors.As(err, &bad):
		r.incompatibleKey(ctx, store.New(r.data.client).Registry(r.data.registryPrefix), l, bad.Pair, bad.Err, diags)
	case errors.As(err, &unusable):
		diags.AddAttributeError(path.Root("key"), "Unusable Semaphore Key",
			fmt.Sprintf("The key %s holds a value api.Semaphore cannot use, and consullock does not overwrite holder data. "+
				"When no holder runs, delete the key (consul kv delete %s) and apply again.\n\n%s", l.Key, l.Key, unusable.Err))
	case errors.As(err, &badProfile):
		diags.AddAttributeError(path.Root("session_defaults"), "Unreadable Session Profile",
			fmt.Sprintf("The record %s of session profile %q cannot be read. Apply its consullock_session_defaults resource again to rewrite it.\n\n%s",
				badProfile.Key, l.SessionDefaults, badProfile.Err))
	case errors.As(err, &held):
		diags.AddError("Lock Is Held",
			fmt.Sprintf("Lock %q (key %s) is held by %s. Destroying it would pull the key from under a running job. "+
				"Wait until the holder releases it, or set force_destroy = true, apply, and destroy again: consullock then "+
				"ends the holders' sessions (their lock-delay keeps the next holder out while they stop) and deletes the key.",
				l.Name, l.Key, store.DescribeHolders(held.Holders)))
	default:
		addConsulError(diags, summary, err)
	}
}

// Read refreshes the lock with one consistent read of the lock key and its
// record (a read-only transaction shared with the refreshes running at the
// same moment): a deleted key removes the
// resource so that the plan recreates it; the key's flags and a semaphore's
// Limit show as they are live; the record's declared fields show as they are
// recorded. Holder-owned fields (value, session, LockIndex) are not state.
func (r *lockResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state lockResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	prior := state
	key := strings.Trim(state.Key.ValueString(), "/")
	if key == "" {
		key = lockmodel.DefaultLockKey(strings.Trim(state.Prefix.ValueString(), "/"))
	}
	recordKey := r.data.recordKey(state.RegistryKey, lockmodel.KindLock, state.Name.ValueString())
	got, err := store.New(r.data.client).ReadLockAndRecord(ctx, key, recordKey)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Read Lock", err)
		return
	}
	if got.Key == nil {
		// get-or-empty under a consistent read, every result visible to the
		// token: the key is gone for certain.
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(setUnheldKeyIndex(ctx, resp.Private, got.Key)...)
	state.Flags = types.StringValue(lockmodel.FormatFlags(got.Key.Flags))
	if state.Limit.ValueInt64() > 1 && got.Key.Flags == lockmodel.SemaphoreFlagValue {
		if s, err := lockmodel.DecodeSemaphoreState(got.Key.Value); err == nil && s.Limit > 1 {
			state.Limit = types.Int64Value(int64(s.Limit))
		}
	}

	var recIndex uint64
	if rec := got.Record; rec == nil {
		state.RegistryKey = types.StringValue("")
	} else {
		recIndex = rec.ModifyIndex
		decl, err := record.DecodeLockRecord(rec.Value)
		switch {
		case errors.Is(err, record.ErrNewerSchema):
			resp.Diagnostics.AddError("Registry Record From A Newer consullock",
				fmt.Sprintf("The record %s was written by a newer consullock and this provider will not overwrite it. Upgrade the provider.\n\n%s", rec.Key, err))
			return
		case err != nil:
			resp.Diagnostics.AddAttributeWarning(path.Root("registry_key"), "Unreadable Lock Record",
				fmt.Sprintf("The record %s cannot be read; the next apply rewrites it from this configuration.\n\n%s", rec.Key, err))
			state.RegistryKey = types.StringValue("")
		case decl.Key != key || decl.Prefix != strings.Trim(state.Prefix.ValueString(), "/"):
			resp.Diagnostics.AddAttributeWarning(path.Root("registry_key"), "Lock Record Declares Another Key",
				fmt.Sprintf("The record %s declares lock %q with prefix %q and key %q, but this lock has prefix %q and key %q; the next apply rewrites the record.",
					rec.Key, decl.Name, decl.Prefix, decl.Key, strings.Trim(state.Prefix.ValueString(), "/"), key))
			state.RegistryKey = types.StringValue("")
		default:
			live := state.Limit.ValueInt64()
			state.setDeclared(decl)
			resp.Diagnostics.Append(setRunOnceSince(ctx, resp.Private, decl)...)
			state.Limit = types.Int64Value(live)
			state.RegistryKey = types.StringValue(rec.Key)
			if int64(decl.Limit) != live {
				resp.Diagnostics.AddAttributeWarning(path.Root("registry_key"), "Lock Record Drift",
					fmt.Sprintf("The record %s declares limit %d, but the lock key has limit %d; the next apply rewrites the record.",
						rec.Key, decl.Limit, live))
				state.RegistryKey = types.StringValue("")
			}
		}
	}
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, recIndex)...)
	r.readPaused(ctx, &state, &resp.Diagnostics)
	// resp.State starts as the prior state: setting an unchanged model
	// again would only cost a conversion per resource on every refresh.
	if state != prior {
		resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
	}
}

// Update rewrites the declaration record and, when the key needs it, the
// key (keeping its holder), in one transaction (consul.ApplyLock). The
// usual change touches only the record: then the transaction reads the key
// to see it still matches, and nothing else is sent.
func (r *lockResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var plan, state lockResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	l, data := r.declaration(ctx, plan, runOnceSince(ctx, req.Private, plan.RunOnce, state.RunOnce, time.Now()), &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	client := r.data.client
	newKey := store.New(client).Registry(r.data.registryPrefix).Key(lockmodel.KindLock, l.Name)
	index, diags := registryIndex(ctx, req.Private)
	resp.Diagnostics.Append(diags...)
	// Check-and-set against the record the last refresh saw, so that a
	// concurrent apply elsewhere is reported instead of overwritten; when
	// that index is unknown, or the record moves, against the one read now.
	if state.RegistryKey.ValueString() != newKey {
		index = 0
	}
	res, err := store.New(client).ApplyLock(ctx, store.LockApply{
		Op: store.LockUpdate, Lock: l, ProfileKey: r.profileKey(l), RecordKey: newKey, Record: data, RecordIndex: index,
	})
	if err != nil {
		r.lockApplyError(ctx, store.LockUpdate, l, newKey, err, &resp.Diagnostics)
		return
	}
	removeMovedRecord(ctx, client, state.RegistryKey.ValueString(), newKey, &resp.Diagnostics)
	if !r.profileWarnings(l, res.Profile, &resp.Diagnostics) {
		return
	}
	plan.Flags = types.StringValue(lockmodel.FormatFlags(res.Key.Flags))
	plan.RegistryKey = types.StringValue(newKey)
	r.applyPaused(ctx, plan, &state, &resp.Diagnostics)
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, res.RecordIndex)...)
	resp.Diagnostics.Append(setRunOnceSince(ctx, resp.Private, l)...)
	resp.Diagnostics.Append(setUnheldKeyIndex(ctx, resp.Private, res.Key)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Delete deletes the record and the key in one transaction
// (consul.ApplyLock), by check-and-set on the key; when the key is as the
// last refresh saw it, unheld, that transaction is all it sends. A held
// lock is refused unless force_destroy, which ends the holders' sessions
// first: Consul then keeps the key under their lock-delay, even once it is
// deleted, so no one takes over while their commands stop (a release would
// hand over at once). Other keys under the prefix are left alone.
func (r *lockResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	var state lockResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	l, diags := state.lock()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	recordKey := r.data.recordKey(state.RegistryKey, lockmodel.KindLock, l.Name)
	index, diags := registryIndex(ctx, req.Private)
	resp.Diagnostics.Append(diags...)
	keyIndex, diags := unheldKeyIndex(ctx, req.Private)
	resp.Diagnostics.Append(diags...)
	pauseKey := record.PauseKey(r.data.registryPrefix, l.Name)
	res, err := store.New(r.data.client).ApplyLock(ctx, store.LockApply{
		Op: store.LockDelete, Lock: l, RecordKey: recordKey, RecordIndex: index, KeyIndex: keyIndex, Force: state.ForceDestroy.ValueBool(),
		PauseKey: pauseKey,
	})
	if res != nil && res.RecordLeftFor != "" {
		resp.Diagnostics.AddWarning("Lock Record Left In Place",
			fmt.Sprintf("The record %s now declares key %q (another configuration re-declared lock %q); it was left in place and only the lock key %s is deleted.",
				recordKey, res.RecordLeftFor, l.Name, l.Key))
	}
	if err != nil {
		r.lockApplyError(ctx, store.LockDelete, l, recordKey, err, &resp.Diagnostics)
		return
	}
	if res.PauseLeft != nil {
		pauseLeftBehind(pauseKey, res.PauseLeft, &resp.Diagnostics)
	}
}

func (r *lockResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !resourceConfigured(r.data, &resp.Diagnostics) {
		return
	}
	name := req.ID
	if err := lockmodel.ValidateName("name", name); err != nil {
		resp.Diagnostics.AddError("Invalid Import ID", fmt.Sprintf("Import a lock by its name. %s.", err))
		return
	}
	reg := store.New(r.data.client).Registry(r.data.registryPrefix)
	rec, found, err := reg.Get(ctx, lockmodel.KindLock, name)
	if err != nil {
		addConsulError(&resp.Diagnostics, "Cannot Read Lock Record", err)
		return
	}
	if !found {
		resp.Diagnostics.AddError("Lock Not Found",
			fmt.Sprintf("No lock named %q is recorded under registry prefix %q (key %s). Import reads the record that consullock_lock "+
				"writes; check the name and the provider's registry_prefix. To take over a lock key that consullock never recorded, "+
				"declare the lock instead: apply adopts a compatible existing key without changing it.",
				name, r.data.registryPrefix, rec.Key))
		return
	}
	decl, err := record.DecodeLockRecord(rec.Value)
	if err != nil {
		resp.Diagnostics.AddError("Unreadable Lock Record",
			fmt.Sprintf("The record %s cannot be imported. Fix or delete it, then declare the lock.\n\n%s", rec.Key, err))
		return
	}
	state := lockResourceModel{
		SessionDefaults: types.StringNull(),
		MaxHold:         timetypes.NewGoDurationNull(),
		Description:     types.StringNull(),
		ForceDestroy:    types.BoolValue(false),
		Flags:           types.StringValue(lockmodel.FormatFlags(decl.Flags())),
		RegistryKey:     types.StringValue(rec.Key),
		PauseKey:        types.StringValue(record.PauseKey(r.data.registryPrefix, name)),
	}
	state.setDeclared(decl)
	resp.Diagnostics.Append(setRegistryIndex(ctx, resp.Private, rec.ModifyIndex)...)
	resp.Diagnostics.Append(setRunOnceSince(ctx, resp.Private, decl)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// profileKey is the record key of the lock's session profile; "" when the
// lock names none.
func (r *lockResource) profileKey(l lockmodel.Lock) string {
	if l.SessionDefaults == "" {
		return ""
	}
	return lockmodel.RegistryKey(r.data.registryPrefix, lockmodel.KindSessionDefaults, l.SessionDefaults)
}

func (r *lockResource) profileNotFound(l lockmodel.Lock, diags *diag.Diagnostics) {
	diags.AddAttributeError(path.Root("session_defaults"), "Session Profile Not Found",
		fmt.Sprintf("session_defaults is %q, but no session profile of that name is declared in this configuration or recorded under registry prefix %q (key %s). "+
			"Declare it with a consullock_session_defaults resource named %q, and set session_defaults = consullock_session_defaults.<resource name>.name "+
			"so that the profile is created before the lock.", l.SessionDefaults, r.data.registryPrefix, r.profileKey(l), l.SessionDefaults))
}

// profileWarnings adds the warnings of using the session profile read as
// pair for this lock; it reports false, with an error, when the profile
// record cannot be read.
func (r *lockResource) profileWarnings(l lockmodel.Lock, pair *api.KVPair, diags *diag.Diagnostics) bool {
	if l.SessionDefaults == "" || pair == nil {
		return true
	}
	p, err := record.DecodeSessionProfileRecord(pair.Value)
	if err != nil {
		diags.AddAttributeError(path.Root("session_defaults"), "Unreadable Session Profile",
			fmt.Sprintf("The record %s of session profile %q cannot be read. Apply its consullock_session_defaults resource again to rewrite it.\n\n%s",
				pair.Key, l.SessionDefaults, err))
		return false
	}
	addWarnings(diags, l.ProfileWarnings(p))
	if l.RunOnce != nil {
		addWarnings(diags, lockmodel.RunOncePeriodWarnings(*l.RunOnce, p))
	}
	if l.HolderService != nil {
		addWarnings(diags, lockmodel.NewHolderCheck(p).Warnings())
	}
	return true
}

// unheldKeyIndexKey is the private-state key holding the lock key's
// ModifyIndex when the last refresh or apply saw it unheld (0 otherwise):
// destroy then deletes by check-and-set at that index without reading the
// key first, since any acquisition since would have changed it.
const unheldKeyIndexKey = "unheld_key_index"

func setUnheldKeyIndex(ctx context.Context, p privateState, pair *api.KVPair) diag.Diagnostics {
	var index uint64
	if pair != nil && pair.Session == "" {
		index = pair.ModifyIndex
		if pair.Flags == lockmodel.SemaphoreFlagValue {
			if s, err := lockmodel.DecodeSemaphoreState(pair.Value); err != nil || len(s.Holders) > 0 {
				index = 0
			}
		}
	}
	data, _ := json.Marshal(index)
	return p.SetKey(ctx, unheldKeyIndexKey, data)
}

func unheldKeyIndex(ctx context.Context, p privateState) (uint64, diag.Diagnostics) {
	data, diags := p.GetKey(ctx, unheldKeyIndexKey)
	if diags.HasError() || len(data) == 0 {
		return 0, diags
	}
	var index uint64
	if err := json.Unmarshal(data, &index); err != nil {
		return 0, diags
	}
	return index, diags
}

// declaration converts a fully known model into the domain lock and its
// registry record. The session profile is checked in the transaction that
// writes it.
func (r *lockResource) declaration(_ context.Context, m lockResourceModel, since time.Time, diags *diag.Diagnostics) (lockmodel.Lock, []byte) {
	l, ds := m.lock()
	diags.Append(ds...)
	if diags.HasError() {
		return l, nil
	}
	if l.RunOnce != nil {
		l.RunOnce.Since = since
	}
	data, err := record.EncodeLockRecord(l)
	if err != nil {
		addFieldErrors(diags, "Invalid Lock", err)
		return l, nil
	}
	return l, data
}

// incompatibleKey explains why an existing key cannot be adopted and what
// to do, naming the lock that declares it when the registry knows one.
func (r *lockResource) incompatibleKey(ctx context.Context, reg *store.Registry, l lockmodel.Lock, pair *api.KVPair, why error, diags *diag.Diagnostics) {
	var advice []string
	if recs, _, err := reg.List(ctx, lockmodel.KindLock); err == nil {
		for _, rec := range recs {
			if decl, err := record.DecodeLockRecord(rec.Value); err == nil && decl.Key == l.Key && decl.Name != l.Name {
				advice = append(advice, fmt.Sprintf("The registry records this key as lock %q (%s, limit %d). To manage it here, import that "+
					"declaration (tofu import consullock_lock.<resource name> %s) and declare limit = %d.", decl.Name, rec.Key, decl.Limit, decl.Name, decl.Limit))
			}
		}
	}
	switch pair.Flags {
	case lockmodel.LockFlagValue:
		advice = append(advice, "The key is an api.Lock mutex: declare limit = 1 to adopt it as it is.")
	case lockmodel.SemaphoreFlagValue:
		if s, err := lockmodel.DecodeSemaphoreState(pair.Value); err == nil && s.Limit > 1 {
			advice = append(advice, fmt.Sprintf("The key is an api.Semaphore semaphore with limit %d: declare limit = %d to adopt it as it is.", s.Limit, s.Limit))
		} else {
			advice = append(advice, "The key has api.Semaphore's flags but no usable holder table; when no holder runs, delete it (consul kv delete "+l.Key+") and apply again.")
		}
	default:
		advice = append(advice, fmt.Sprintf("The key is not a lock key. Choose another prefix or key; or, if nothing uses it, delete it (consul kv delete %s) and apply again.", l.Key))
	}
	diags.AddAttributeError(path.Root("key"), "Incompatible Existing Lock Key",
		fmt.Sprintf("%s. consullock adopts an existing key only when Consul's lock clients can use it as declared, and never rewrites a key it did not create. %s",
			why, strings.Join(advice, " ")))
}
