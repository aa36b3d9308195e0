package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// maxRuntimePlanWarnings warns at plan time when run_once.max_runtime
// outlasts max_hold (lockmodel.MaxRuntimeWarnings); nothing while either
// is unknown or unset.
func maxRuntimePlanWarnings(plan lockResourceModel, diags *diag.Diagnostics) {
	if plan.RunOnce == nil || plan.MaxHold.IsUnknown() || plan.RunOnce.MaxRuntime.IsUnknown() {
		return
	}
	var ds diag.Diagnostics
	runtime, hold := goDuration(plan.RunOnce.MaxRuntime, &ds), goDuration(plan.MaxHold, &ds)
	if !ds.HasError() {
		addWarnings(diags, lockmodel.MaxRuntimeWarnings(runtime, hold))
	}
}
