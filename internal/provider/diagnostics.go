package provider

import (
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// addConsulError turns a Consul error into a diagnostic whose detail says
// what to do for its kind, followed by Consul's own words.
func addConsulError(diags *diag.Diagnostics, summary string, err error) {
	var advice string
	switch consul.KindOf(err) {
	case consul.KindInvalidToken:
		summary = "Invalid Or Expired Consul Token"
		advice = "Consul does not accept the provider's token: it is unknown or has expired. Nothing was removed from state. Configure a valid token and run again."
	case consul.KindPermissionDenied:
		advice = "The provider's token lacks a permission Consul requires for this operation. Grant it in the token's policy, or use a token that has it."
	case consul.KindTransient:
		advice = "Consul was unreachable or had no leader, and retries ran out. Check the cluster, then run again; nothing was changed that a re-run will not converge."
	case consul.KindValidation:
		advice = "Consul rejected the request as invalid. Fix the value named in the message."
	default:
		advice = "The Consul request failed."
	}
	diags.AddError(summary, fmt.Sprintf("%s\n\n%s", advice, err))
}

// addFieldErrors reports lockmodel validation errors on their attributes.
func addFieldErrors(diags *diag.Diagnostics, summary string, err error) {
	fieldErrs := validation.AsFieldErrors(err)
	if len(fieldErrs) == 0 {
		diags.AddError(summary, err.Error())
		return
	}
	for _, fe := range fieldErrs {
		diags.AddAttributeError(attributePath(fe.Field), summary, fe.Error()+".")
	}
}

// addWarnings reports lockmodel warnings on their attributes.
func addWarnings(diags *diag.Diagnostics, warnings []validation.Warning) {
	for _, w := range warnings {
		if w.Field == "" {
			diags.AddWarning(w.Summary, w.Detail)
			continue
		}
		diags.AddAttributeWarning(attributePath(w.Field), w.Summary, w.Detail)
	}
}

// attributePath maps a lockmodel field name ("ttl", or a nested
// attribute's "run_once.period"; "lock_keys[2]" is not used) to its
// attribute path.
func attributePath(field string) path.Path {
	parts := strings.Split(field, ".")
	p := path.Root(parts[0])
	for _, name := range parts[1:] {
		p = p.AtName(name)
	}
	return p
}
