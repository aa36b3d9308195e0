package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func TestACLRules_semanticEquals(t *testing.T) {
	const canonical = "key \"jobs/a/.lock\" {\n  policy = \"write\"\n}\n\nsession_prefix \"web-\" {\n  policy = \"write\"\n}\n"
	for _, tc := range []struct {
		name, other string
		want        bool
	}{
		{"identical", canonical, true},
		{"comments and layout", "# lock holders\nsession_prefix \"web-\" { policy = \"write\" }\n/* the lock */ key \"jobs/a/.lock\" {\n\tpolicy = \"write\"\n}", true},
		{"json", `{"session_prefix":{"web-":{"policy":"write"}},"key":{"jobs/a/.lock":{"policy":"write"}}}`, true},
		{"widened", canonical + "\nkey_prefix \"\" {\n  policy = \"write\"\n}\n", false},
		{"removed rule", "key \"jobs/a/.lock\" {\n  policy = \"write\"\n}\n", false},
		{"changed disposition", "key \"jobs/a/.lock\" {\n  policy = \"read\"\n}\n\nsession_prefix \"web-\" {\n  policy = \"write\"\n}\n", false},
		{"unparsable", "key \"jobs/a/.lock\" {", false},
		{"unknown attribute", canonical + "\nsentinel { code = \"x\" }\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, diags := newACLRulesValue(canonical).StringSemanticEquals(context.Background(), newACLRulesValue(tc.other))
			if diags.HasError() {
				t.Fatalf("diagnostics: %v", diags)
			}
			if got != tc.want {
				t.Errorf("StringSemanticEquals = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestACLRules_semanticEqualsRejectsOtherTypes(t *testing.T) {
	_, diags := newACLRulesValue("").StringSemanticEquals(context.Background(), basetypes.NewStringValue(""))
	if !diags.HasError() {
		t.Fatal("no error for a plain string value")
	}
}

func TestACLRulesType_roundTripsTerraformValues(t *testing.T) {
	ctx := context.Background()
	for _, in := range []tftypes.Value{
		tftypes.NewValue(tftypes.String, "operator = \"read\"\n"),
		tftypes.NewValue(tftypes.String, nil),
		tftypes.NewValue(tftypes.String, tftypes.UnknownValue),
	} {
		v, err := aclRulesType{}.ValueFromTerraform(ctx, in)
		if err != nil {
			t.Fatalf("ValueFromTerraform(%v): %v", in, err)
		}
		rules, ok := v.(aclRules)
		if !ok {
			t.Fatalf("ValueFromTerraform returned %T", v)
		}
		out, err := rules.ToTerraformValue(ctx)
		if err != nil || !out.Equal(in) {
			t.Errorf("round trip of %v gave %v (%v)", in, out, err)
		}
		if !rules.Type(ctx).Equal(aclRulesType{}) {
			t.Error("value type is not aclRulesType")
		}
	}
	if !newACLRulesNull().IsNull() || !newACLRulesUnknown().IsUnknown() {
		t.Error("constructors do not make null and unknown values")
	}
	if newACLRulesValue("a").Equal(basetypes.NewStringValue("a")) {
		t.Error("aclRules equals a plain string")
	}
}
