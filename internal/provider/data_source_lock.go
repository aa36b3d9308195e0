package provider

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

var (
	_ datasource.DataSource              = (*lockDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*lockDataSource)(nil)
)

// NewLockDataSource returns the consullock_lock data source: who holds a
// lock key right now, read from Consul without writing anything.
func NewLockDataSource() datasource.DataSource {
	return &lockDataSource{}
}

type lockDataSource struct {
	data *providerData
}

// lockDataSourceModel is the consullock_lock data source.
type lockDataSourceModel struct {
	Key                  types.String         `tfsdk:"key"`
	Consistent           types.Bool           `tfsdk:"consistent"`
	Exists               types.Bool           `tfsdk:"exists"`
	Held                 types.Bool           `tfsdk:"held"`
	Session              types.String         `tfsdk:"session"`
	Node                 types.String         `tfsdk:"node"`
	Value                types.String         `tfsdk:"value"`
	ValueBase64          types.String         `tfsdk:"value_base64"`
	LockIndex            types.Int64          `tfsdk:"lock_index"`
	FencingToken         types.Int64          `tfsdk:"fencing_token"`
	ModifyIndex          types.Int64          `tfsdk:"modify_index"`
	CreateIndex          types.Int64          `tfsdk:"create_index"`
	Flags                types.String         `tfsdk:"flags"`
	SessionName          types.String         `tfsdk:"session_name"`
	SessionTTL           timetypes.GoDuration `tfsdk:"session_ttl"`
	SessionLockDelay     timetypes.GoDuration `tfsdk:"session_lock_delay"`
	SessionBehavior      types.String         `tfsdk:"session_behavior"`
	SessionNodeChecks    types.List           `tfsdk:"session_node_checks"`
	SessionServiceChecks types.List           `tfsdk:"session_service_checks"`
	Limit                types.Int64          `tfsdk:"limit"`
	Holders              types.List           `tfsdk:"holders"`
	KnownLeader          types.Bool           `tfsdk:"known_leader"`
	LastContact          timetypes.GoDuration `tfsdk:"last_contact"`
	LastRun              types.Object         `tfsdk:"last_run"`
	HolderServices       types.List           `tfsdk:"holder_services"`
	Paused               types.String         `tfsdk:"paused"`
}

// lockHolderModel is one element of holders.
type lockHolderModel struct {
	Session      types.String `tfsdk:"session"`
	Node         types.String `tfsdk:"node"`
	Value        types.String `tfsdk:"value"`
	ValueBase64  types.String `tfsdk:"value_base64"`
	LockIndex    types.Int64  `tfsdk:"lock_index"`
	FencingToken types.Int64  `tfsdk:"fencing_token"`
}

var lockHolderAttrTypes = map[string]attr.Type{
	"session":       types.StringType,
	"node":          types.StringType,
	"value":         types.StringType,
	"value_base64":  types.StringType,
	"lock_index":    types.Int64Type,
	"fencing_token": types.Int64Type,
}

// fencingTokenDescription is the contract users build fencing on.
const fencingTokenDescription = "The holder's fencing token: the Raft index at which its session acquired the key (its " +
	"`ModifyIndex` while held). Every later holder's is greater, also across re-creation and plain writes. A semaphore: the highest " +
	"holder's. Null when not held."

func (d *lockDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lock"
}

func (d *lockDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Who holds a Consul lock key right now: the holder's session and node, the value it wrote, " +
			"its `fencing_token` and Consul's `lock_index`. Works on keys of `consullock_lock`, `api.Lock`, `api.Semaphore`, " +
			"`consul lock` and raw `?acquire=` users alike. Reads only: one KV read, one session read when the key is held " +
			"(and, for a semaphore, one KV list and one session list), for `last_run` and `holder_services` one list of the lock records, then one ledger read and (with `holder_service`) one health query.",
		Attributes: withAttributes(map[string]schema.Attribute{
			"key": schema.StringAttribute{
				MarkdownDescription: "The lock key, e.g. a `consullock_lock`'s `key` or a raw key such as `service/job/leader`; a " +
					"semaphore's `<prefix>/.lock`.",
				Required:   true,
				Validators: []validator.String{keyPathValidator{}},
			},
			"consistent": schema.BoolAttribute{
				MarkdownDescription: "Read with `?consistent` (default `true`): current, and an error without a cluster leader. `false` " +
					"reads `?stale` from any server, possibly out of date (see `known_leader`, `last_contact`).",
				Optional: true,
				Computed: true,
			},
			"exists": schema.BoolAttribute{
				MarkdownDescription: "Whether the key exists; when not, `held` is `false` and the rest null (not an error).",
				Computed:            true,
			},
			"held": schema.BoolAttribute{
				MarkdownDescription: "Whether a session holds the key; for a semaphore, whether at least one slot is held.",
				Computed:            true,
			},
			"known_leader": schema.BoolAttribute{
				MarkdownDescription: "Whether the server that answered knew of a cluster leader (`X-Consul-KnownLeader`).",
				Computed:            true,
			},
			"last_contact": schema.StringAttribute{
				MarkdownDescription: "How long ago the answering server heard from the leader (`X-Consul-LastContact`); `0s` from the " +
					"leader.",
				Computed:   true,
				CustomType: timetypes.GoDurationType{},
			},
			"last_run":        lastRunSchemaAttribute(),
			"holder_services": holderServicesSchemaAttribute(),
			"paused":          pausedDataSourceAttribute(),
		}, holdingSessionAttributes(), semaphoreHoldersAttributes(), keyEntryAttributes()),
	}
}

