package provider

import (
	"context"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// consullock_acl_policy's run_ledgers: key write on the run ledger of each
// named lock, <registry_prefix>/runs/<name>, which a run-once holder writes
// (aclrules.RulesInput.RunLedgerKeys).

func runLedgersSchemaAttribute() schema.SetAttribute {
	return schema.SetAttribute{
		MarkdownDescription: "Names of `run_once` locks whose holders record their runs: `key \"<registry_prefix>/runs/<name>\" { " +
			"policy = \"write\" }` on each ledger, nothing else under the registry. Holders also need `read_keys` " +
			"on the lock's declaration and its profile's record.",
		Optional:    true,
		ElementType: types.StringType,
		Validators: []validator.Set{setvalidator.ValueStringsAre(domainStringRule{
			check: lockmodel.ValidateName, what: allowedText(lockmodel.ValidateName("run_ledgers", "")),
		})},
	}
}

// rulesInput is m's rules input with run_ledgers turned into their keys
// under the provider's registry prefix; known is false while an input is
// unknown, or the provider is not configured yet and run_ledgers is set.
func (r *aclPolicyResource) rulesInput(ctx context.Context, m aclPolicyModel, diags *diag.Diagnostics) (aclrules.RulesInput, bool) {
	in, known := m.rulesInput(ctx, diags)
	if !known {
		return in, false
	}
	s := m.RunLedgers
	if s.IsUnknown() || slices.ContainsFunc(s.Elements(), func(v attr.Value) bool { return v.IsUnknown() }) {
		return in, false
	}
	names := aclSetStrings(ctx, s, diags)
	if len(names) == 0 {
		return in, true
	}
	if r.data == nil {
		return in, false
	}
	for _, n := range names {
		in.RunLedgerKeys = append(in.RunLedgerKeys, record.RunLedgerKey(r.data.registryPrefix, n))
	}
	return in, true
}

// runLedgerNames is run_ledgers of an imported policy: the lock names of
// in's run ledger keys (aclrules.RulesInput.SplitRunLedgers); null for
// none, as an omitted attribute is.
func runLedgerNames(registryPrefix string, in aclrules.RulesInput) types.Set {
	folder := lockmodel.RegistryFolder(registryPrefix, lockmodel.KindRuns)
	names := make([]string, 0, len(in.RunLedgerKeys))
	for _, k := range in.RunLedgerKeys {
		names = append(names, strings.TrimPrefix(strings.Trim(k, "/"), folder))
	}
	return aclStringSet(names)
}
