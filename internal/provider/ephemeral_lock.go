package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/ephemeralvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	_ "github.com/consullock/terraform-provider-consullock/concurrency" // sets libhold.Acquire
	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

var (
	_ ephemeral.EphemeralResource                     = (*lockEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithConfigure        = (*lockEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithConfigValidators = (*lockEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithRenew            = (*lockEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithClose            = (*lockEphemeral)(nil)
)

// defaultLockWait is how long Open waits for the lock when wait is not set.
const defaultLockWait = 5 * time.Minute

// NewLockEphemeral is the consullock_lock ephemeral resource: a lock held
// for the duration of one run (plan or apply).
func NewLockEphemeral() ephemeral.EphemeralResource { return &lockEphemeral{} }

type lockEphemeral struct {
	data *providerData
}

type lockEphemeralModel struct {
	Lock         types.String         `tfsdk:"lock"`
	Key          types.String         `tfsdk:"key"`
	TTL          timetypes.GoDuration `tfsdk:"ttl"`
	LockDelay    timetypes.GoDuration `tfsdk:"lock_delay"`
	Behavior     types.String         `tfsdk:"behavior"`
	Wait         timetypes.GoDuration `tfsdk:"wait"`
	Value        types.String         `tfsdk:"value"`
	Session      types.String         `tfsdk:"session"`
	FencingToken types.Int64          `tfsdk:"fencing_token"`
	LockIndex    types.Int64          `tfsdk:"lock_index"`
}

// heldLock is the private data that travels from Open to Renew and Close.
// The CLI may call them in another provider process than Open, so
// everything they need is here, none of it secret.
type heldLock struct {
	Session     string            `json:"session"`
	Lock        lockmodel.Lock    `json:"lock"`
	Profile     lockmodel.Profile `json:"profile"`
	Value       []byte            `json:"value"`
	LastRenewal time.Time         `json:"last_renewal"`
}

const heldLockKey = "held_lock"

// releaseHeld releases the lock, so the next holder starts without
// lock-delay, then destroys the session; it returns the failures.
func releaseHeld(ctx context.Context, c *consul.Client, h heldLock, log *slog.Logger) (releaseErr, destroyErr error) {
	proto := lockproto.New(c, h.Lock, h.Profile.LockDelay, log, lockproto.Settings{})
	_, releaseErr = proto.Release(ctx, &lockproto.Session{ID: h.Session}, h.Value)
	destroyErr = lockproto.DestroySession(ctx, c, h.Session)
	return releaseErr, destroyErr
}

func (e *lockEphemeral) Metadata(_ context.Context, req ephemeral.MetadataRequest, resp *ephemeral.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lock"
}

func (e *lockEphemeral) Schema(_ context.Context, _ ephemeral.SchemaRequest, resp *ephemeral.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Holds a Consul lock for the duration of a run (plan and apply each hold it separately); nothing " +
			"reaches plan or state. OpenTofu 1.11 or Terraform 1.10+.",
		Attributes: map[string]schema.Attribute{
			"lock": schema.StringAttribute{
				MarkdownDescription: "Name of a declared lock: key, limit and profile come from the registry, as with `consullock run " +
					"-lock`. Exactly one of `lock` and `key`.",
				Optional:   true,
				Validators: []validator.String{domainStringRule{check: lockmodel.ValidateName, what: "a lock name"}},
			},
			"key": schema.StringAttribute{
				MarkdownDescription: "A KV key to hold as a mutex without a declaration (api.Lock protocol), with the session settings " +
					"`ttl`, `lock_delay` and `behavior`. With `lock`, the declared lock's key is reported here.",
				Optional:   true,
				Computed:   true,
				Validators: []validator.String{keyPathValidator{}},
			},
			"ttl": schema.StringAttribute{
				MarkdownDescription: "With `key`: session TTL, `10s` to `24h`. Default `15s`.",
				Optional:            true,
				CustomType:          timetypes.GoDurationType{},
				Validators:          []validator.String{domainDurationRule{check: lockmodel.ValidateTTL, what: allowedText(lockmodel.ValidateTTL("ttl", -1))}},
			},
			"lock_delay": schema.StringAttribute{
				MarkdownDescription: "With `key`: session lock-delay, `0s` to `60s`. Default `15s`.",
				Optional:            true,
				CustomType:          timetypes.GoDurationType{},
				Validators:          []validator.String{domainDurationRule{check: lockmodel.ValidateLockDelay, what: allowedText(lockmodel.ValidateLockDelay("lock_delay", -1))}},
			},
			"behavior": schema.StringAttribute{
				MarkdownDescription: "With `key`: `release` or `delete`. Default `release`.",
				Optional:            true,
				Validators:          []validator.String{stringvalidator.OneOf(lockmodel.Behaviors()...)},
			},
			"wait": schema.StringAttribute{
				MarkdownDescription: "How long Open waits for the lock, e.g. `10m`. When it runs out, Open fails naming the " +
					"holder's node and session. Default `5m`.",
				Optional:   true,
				CustomType: timetypes.GoDurationType{},
				Validators: []validator.String{durationBetween(time.Second, 24*time.Hour)},
			},
			"value": schema.StringAttribute{
				MarkdownDescription: "Value written into the key while held. Default: JSON naming the node, the provider's PID, the start " +
					"and the lock (a semaphore's also its session's lock_delay, which other holders' waiters count when " +
					"it ends without a release), as `consullock run` writes. A value of your own is written as given " +
					"(such waiters then count 60s).",
				Optional: true,
			},
			"session": schema.StringAttribute{
				MarkdownDescription: "ID of the session holding the lock.",
				Computed:            true,
			},
			"fencing_token": schema.Int64Attribute{
				MarkdownDescription: "The Raft index at which the session acquired the lock; it only grows from holder to holder. Give it " +
					"to what the lock guards, which refuses tokens lower than the highest seen.",
				Computed: true,
			},
			"lock_index": schema.Int64Attribute{
				MarkdownDescription: "Consul's LockIndex of the key after the acquisition (not monotone; use `fencing_token`).",
				Computed:            true,
			},
		},
	}
}

func (e *lockEphemeral) ConfigValidators(context.Context) []ephemeral.ConfigValidator {
	return []ephemeral.ConfigValidator{
		ephemeralvalidator.ExactlyOneOf(path.MatchRoot("lock"), path.MatchRoot("key")),
		ephemeralvalidator.Conflicting(path.MatchRoot("lock"), path.MatchRoot("ttl")),
		ephemeralvalidator.Conflicting(path.MatchRoot("lock"), path.MatchRoot("lock_delay")),
		ephemeralvalidator.Conflicting(path.MatchRoot("lock"), path.MatchRoot("behavior")),
	}
}

func (e *lockEphemeral) Configure(_ context.Context, req ephemeral.ConfigureRequest, resp *ephemeral.ConfigureResponse) {
	e.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

// target resolves what to hold: a declared lock from the registry, or the
// key with the inline session settings.
func (e *lockEphemeral) target(ctx context.Context, m lockEphemeralModel, diags *diag.Diagnostics) (lockmodel.Lock, lockmodel.Profile) {
	if name := m.Lock.ValueString(); name != "" {
		l, p, err := lockproto.ReadDeclaration(ctx, e.data.client, e.data.registryPrefix, name)
		if err != nil {
			if consul.KindOf(err) != consul.KindUnknown {
				addConsulError(diags, "Cannot Read Lock Declaration", err)
			} else {
				diags.AddAttributeError(path.Root("lock"), "Cannot Use Lock Declaration",
					"Declare the lock with consullock_lock (and its session_defaults) before holding it, or hold a key instead. "+err.Error()+".")
			}
			return l, p
		}
		return l, p
	}
	key := m.Key.ValueString()
	l, err := lockmodel.Lock{Name: "", Prefix: key, Key: key, Limit: 1}.Normalize()
	if err != nil {
		addFieldErrors(diags, "Invalid Lock Key", err)
		return l, lockmodel.Profile{}
	}
	p := lockmodel.SessionProfile{Name: "inline", TTL: lockmodel.DefaultSessionTTL, LockDelay: lockmodel.DefaultLockDelay,
		Behavior: lockmodel.Behavior(m.Behavior.ValueString())}
	if d := durationOrZero(m.TTL, diags); !m.TTL.IsNull() {
		p.TTL = d
	}
	if d := durationOrZero(m.LockDelay, diags); !m.LockDelay.IsNull() {
		p.LockDelay = d
	}
	r := p.Resolve()
	if err := r.Validate(); err != nil {
		addFieldErrors(diags, "Invalid Session Setting", err)
	}
	return l, r
}

func (e *lockEphemeral) Open(ctx context.Context, req ephemeral.OpenRequest, resp *ephemeral.OpenResponse) {
	if !resourceConfigured(e.data, &resp.Diagnostics) {
		return
	}
	var m lockEphemeralModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	l, profile := e.target(ctx, m, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	wait := defaultLockWait
	if !m.Wait.IsNull() {
		wait = durationOrZero(m.Wait, &resp.Diagnostics)
	}
	label := l.Key
	if l.Name != "" {
		label = l.Name
	}
	log := tflogSlog(ctx).With("key", l.Key)
	// The value written at each acquisition attempt; the one of the
	// attempt that won is written again at release. Its "started" is that
	// attempt, not the start of the wait: status and the controller time
	// the hold from it (lockmodel.HoldStart). A lock handed over by its
	// previous holder (waiters = "handoff") holds the value that holder
	// wrote; hold.Value is whichever the key got.
	value := func() []byte {
		if !m.Value.IsNull() {
			return []byte(m.Value.ValueString())
		}
		// The node is not known before the session exists; the holder
		// value names the provider's host instead, as the runner's does.
		host, _ := os.Hostname()
		written, _ := json.Marshal(lockmodel.HolderValue{Node: host, PID: os.Getpid(), Started: time.Now().UTC(), Lock: l.Name})
		return written
	}

	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// The lock is held with the public library's session, renewal, loss
	// judge and watch (package concurrency, through internal/libhold).
	hold, err := libhold.Acquire(waitCtx, e.data.client, l, profile,
		libhold.Options{SessionName: "consullock ephemeral " + label, Value: value, Log: log})
	if err != nil {
		e.openError(ctx, waitCtx, l, wait, err, &resp.Diagnostics)
		return
	}
	// From here on the CLI renews the session (Renew), possibly from
	// another provider process.
	hold.Orphan()
	// The contact deadline runs from the hold's latest renewal, which may
	// be long after the session's creation when Open waited.
	held := heldLock{Session: hold.Session().ID, Lock: l, Profile: profile, Value: hold.Value(), LastRenewal: hold.LastContact()}
	rule := lockmodel.NewStopRule(profile, 0)
	resp.RenewAt = held.LastRenewal.Add(rule.RenewEvery)
	data, _ := json.Marshal(held) // plain struct: cannot fail
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, heldLockKey, data)...)
	client := e.data.client
	trackUnclosed("lock "+held.Session, func(ctx context.Context) {
		releaseHeld(ctx, client, held, slog.New(slog.DiscardHandler)) //nolint:errcheck // best effort at shutdown; the session ends by TTL otherwise
	})

	m.Key = types.StringValue(l.Key)
	m.Session = types.StringValue(hold.Session().ID)
	m.FencingToken = types.Int64Value(int64(hold.Grant().FencingToken))
	m.LockIndex = types.Int64Value(int64(hold.Grant().LockIndex))
	resp.Diagnostics.Append(resp.Result.Set(ctx, &m)...)
	tflog.Info(ctx, "lock acquired", map[string]any{"key": l.Key, "session": hold.Session().ID, "fencing_token": hold.Grant().FencingToken})
	if resp.Diagnostics.HasError() {
		hold.Unlock(context.WithoutCancel(ctx)) //nolint:errcheck // the session ends by TTL otherwise
	}
}

// openError reports why Open did not get the lock; a wait that ran out
// names who holds it.
func (e *lockEphemeral) openError(ctx, waitCtx context.Context, l lockmodel.Lock, wait time.Duration, err error, diags *diag.Diagnostics) {
	if ctx.Err() != nil {
		diags.AddError("Lock Wait Interrupted", fmt.Sprintf("The run was interrupted while waiting for lock %s; the session was destroyed.", l.Key))
		return
	}
	if errors.Is(waitCtx.Err(), context.DeadlineExceeded) {
		diags.AddAttributeError(path.Root("wait"), "Lock Not Acquired In Time",
			fmt.Sprintf("Lock %s was still held after waiting %s: %s. Wait for that run to finish, raise wait, or end the holder's session if it is stale.",
				l.Key, lockmodel.FormatDuration(wait), e.describeHolder(context.WithoutCancel(ctx), l)))
		return
	}
	if consul.KindOf(err) != consul.KindUnknown {
		addConsulError(diags, "Cannot Acquire Lock", err)
		return
	}
	diags.AddError("Cannot Acquire Lock", fmt.Sprintf("Acquiring lock %s failed. Check the key and the token's permissions (key write on it, session write on the node).\n\n%s", l.Key, err))
}

func (e *lockEphemeral) describeHolder(ctx context.Context, l lockmodel.Lock) string {
	ctx, cancel := context.WithTimeout(ctx, lockproto.CleanupTimeout)
	defer cancel()
	view, err := store.New(e.data.client).ReadLock(ctx, l.Key, true)
	if err != nil {
		return "its holder could not be read (" + err.Error() + ")"
	}
	switch {
	case view.Semaphore != nil:
		var hs []string
		for _, h := range view.Semaphore.Holders {
			hs = append(hs, fmt.Sprintf("session %s on node %q", h.Session, h.Node))
		}
		if len(hs) == 0 {
			return "no holder is listed now (the last one may have just left)"
		}
		return "all slots are held: " + strings.Join(hs, ", ")
	case view.Session != nil:
		return fmt.Sprintf("held by session %s (%q) on node %q", view.Session.ID, view.Session.Name, view.Session.Node)
	case view.Pair != nil && view.Pair.Session != "":
		return "held by session " + view.Pair.Session + ", which ended a moment ago"
	default:
		return "it is free now, perhaps still in the lock-delay of its previous holder"
	}
}

func getHeld(ctx context.Context, p interface {
	GetKey(context.Context, string) ([]byte, diag.Diagnostics)
}, diags *diag.Diagnostics) (heldLock, bool) {
	var h heldLock
	data, ds := p.GetKey(ctx, heldLockKey)
	diags.Append(ds...)
	if diags.HasError() || len(data) == 0 {
		return h, false
	}
	if err := json.Unmarshal(data, &h); err != nil {
		diags.AddError("Unreadable Lock Private Data", "The CLI passed back private data the provider cannot read; this is a bug, please report it. "+err.Error())
		return h, false
	}
	return h, true
}

// Renew renews the session and checks that it still holds the lock. A
// session that is gone, or a lock no longer held, is an error; a failed
// request is retried soon, until the stop rule says the lock may be lost.
func (e *lockEphemeral) Renew(ctx context.Context, req ephemeral.RenewRequest, resp *ephemeral.RenewResponse) {
	if !resourceConfigured(e.data, &resp.Diagnostics) {
		return
	}
	h, ok := getHeld(ctx, req.Private, &resp.Diagnostics)
	if !ok {
		return
	}
	rule := lockmodel.NewStopRule(h.Profile, 0)
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, rule.RenewTimeout)
	entry, err := e.data.client.RenewSession(rctx, h.Session)
	cancel()
	if err == nil && entry != nil {
		err = e.checkHeld(ctx, h)
		if errors.Is(err, errLockLost) {
			resp.Diagnostics.AddError("Lock Lost", fmt.Sprintf("%s. Whatever ran under the lock since may have overlapped with another holder; check it.", err))
			return
		}
	}
	switch {
	case err == nil && entry == nil:
		resp.Diagnostics.AddError("Lock Session Gone",
			fmt.Sprintf("Session %s holding lock %s no longer exists (destroyed, expired or invalidated by a failing check), so Consul released the lock. "+
				"Whatever ran under the lock since may have overlapped with another holder; check it.", h.Session, h.Lock.Key))
		return
	case err != nil:
		if since := time.Since(h.LastRenewal); since > rule.LossAfter() {
			resp.Diagnostics.AddError("Lock May Be Lost",
				fmt.Sprintf("Session %s holding lock %s could not be renewed for %s, longer than it may go without contact (%s): Consul may have ended it. %s",
					h.Session, h.Lock.Key, since.Round(time.Millisecond), lockmodel.FormatDuration(rule.LossAfter()), err))
			return
		}
		resp.Diagnostics.AddWarning("Lock Renewal Failed", fmt.Sprintf("Renewing session %s of lock %s failed; retrying. %s", h.Session, h.Lock.Key, err))
		resp.RenewAt = time.Now().Add(min(time.Second, rule.RenewEvery))
	default:
		h.LastRenewal = sent
		resp.RenewAt = sent.Add(rule.RenewEvery)
	}
	data, _ := json.Marshal(h)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, heldLockKey, data)...)
}