// holdingSessionAttributes describe the session holding the key.
func holdingSessionAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"session": schema.StringAttribute{
			MarkdownDescription: "ID of the session holding the key; null when not held (and for a semaphore, see `holders`).",
			Computed:            true,
		},
		"node": schema.StringAttribute{
			MarkdownDescription: "Node of the holding session.",
			Computed:            true,
		},
		"session_name": schema.StringAttribute{
			MarkdownDescription: "Name of the holding session.",
			Computed:            true,
		},
		"session_ttl": schema.StringAttribute{
			MarkdownDescription: "TTL of the holding session; null when it has none.",
			Computed:            true,
			CustomType:          timetypes.GoDurationType{},
		},
		"session_lock_delay": schema.StringAttribute{
			MarkdownDescription: "Lock-delay of the holding session, applied when it is invalidated or destroyed (not on a release).",
			Computed:            true,
			CustomType:          timetypes.GoDurationType{},
		},
		"session_behavior": schema.StringAttribute{
			MarkdownDescription: "What Consul does with the key when the holding session is invalidated: `release` or `delete`.",
			Computed:            true,
		},
		"session_node_checks": schema.ListAttribute{
			MarkdownDescription: "Node checks the holding session is bound to (legacy `Checks` included); a critical one invalidates " +
				"it.",
			Computed:    true,
			ElementType: types.StringType,
		},
		"session_service_checks": schema.ListAttribute{
			MarkdownDescription: "IDs of the service health checks the holding session is bound to.",
			Computed:            true,
			ElementType:         types.StringType,
		},
	}
}

// semaphoreHoldersAttributes are a semaphore's limit and holders.
func semaphoreHoldersAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"limit": schema.Int64Attribute{
			MarkdownDescription: "For a semaphore: its limit as recorded in `<prefix>/.lock` (0 while no holder has written one). Null for a mutex.",
			Computed:            true,
		},
		"holders": schema.ListNestedAttribute{
			MarkdownDescription: "A semaphore's holders (held contender keys `<prefix>/<session>` listed in the table), sorted by " +
				"session. Null for a mutex.",
			Computed: true,
			NestedObject: schema.NestedAttributeObject{
				Attributes: map[string]schema.Attribute{
					"session": schema.StringAttribute{
						MarkdownDescription: "Holder session ID.",
						Computed:            true,
					},
					"node": schema.StringAttribute{
						MarkdownDescription: "Node of the holder session.",
						Computed:            true,
					},
					"value": schema.StringAttribute{
						MarkdownDescription: "Value of the holder's contender key as text; null when not valid UTF-8.",
						Computed:            true,
					},
					"value_base64": schema.StringAttribute{
						MarkdownDescription: "Value of the holder's contender key, base64-encoded.",
						Computed:            true,
					},
					"lock_index": schema.Int64Attribute{
						MarkdownDescription: "LockIndex of the holder's contender key.",
						Computed:            true,
					},
					"fencing_token": schema.Int64Attribute{
						MarkdownDescription: "The holder's fencing token: the ModifyIndex of its contender key, the Raft index at which it acquired its slot.",
						Computed:            true,
					},
				},
			},
		},
	}
}

