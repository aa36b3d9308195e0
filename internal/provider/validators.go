package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
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

// domainStringRule is an attribute validator for a rule of ours: it calls a
// lockmodel check with the attribute's name, so the message names the
// attribute, the value and what is allowed, in the controller's words too.
type domainStringRule struct {
	check func(field, value string) error
	what  string
}

func (v domainStringRule) Description(context.Context) string { return "must be " + v.what }

func (v domainStringRule) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v domainStringRule) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.Path.String(), req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+attributeTitle(req.Path), err.Error()+".")
	}
}

// domainDurationRule is domainStringRule for Go duration strings; values
// that do not parse are reported by the timetypes.GoDuration type itself.
type domainDurationRule struct {
	check func(field string, d time.Duration) error
	what  string
}

func (v domainDurationRule) Description(context.Context) string { return "must be " + v.what }

func (v domainDurationRule) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v domainDurationRule) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	d, err := time.ParseDuration(req.ConfigValue.ValueString())
	if err != nil {
		return
	}
	if err := v.check(req.Path.String(), d); err != nil {
		// Name the value as written ("90s"), not as Go prints it.
		var fe *validation.FieldError
		if errors.As(err, &fe) {
			c := *fe
			c.Value = req.ConfigValue.ValueString()
			err = &c
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+attributeTitle(req.Path), err.Error()+".")
	}
}

// allowedText is the Allowed part of a lockmodel field error, for validator
// descriptions: callers pass the error of a value that is always refused.
func allowedText(err error) string {
	var fe *validation.FieldError
	if errors.As(err, &fe) {
		return fe.Allowed
	}
	return "valid"
}

// attributeTitle turns an attribute path ("lock_delay") into a title ("Lock
// Delay") for diagnostic summaries.
func attributeTitle(p path.Path) string {
	words := strings.Split(strings.NewReplacer("_", " ", ".", " ").Replace(p.String()), " ")
	for i, w := range words {
		switch w {
		case "ttl":
			words[i] = "TTL"
		case "":
		default:
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ")
}

// keepDuration returns prior when it already says d, else d as a user
// writes it (lockmodel.ShortDuration: "1h", not "1h0m0s"), so that an
// imported value plans no change against the usual spelling.
func keepDuration(prior timetypes.GoDuration, d time.Duration) timetypes.GoDuration {
	return keepDurationAs(prior, d, lockmodel.ShortDuration)
}

// keepDurationAs is keepDuration with the text format of a new value; a
// computed attribute that a provider function also returns
// (worst_case_gap) keeps the function's lockmodel.FormatDuration.
func keepDurationAs(prior timetypes.GoDuration, d time.Duration, format func(time.Duration) string) timetypes.GoDuration {
	if !prior.IsNull() && !prior.IsUnknown() {
		if pd, diags := prior.ValueGoDuration(); !diags.HasError() && pd == d {
			return prior
		}
	}
	return timetypes.NewGoDurationValueFromStringMust(format(d))
}
