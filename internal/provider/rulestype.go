package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/consullock/terraform-provider-consullock/internal/aclrules"
)

var (
	_ basetypes.StringTypable                    = (*aclRulesType)(nil)
	_ basetypes.StringValuableWithSemanticEquals = (*aclRules)(nil)
)

// aclRulesType is the type of Consul ACL rules text. Two values are
// semantically equal when aclrules.NormalizeRules gives them the same
// canonical form, so whitespace, comments, ordering and HCL-vs-JSON
// differences between what was written and what Consul returns are never
// drift. It plays the part jsontypes.NormalizedType plays for JSON.
type aclRulesType struct {
	basetypes.StringType
}

func (t aclRulesType) String() string { return "provider.aclRulesType" }

func (t aclRulesType) ValueType(context.Context) attr.Value { return aclRules{} }

func (t aclRulesType) Equal(o attr.Type) bool {
	other, ok := o.(aclRulesType)
	if !ok {
		return false
	}
	return t.StringType.Equal(other.StringType)
}

func (t aclRulesType) ValueFromString(_ context.Context, in basetypes.StringValue) (basetypes.StringValuable, diag.Diagnostics) {
	return aclRules{StringValue: in}, nil
}

func (t aclRulesType) ValueFromTerraform(ctx context.Context, in tftypes.Value) (attr.Value, error) {
	v, err := t.StringType.ValueFromTerraform(ctx, in)
	if err != nil {
		return nil, err
	}
	s, ok := v.(basetypes.StringValue)
	if !ok {
		return nil, fmt.Errorf("unexpected value type of %T", v)
	}
	out, diags := t.ValueFromString(ctx, s)
	if diags.HasError() {
		return nil, fmt.Errorf("unexpected error converting StringValue to StringValuable: %v", diags)
	}
	return out, nil
}

// aclRules is a Consul ACL rules text (HCL or JSON).
type aclRules struct {
	basetypes.StringValue
}

func newACLRulesValue(s string) aclRules { return aclRules{StringValue: basetypes.NewStringValue(s)} }

func newACLRulesNull() aclRules { return aclRules{StringValue: basetypes.NewStringNull()} }

func newACLRulesUnknown() aclRules { return aclRules{StringValue: basetypes.NewStringUnknown()} }

func (v aclRules) Type(context.Context) attr.Type { return aclRulesType{} }

func (v aclRules) Equal(o attr.Value) bool {
	other, ok := o.(aclRules)
	if !ok {
		return false
	}
	return v.StringValue.Equal(other.StringValue)
}

// StringSemanticEquals reports whether both texts grant the same. A text
// that does not normalise (broken, or with content consullock cannot
// compare) is equal to nothing but itself: it is drift.
func (v aclRules) StringSemanticEquals(_ context.Context, newValuable basetypes.StringValuable) (bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	newValue, ok := newValuable.(aclRules)
	if !ok {
		diags.AddError("Semantic Equality Check Error",
			"An unexpected value type was received while comparing ACL rules. This is a bug in the provider; please report it.\n\n"+
				fmt.Sprintf("Expected Value Type: %T\nGot Value Type: %T", v, newValuable))
		return false, diags
	}
	return rulesEquivalent(v.ValueString(), newValue.ValueString()), diags
}

// rulesEquivalent is lockmodel.RulesEquivalent with "cannot tell" as false,
// except for identical texts.
func rulesEquivalent(a, b string) bool {
	if a == b {
		return true
	}
	eq, err := aclrules.RulesEquivalent(a, b)
	return err == nil && eq
}
