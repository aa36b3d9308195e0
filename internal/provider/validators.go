package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// The validators here exist because the rule is ours: each delegates to the
// consul or lockmodel package so the controller and the runner apply the
// same rule with the same words.

var (
	_ validator.String = addressValidator{}
	_ validator.String = keyPathValidator{}
	_ validator.String = durationRangeValidator{}
)

// addressValidator accepts host:port or http(s)://host:port.
type addressValidator struct{}

func (addressValidator) Description(context.Context) string {
	return "must be host:port or http(s)://host:port"
}

func (v addressValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (addressValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, _, err := consul.ParseAddress(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid Consul Address",
			fmt.Sprintf("%s: %v.", req.Path, err))
	}
}

// keyPathValidator applies lockmodel's key and prefix hygiene.
type keyPathValidator struct{}

func (keyPathValidator) Description(context.Context) string {
	return "must be a safe Consul KV path (letters, digits, '-', '_', '.', ':', '@', '+', separated by '/')"
}

func (v keyPathValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (keyPathValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := lockmodel.NormalizeKeyPath(req.Path.String(), req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid Key Path", err.Error())
	}
}

// durationRangeValidator checks a Go duration string against [min, max].
type durationRangeValidator struct{ min, max time.Duration }

func durationBetween(lo, hi time.Duration) durationRangeValidator {
	return durationRangeValidator{min: lo, max: hi}
}

func (v durationRangeValidator) Description(context.Context) string {
	return fmt.Sprintf("must be a duration from %s to %s", v.min, v.max)
}

func (v durationRangeValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v durationRangeValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	d, err := time.ParseDuration(req.ConfigValue.ValueString())
	if err != nil {
		// The GoDuration custom type reports unparsable values itself.
		return
	}
	if d < v.min || d > v.max {
		resp.Diagnostics.AddAttributeError(req.Path, "Duration Out of Range",
			fmt.Sprintf("%s: %q is not allowed; use a duration from %s to %s.", req.Path, req.ConfigValue.ValueString(), v.min, v.max))
	}
}
