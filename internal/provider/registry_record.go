package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Declaration records: every resource that declares something for the
// controller and the runner writes its record here, by check-and-set.

// registryIndexKey is the private-state key holding the ModifyIndex of the
// registry record as last read or written, for check-and-set writes.
const registryIndexKey = "registry_index"

// privateState is the part of the framework's private state API the
// resources here use (resp.Private of Create, Read, Update, ImportState).
type privateState interface {
	GetKey(ctx context.Context, key string) ([]byte, diag.Diagnostics)
	SetKey(ctx context.Context, key string, value []byte) diag.Diagnostics
}

func setRegistryIndex(ctx context.Context, p privateState, index uint64) diag.Diagnostics {
	data, _ := json.Marshal(index)
	return p.SetKey(ctx, registryIndexKey, data)
}

// registryIndex returns the record's ModifyIndex as last seen; 0 when none
// was recorded.
func registryIndex(ctx context.Context, p privateState) (uint64, diag.Diagnostics) {
	data, diags := p.GetKey(ctx, registryIndexKey)
	if diags.HasError() || len(data) == 0 {
		return 0, diags
	}
	var index uint64
	if err := json.Unmarshal(data, &index); err != nil {
		return 0, nil
	}
	return index, diags
}

// writeRegistryRecord writes a record by check-and-set against the index the
// last refresh saw, so that a concurrent apply elsewhere is reported instead
// of overwritten. Without a recorded index, or when the record moves to
// another key (sameKey false), it reads the current index first.
func writeRegistryRecord(ctx context.Context, reg *store.Registry, private privateState, sameKey bool, kind, name string, data []byte) (uint64, diag.Diagnostics) {
	var diags diag.Diagnostics
	index, ds := registryIndex(ctx, private)
	diags.Append(ds...)
	if index == 0 || !sameKey {
		index = 0
		rec, found, err := reg.Get(ctx, kind, name)
		if err != nil {
			addConsulError(&diags, "Cannot Read Registry Record", err)
			return 0, diags
		}
		if found {
			index = rec.ModifyIndex
		}
	}
	newIndex, err := reg.Put(ctx, kind, name, data, index)
	var conflict *store.ErrConflict
	switch {
	case errors.As(err, &conflict):
		diags.AddError("Registry Record Changed Concurrently",
			fmt.Sprintf("The record %s was changed by someone else since it was last read, so it was not overwritten (check-and-set). "+
				"Another configuration may declare the same name. Refresh (tofu plan) to see the change, then apply again.", conflict.Key))
	case err != nil:
		addConsulError(&diags, "Cannot Write Registry Record", err)
	}
	return newIndex, diags
}

// removeMovedRecord deletes the record at oldKey after it was written at
// newKey (the provider's registry_prefix changed). Failing to delete it is a
// warning: the declaration itself is in place.
func removeMovedRecord(ctx context.Context, client *consul.Client, oldKey, newKey string, diags *diag.Diagnostics) {
	if oldKey == "" || oldKey == newKey || !strings.Contains(oldKey, "/") {
		return
	}
	if _, err := store.New(client).DeleteKeyIfIndex(ctx, oldKey, 0); err != nil {
		diags.AddWarning("Old Registry Record Left Behind",
			fmt.Sprintf("The declaration moved to %s; its old record %s could not be deleted. Delete it with `consul kv delete %s`.\n\n%s",
				newKey, oldKey, oldKey, err))
	}
}
