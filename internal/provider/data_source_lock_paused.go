package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/record"

	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// The data source's paused: the reason of the pause record of the
// declared lock whose key this is (lockmodel pause.go).

func pausedDataSourceAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		MarkdownDescription: "Why the declared lock of this key is paused (`consullock_lock.paused` or `consullock pause`); " +
			"null when not paused or not declared. Needs `key:read` on its `pause_key`; without it, a warning and null.",
		Computed: true,
	}
}

// paused reads the pause of the declared lock decl; null when it is not
// declared or not paused. Errors are warnings, so that the holder is
// still reported.
func (d *lockDataSource) paused(ctx context.Context, decl lockmodel.Lock, declared bool, diags *diag.Diagnostics) types.String {
	if !declared {
		return types.StringNull()
	}
	p, _, err := store.New(d.data.client).Registry(d.data.registryPrefix).ReadPause(ctx, decl.Name)
	if err != nil {
		diags.AddAttributeWarning(path.Root("paused"), "Pause Not Read",
			fmt.Sprintf("paused is null because the pause record %s could not be read; the holder attributes are unaffected.\n\n%s",
				record.PauseKey(d.data.registryPrefix, decl.Name), err))
		return types.StringNull()
	}
	if p == nil {
		return types.StringNull()
	}
	return types.StringValue(p.Reason)
}
