package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// The data source's last_run: the latest run in the run ledger of the
// declared lock whose key this is (lockmodel ledger.go).

var lastRunAttrTypes = map[string]attr.Type{
	"run_id":        types.StringType,
	"outcome":       types.StringType,
	"node":          types.StringType,
	"fencing_token": types.Int64Type,
	"started":       timetypes.RFC3339Type{},
	"finished":      timetypes.RFC3339Type{},
	"exit_code":     types.Int64Type,
	"attempts":      types.Int64Type,
	"not_before":    timetypes.RFC3339Type{},
	"attempt_list":  types.ListType{ElemType: types.ObjectType{AttrTypes: attemptAttrTypes}},
}

var attemptAttrTypes = map[string]attr.Type{
	"attempt":              types.Int64Type,
	"outcome":              types.StringType,
	"reason":               types.StringType,
	"node":                 types.StringType,
	"fencing_token":        types.Int64Type,
	"started":              timetypes.RFC3339Type{},
	"finished":             timetypes.RFC3339Type{},
	"exit_code":            types.Int64Type,
	"released_by":          types.StringType,
	"released_by_accessor": types.StringType,
}

func lastRunSchemaAttribute() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		MarkdownDescription: "The newest run in the lock's run ledger `<registry_prefix>/runs/<lock name>`; `node`, " +
			"`fencing_token`, `started`, `finished` and `exit_code` are its latest attempt's. Null when no declared " +
			"lock has this key, or before its first run. " +
			"Needs `key:read` on the registry's `locks/` and `runs/`; without it, a warning and null.",
		Computed: true,
		Attributes: map[string]schema.Attribute{
			"run_id": schema.StringAttribute{MarkdownDescription: "The run ID, e.g. `2026-12-01T00:00:00Z` (a `run_once` period slot).", Computed: true},
			"outcome": schema.StringAttribute{
				MarkdownDescription: "`running`, `succeeded`, `failed`, `lost` (lock lost while the command ran), `crashed` (holder " +
					"vanished without an outcome), `timed_out` (stopped at `run_once.max_runtime`), `released` (session ended by " +
					"`consullock release`), `skipped` or `replaced` (`run_once.overlap`) or `exhausted` (`max_attempts` without a success).",
				Computed: true,
			},
			"attempt_list": schema.ListNestedAttribute{
				MarkdownDescription: "Every attempt, oldest first: as above, plus `reason` (why lost or released), " +
					"`released_by`, `released_by_accessor`.",
				Computed: true,
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"attempt":              schema.Int64Attribute{Computed: true},
					"outcome":              schema.StringAttribute{Computed: true},
					"reason":               schema.StringAttribute{Computed: true},
					"node":                 schema.StringAttribute{Computed: true},
					"fencing_token":        schema.Int64Attribute{Computed: true},
					"started":              schema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{}},
					"finished":             schema.StringAttribute{Computed: true, CustomType: timetypes.RFC3339Type{}},
					"exit_code":            schema.Int64Attribute{Computed: true},
					"released_by":          schema.StringAttribute{Computed: true},
					"released_by_accessor": schema.StringAttribute{Computed: true},
				}},
			},
			"node":          schema.StringAttribute{MarkdownDescription: "Node of the latest attempt's holder.", Computed: true},
			"fencing_token": schema.Int64Attribute{MarkdownDescription: "Fencing token of the latest attempt's holder.", Computed: true},
			"started": schema.StringAttribute{
				MarkdownDescription: "When the latest attempt started (RFC 3339, the holder's clock).",
				Computed:            true, CustomType: timetypes.RFC3339Type{},
			},
			"finished": schema.StringAttribute{
				MarkdownDescription: "When the latest attempt's outcome was recorded; null while it runs.",
				Computed:            true, CustomType: timetypes.RFC3339Type{},
			},
			"exit_code": schema.Int64Attribute{
				MarkdownDescription: "The command's exit code in the latest attempt; null while it runs and when there is none (`crashed`).",
				Computed:            true,
			},
			"attempts": schema.Int64Attribute{MarkdownDescription: "How many attempts the run has had.", Computed: true},
			"not_before": schema.StringAttribute{
				MarkdownDescription: "When the run's next attempt may start (`run_once.retry_after`, on the recording holder's " +
					"clock); null when it may start at once, while an attempt runs, and once the run is done.",
				Computed: true, CustomType: timetypes.RFC3339Type{},
			},
		},
	}
}