// keyEntryAttributes describe the key as read (value, indexes, flags).
func keyEntryAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"value": schema.StringAttribute{
			MarkdownDescription: "The key's value as text (what the holder sent with its acquire or release). Null when not valid " +
				"UTF-8: use `value_base64`.",
			Computed: true,
		},
		"value_base64": schema.StringAttribute{
			MarkdownDescription: "The key's value, base64-encoded, for binary values.",
			Computed:            true,
		},
		"lock_index": schema.Int64Attribute{
			MarkdownDescription: "Consul's LockIndex: acquisitions of the free key. Not a fencing token: a plain write resets it to 0, " +
				"a re-created key restarts at 1. Use `fencing_token`.",
			Computed: true,
		},
		"fencing_token": schema.Int64Attribute{
			MarkdownDescription: fencingTokenDescription,
			Computed:            true,
		},
		"modify_index": schema.Int64Attribute{
			MarkdownDescription: "Raft index of the key's last change.",
			Computed:            true,
		},
		"create_index": schema.Int64Attribute{
			MarkdownDescription: "Raft index at which the key was created; a larger one means the key was deleted and re-created.",
			Computed:            true,
		},
		"flags": schema.StringAttribute{
			MarkdownDescription: "The key's flags as 16 hex digits (a string: they exceed Terraform's exact numbers): `" +
				lockmodel.FormatFlags(lockmodel.LockFlagValue) + "` api.Lock, `" + lockmodel.FormatFlags(lockmodel.SemaphoreFlagValue) + "` api.Semaphore.",
			Computed: true,
		},
	}
}

