package provider

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework-validators/float64validator"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/float64default"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// run_once's job-control attributes: max_runtime, retry_after,
// retry_backoff (the rules are lockmodel's, jobcontrol.go).

func runOnceJobControlAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"max_runtime": schema.StringAttribute{
			MarkdownDescription: fmt.Sprintf("Longest an attempt's command may run, counted from its start: the runner "+
				"sends SIGTERM at the deadline and SIGKILL after its `-grace`, records the attempt `timed_out` (it counts "+
				"toward `max_attempts`) and exits %d. `%s` to `%s`; unset means no "+
				"deadline. Unlike `max_hold` (ended only in enforce mode, by ending the session), it stops the command "+
				"itself; keep `max_runtime` plus `-grace` below `max_hold`.",
				118, ledger.MinMaxRuntime, lockmodel.FormatDuration(ledger.MaxMaxRuntime)),
			Optional:   true,
			CustomType: timetypes.GoDurationType{},
			Validators: []validator.String{domainDurationRule{check: validateMaxRuntime, what: allowedText(validateMaxRuntime("max_runtime", 0))}},
		},
		"retry_after": schema.StringAttribute{
			MarkdownDescription: fmt.Sprintf("Wait before the next attempt after a `failed`, `lost`, `crashed` or "+
				"`timed_out` one (the run's `not_before`; [retries](../guides/run-once.md#deadlines-retries-output)): "+
				"`retry_after` x `retry_backoff`^(n-1) after attempt n, at most `%s`. `0s` to `%s`; unset means at once.",
				lockmodel.FormatDuration(ledger.MaxRetryWait), lockmodel.FormatDuration(ledger.MaxRetryAfter)),
			Optional:   true,
			CustomType: timetypes.GoDurationType{},
			Validators: []validator.String{domainDurationRule{check: validateRetryAfter, what: allowedText(validateRetryAfter("retry_after", -1))}},
		},
		"retry_backoff": schema.Float64Attribute{
			MarkdownDescription: fmt.Sprintf("Factor by which the wait grows after each retried attempt (`1` keeps it at "+
				"`retry_after`). `1` to `%g`, default `%g`.", ledger.MaxRetryBackoff, ledger.DefaultRetryBackoff),
			Optional:   true,
			Computed:   true,
			Default:    float64default.StaticFloat64(ledger.DefaultRetryBackoff),
			Validators: []validator.Float64{float64validator.Between(1, ledger.MaxRetryBackoff)},
		},
	}
}

// validateMaxRuntime: "0s" would read back as unset, so it is refused.
func validateMaxRuntime(field string, d time.Duration) error {
	if d == 0 {
		d = -1
	}
	err := ledger.ValidateMaxRuntime(field, d)
	if fe := (*validation.FieldError)(nil); errors.As(err, &fe) && d == -1 {
		fe.Value = "0s"
	}
	return err
}

func validateRetryAfter(field string, d time.Duration) error {
	return ledger.ValidateRetryAfter(field, d)
}