var errLockLost = errors.New("lock lost")

// checkHeld reads, consistently, the key the session acquired: the lock key
// of a mutex, the contender key of a semaphore.
func (e *lockEphemeral) checkHeld(ctx context.Context, h heldLock) error {
	key := h.Lock.Key
	if h.Lock.IsSemaphore() {
		key = h.Lock.Prefix + "/" + h.Session
	}
	pair, _, err := e.data.client.KV().Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return err // counts as a failed renewal: retried
	}
	if pair == nil || pair.Session != h.Session {
		holder := "deleted"
		if pair != nil && pair.Session != "" {
			holder = "held by session " + pair.Session
		} else if pair != nil {
			holder = "released"
		}
		return fmt.Errorf("%w: key %s is %s, no longer held by session %s", errLockLost, key, holder, h.Session)
	}
	return nil
}

// Close releases the lock, so the next holder starts without lock-delay,
// then destroys the session. Failures are warnings: the session ends by
// TTL in any case.
func (e *lockEphemeral) Close(ctx context.Context, req ephemeral.CloseRequest, resp *ephemeral.CloseResponse) {
	if !resourceConfigured(e.data, &resp.Diagnostics) {
		return
	}
	h, ok := getHeld(ctx, req.Private, &resp.Diagnostics)
	if !ok {
		return
	}
	ctx = context.WithoutCancel(ctx)
	closed("lock " + h.Session)
	releaseErr, destroyErr := releaseHeld(ctx, e.data.client, h, tflogSlog(ctx))
	if err := releaseErr; err != nil {
		resp.Diagnostics.AddWarning("Lock Release Failed",
			fmt.Sprintf("Releasing lock %s failed; destroying session %s frees it after its lock-delay. %s", h.Lock.Key, h.Session, err))
	}
	if err := destroyErr; err != nil {
		resp.Diagnostics.AddWarning("Lock Session Not Destroyed",
			fmt.Sprintf("Session %s could not be destroyed; Consul ends it after about 2 x TTL (%s). %s",
				h.Session, lockmodel.FormatDuration(h.Profile.TTL), err))
	}
	tflog.Info(ctx, "lock released", map[string]any{"key": h.Lock.Key, "session": h.Session})
}

// tflogSlog is a slog.Logger writing to the provider's log (TF_LOG).
func tflogSlog(ctx context.Context) *slog.Logger {
	return slog.New(tflogHandler{ctx: ctx})
}

type tflogHandler struct {
	ctx   context.Context
	attrs []slog.Attr
}

func (h tflogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h tflogHandler) Handle(_ context.Context, r slog.Record) error {
	fields := map[string]any{}
	for _, a := range h.attrs {
		fields[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		fields[a.Key] = a.Value.Any()
		return true
	})
	switch {
	case r.Level >= slog.LevelWarn:
		tflog.Warn(h.ctx, r.Message, fields)
	case r.Level >= slog.LevelInfo:
		tflog.Info(h.ctx, r.Message, fields)
	default:
		tflog.Debug(h.ctx, r.Message, fields)
	}
	return nil
}

func (h tflogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return tflogHandler{ctx: h.ctx, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)}
}

func (h tflogHandler) WithGroup(string) slog.Handler { return h }
