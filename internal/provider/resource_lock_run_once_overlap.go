package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// run_once.overlap: what a runner does when another run holds the lock
// (lockmodel overlap.go decides; the runner acts).

func runOnceOverlapAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"overlap": schema.StringAttribute{
			MarkdownDescription: fmt.Sprintf("What a runner does while another run holds the lock: `wait` (default), `skip` "+
				"(exit %d) or `replace` ([overruns](../guides/runner.md#when-a-run-overruns)).", ledger.ExitRunSkipped),
			Optional:   true,
			Computed:   true,
			Default:    stringdefault.StaticString(string(ledger.OverlapWait)),
			Validators: []validator.String{stringvalidator.OneOf(ledger.OverlapValues...)},
		},
	}
}

// overlapState is run_once.overlap as recorded ("" is wait).
func overlapState(o ledger.Overlap) types.String {
	if o == "" {
		o = ledger.OverlapWait
	}
	return types.StringValue(string(o))
}

// overlapOf is the recorded value of a known overlap: "" for wait.
func overlapOf(v types.String) ledger.Overlap {
	if v.IsNull() || v.IsUnknown() || v.ValueString() == string(ledger.OverlapWait) {
		return ""
	}
	return ledger.Overlap(v.ValueString())
}