func (d *lockDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.data = providerDataFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *lockDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg lockDataSourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !resourceConfigured(d.data, &resp.Diagnostics) {
		return
	}
	key, err := lockmodel.NormalizeKeyPath("key", cfg.Key.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("key"), "Invalid Key Path", err.Error())
		return
	}
	consistent := cfg.Consistent.IsNull() || cfg.Consistent.ValueBool()

	view, err := store.New(d.data.client).ReadLock(ctx, key, consistent)
	if err != nil {
		addLockReadError(&resp.Diagnostics, key, consistent, err)
		return
	}
	state := lockStateFromView(ctx, cfg.Key, consistent, view, &resp.Diagnostics)
	decl, declared, listErr := d.declaredLock(ctx, key)
	state.LastRun = d.lastRun(ctx, decl, declared, listErr, &resp.Diagnostics)
	state.HolderServices = d.holderServices(ctx, decl, view, consistent, &resp.Diagnostics)
	state.Paused = d.paused(ctx, decl, declared, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// addLockReadError reports a failed read. A consistent read that found no
// leader gets its own advice: the data source never falls back to stale data.
func addLockReadError(diags *diag.Diagnostics, key string, consistent bool, err error) {
	var ce *consul.Error
	if !errors.As(err, &ce) {
		diags.AddError("Unreadable Lock Key",
			fmt.Sprintf("The key %q exists but its contents are not a lock this provider can read. Point key at a lock key, or repair the key.\n\n%s", key, err))
		return
	}
	if consistent && ce.Kind == consul.KindTransient {
		diags.AddError("No Consul Leader For A Consistent Read",
			"A consistent read needs the cluster leader, and Consul could not provide one before retries ran out; the data source does not "+
				"report possibly stale data as the holder. Check the cluster and run again, or set consistent = false to read from any "+
				"server and judge freshness by known_leader and last_contact.\n\n"+err.Error())
		return
	}
	addConsulError(diags, "Cannot Read Lock", err)
}

// lockStateFromView converts what Consul said into the data source model;
// attributes that do not apply are null.
func lockStateFromView(ctx context.Context, key types.String, consistent bool, view *store.LockView, diags *diag.Diagnostics) lockDataSourceModel {
	m := lockDataSourceModel{
		Key:                  key,
		Consistent:           types.BoolValue(consistent),
		LastRun:              types.ObjectNull(lastRunAttrTypes),
		HolderServices:       types.ListNull(holderServicesType),
		Paused:               types.StringNull(),
		Exists:               types.BoolValue(view.Pair != nil),
		Held:                 types.BoolValue(false),
		Session:              types.StringNull(),
		Node:                 types.StringNull(),
		Value:                types.StringNull(),
		ValueBase64:          types.StringNull(),
		LockIndex:            types.Int64Null(),
		FencingToken:         types.Int64Null(),
		ModifyIndex:          types.Int64Null(),
		CreateIndex:          types.Int64Null(),
		Flags:                types.StringNull(),
		SessionName:          types.StringNull(),
		SessionTTL:           timetypes.NewGoDurationNull(),
		SessionLockDelay:     timetypes.NewGoDurationNull(),
		SessionBehavior:      types.StringNull(),
		SessionNodeChecks:    types.ListNull(types.StringType),
		SessionServiceChecks: types.ListNull(types.StringType),
		Limit:                types.Int64Null(),
		Holders:              types.ListNull(types.ObjectType{AttrTypes: lockHolderAttrTypes}),
		KnownLeader:          types.BoolValue(view.KnownLeader),
		LastContact:          timetypes.NewGoDurationValue(view.LastContact),
	}
	pair := view.Pair
	if pair == nil {
		return m
	}
	m.Value, m.ValueBase64 = valueAttrs(pair.Value)
	m.LockIndex = indexValue(pair.LockIndex)
	m.ModifyIndex = indexValue(pair.ModifyIndex)
	m.CreateIndex = indexValue(pair.CreateIndex)
	m.Flags = types.StringValue(lockmodel.FormatFlags(pair.Flags))

	if view.Semaphore != nil {
		setSemaphoreHolders(ctx, &m, view, diags)
		return m
	}

	if pair.Session == "" {
		return m
	}
	m.Held = types.BoolValue(true)
	m.Session = types.StringValue(pair.Session)
	// The key's ModifyIndex while held is the index of the acquisition, or
	// higher if the holder rewrote its key since: never below an earlier
	// holder's, whatever LockIndex says.
	m.FencingToken = indexValue(pair.ModifyIndex)
	if view.SessionGone {
		diags.AddWarning("Lock Holder Ended During Read",
			fmt.Sprintf("Session %s held %s when the key was read, and had ended a moment later, so its details are null. "+
				"Consul has released or deleted the key since; read again for the current holder.", pair.Session, view.Key))
		return m
	}
	setSessionAttrs(ctx, &m, view.Session, diags)
	return m
}

// setSemaphoreHolders sets a semaphore's limit, holders and fencing token
// (the highest holder's).
func setSemaphoreHolders(ctx context.Context, m *lockDataSourceModel, view *store.LockView, diags *diag.Diagnostics) {
	sem := view.Semaphore
	m.Limit = types.Int64Value(int64(sem.Limit))
	holders := make([]lockHolderModel, 0, len(sem.Holders))
	var highest uint64
	for _, h := range sem.Holders {
		highest = max(highest, h.ModifyIndex)
		value, value64 := valueAttrs(h.Value)
		node := types.StringValue(h.Node)
		if h.SessionGone {
			node = types.StringNull()
			diags.AddWarning("Semaphore Holder Ended During Read",
				fmt.Sprintf("Session %s held a slot of %s when its key was read, and had ended a moment later. It is listed without a node; read again for the current holders.", h.Session, view.Key))
		}
		holders = append(holders, lockHolderModel{
			Session: types.StringValue(h.Session), Node: node, Value: value, ValueBase64: value64, LockIndex: indexValue(h.LockIndex),
			FencingToken: indexValue(h.ModifyIndex),
		})
	}
	list, ds := types.ListValueFrom(ctx, types.ObjectType{AttrTypes: lockHolderAttrTypes}, holders)
	diags.Append(ds...)
	m.Holders = list
	m.Held = types.BoolValue(len(holders) > 0)
	if len(holders) > 0 {
		m.FencingToken = indexValue(highest)
	}
}

func setSessionAttrs(ctx context.Context, m *lockDataSourceModel, s *api.SessionEntry, diags *diag.Diagnostics) {
	m.Node = types.StringValue(s.Node)
	m.SessionName = types.StringValue(s.Name)
	ttl, err := lockmodel.ParseConsulTTL(s.TTL)
	if err != nil {
		diags.AddWarning("Unreadable Session TTL", err.Error()+". session_ttl is left null.")
	} else if ttl > 0 {
		m.SessionTTL = timetypes.NewGoDurationValue(ttl)
	}
	m.SessionLockDelay = timetypes.NewGoDurationValue(s.LockDelay)
	behavior := s.Behavior
	if behavior == "" {
		behavior = string(lockmodel.BehaviorRelease)
	}
	m.SessionBehavior = types.StringValue(behavior)
	nodeChecks, serviceChecks := store.SessionChecks(s)
	var ds diag.Diagnostics
	m.SessionNodeChecks, ds = types.ListValueFrom(ctx, types.StringType, nodeChecks)
	diags.Append(ds...)
	m.SessionServiceChecks, ds = types.ListValueFrom(ctx, types.StringType, serviceChecks)
	diags.Append(ds...)
}

// valueAttrs renders a KV value as text (null unless valid UTF-8) and base64.
func valueAttrs(v []byte) (text, b64 types.String) {
	text = types.StringNull()
	if utf8.Valid(v) {
		text = types.StringValue(string(v))
	}
	return text, types.StringValue(base64.StdEncoding.EncodeToString(v))
}

// indexValue converts a Raft index. Indices stay far below 2^63 in practice;
// a larger one would be a corrupt answer, and is reported as null.
func indexValue(i uint64) types.Int64 {
	if i > 1<<63-1 {
		return types.Int64Null()
	}
	return types.Int64Value(int64(i))
}