// lastRun reads the last run of the declared lock whose key this is
// (declaredLock: one consistent list of the lock records, whose error is
// listErr), then, for a declared lock, one consistent read of its ledger.
// Null when no lock declares the key or its ledger is empty. A ledger that
// does not decode is an error; Consul errors are a warning, so that the
// holder is still reported.
func (d *lockDataSource) lastRun(ctx context.Context, decl lockmodel.Lock, declared bool, listErr error, diags *diag.Diagnostics) types.Object {
	null := types.ObjectNull(lastRunAttrTypes)
	if listErr != nil {
		addLastRunWarning(diags, lockmodel.RegistryFolder(d.data.registryPrefix, lockmodel.KindLock), listErr)
		return null
	}
	if !declared {
		return null
	}
	name := decl.Name
	ledgerKey := record.RunLedgerKey(d.data.registryPrefix, name)
	led, _, err := store.New(d.data.client).ReadLedger(ctx, ledgerKey, name)
	var ce *consul.Error
	switch {
	case errors.As(err, &ce):
		addLastRunWarning(diags, ledgerKey, err)
		return null
	case err != nil:
		diags.AddAttributeError(path.Root("last_run"), "Unreadable Run Ledger",
			fmt.Sprintf("The run ledger of lock %q cannot be read, and runners of the lock refuse it too. Repair or delete the key %s "+
				"(deleting it forgets the lock's run history: a run that already succeeded may run again).\n\n%s", name, ledgerKey, err))
		return null
	}
	run, ok := led.LastRun()
	if !ok {
		return null
	}
	ro := ledger.RunOnce{}
	if decl.RunOnce != nil {
		ro = *decl.RunOnce
	}
	attempts := make([]attr.Value, 0, len(run.Attempts))
	for _, a := range run.Attempts {
		v, ds := types.ObjectValue(attemptAttrTypes, attemptValues(a))
		diags.Append(ds...)
		attempts = append(attempts, v)
	}
	list, ds := types.ListValue(types.ObjectType{AttrTypes: attemptAttrTypes}, attempts)
	diags.Append(ds...)
	latest := attemptValues(run.Attempts[len(run.Attempts)-1])
	notBefore := timetypes.NewRFC3339Null()
	if !run.NotBefore.IsZero() {
		notBefore = timetypes.NewRFC3339TimeValue(run.NotBefore)
	}
	obj, ds := types.ObjectValue(lastRunAttrTypes, map[string]attr.Value{
		"run_id":        types.StringValue(run.ID),
		"outcome":       types.StringValue(string(run.OutcomeUnder(ro.WithDefaults().MaxAttempts))),
		"node":          latest["node"],
		"fencing_token": latest["fencing_token"],
		"started":       latest["started"],
		"finished":      latest["finished"],
		"exit_code":     latest["exit_code"],
		"attempts":      types.Int64Value(int64(len(run.Attempts))),
		"not_before":    notBefore,
		"attempt_list":  list,
	})
	diags.Append(ds...)
	return obj
}

// attemptValues is attempt a as an element of attempt_list.
func attemptValues(a ledger.Attempt) map[string]attr.Value {
	finished, exit := timetypes.NewRFC3339Null(), types.Int64Null()
	if !a.Finished.IsZero() {
		finished = timetypes.NewRFC3339TimeValue(a.Finished)
	}
	if a.ExitCode != nil {
		exit = types.Int64Value(int64(*a.ExitCode))
	}
	optional := func(s string) types.String {
		if s == "" {
			return types.StringNull()
		}
		return types.StringValue(s)
	}
	return map[string]attr.Value{
		"attempt":              types.Int64Value(int64(a.Number)),
		"outcome":              types.StringValue(string(a.Outcome)),
		"reason":               optional(a.Reason),
		"node":                 types.StringValue(a.Node),
		"fencing_token":        indexValue(a.FencingToken),
		"started":              timetypes.NewRFC3339TimeValue(a.Started),
		"finished":             finished,
		"exit_code":            exit,
		"released_by":          optional(a.ReleasedBy),
		"released_by_accessor": optional(a.ReleasedByAccessor),
	}
}

func addLastRunWarning(diags *diag.Diagnostics, what string, err error) {
	diags.AddAttributeWarning(path.Root("last_run"), "Run History Not Read",
		fmt.Sprintf("last_run is null because %s could not be read; the holder attributes are unaffected. A token needs key:read on "+
			"the registry's locks/ and runs/ records for last_run.\n\n%s", what, err))
}
