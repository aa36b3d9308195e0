package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// The data source's holder_services: the catalog instances the current
// holders registered for the declared lock's holder_service
// (holdersvc.ServiceID), with their health.

var holderServiceAttrTypes = map[string]attr.Type{
	"id":            types.StringType,
	"name":          types.StringType,
	"session":       types.StringType,
	"node":          types.StringType,
	"address":       types.StringType,
	"port":          types.Int64Type,
	"status":        types.StringType,
	"fencing_token": types.Int64Type,
}

var holderServicesType = types.ObjectType{AttrTypes: holderServiceAttrTypes}

func holderServicesSchemaAttribute() schema.ListNestedAttribute {
	return schema.ListNestedAttribute{
		MarkdownDescription: "With a declared `holder_service`: the instances the current holders registered, sorted by session. " +
			"Null without one. One health query; needs `service:read` on the name and `node:read` (instances it " +
			"may not read are left out).",
		Computed: true,
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"id":      schema.StringAttribute{MarkdownDescription: "Service ID, `<name>-<session>`.", Computed: true},
			"name":    schema.StringAttribute{MarkdownDescription: "Service name (`<name>.service.consul`).", Computed: true},
			"session": schema.StringAttribute{MarkdownDescription: "The holder's session.", Computed: true},
			"node":    schema.StringAttribute{MarkdownDescription: "Node the instance is registered on.", Computed: true},
			"address": schema.StringAttribute{MarkdownDescription: "The instance's address, or its node's.", Computed: true},
			"port":    schema.Int64Attribute{MarkdownDescription: "The instance's port; 0 for none.", Computed: true},
			"status": schema.StringAttribute{
				MarkdownDescription: "Health of the instance's TTL check and node checks: `passing`, `warning` or `critical` (DNS skips " +
					"`critical`).",
				Computed: true,
			},
			"fencing_token": schema.Int64Attribute{MarkdownDescription: "The fencing token in the instance's meta.", Computed: true},
		}},
	}
}

// declaredLock is the lock declared for key, read with one list of the lock
// records; ok is false when no lock declares key.
func (d *lockDataSource) declaredLock(ctx context.Context, key string) (l lockmodel.Lock, ok bool, err error) {
	recs, _, err := store.New(d.data.client).Registry(d.data.registryPrefix).List(ctx, lockmodel.KindLock)
	if err != nil {
		return lockmodel.Lock{}, false, err
	}
	for _, rec := range recs {
		if l, err := record.DecodeLockRecord(rec.Value); err == nil && l.Key == key {
			return l, true, nil
		}
	}
	return lockmodel.Lock{}, false, nil
}

// holderServices reads the instances of the holders in view, for a lock
// that declares a holder_service. Consul errors are a warning, so that the
// holder is still reported.
func (d *lockDataSource) holderServices(ctx context.Context, l lockmodel.Lock, view *store.LockView, consistent bool, diags *diag.Diagnostics) types.List {
	if l.HolderService == nil {
		return types.ListNull(holderServicesType)
	}
	var sessions []string
	switch {
	case view.Semaphore != nil:
		for _, h := range view.Semaphore.Holders {
			sessions = append(sessions, h.Session)
		}
	case view.Pair != nil && view.Pair.Session != "":
		sessions = []string{view.Pair.Session}
	}
	name := l.HolderService.Name
	views, err := store.New(d.data.client).ReadHolderServices(ctx, name, sessions, consistent)
	if err != nil {
		diags.AddAttributeWarning(path.Root("holder_services"), "Holder Services Not Read",
			fmt.Sprintf("holder_services is null because the instances of service %q could not be read; the holder attributes "+
				"are unaffected. A token needs service:read on it and node:read.\n\n%s", name, err))
		return types.ListNull(holderServicesType)
	}
	elems := make([]attr.Value, 0, len(views))
	for _, v := range views {
		obj, ds := types.ObjectValue(holderServiceAttrTypes, map[string]attr.Value{
			"id": types.StringValue(v.ID), "name": types.StringValue(name), "session": types.StringValue(v.Session),
			"node": types.StringValue(v.Node), "address": types.StringValue(v.Address), "port": types.Int64Value(int64(v.Port)),
			"status": types.StringValue(v.Status), "fencing_token": indexValue(v.FencingToken),
		})
		diags.Append(ds...)
		elems = append(elems, obj)
	}
	list, ds := types.ListValue(holderServicesType, elems)
	diags.Append(ds...)
	return list
}
