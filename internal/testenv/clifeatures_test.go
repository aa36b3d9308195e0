package testenv

import "testing"

func TestParseVersionLine_featuresByCLI(t *testing.T) {
	for _, tc := range []struct {
		line   string
		name   string
		has    []CLIFeature
		hasNot []CLIFeature
	}{
		{"OpenTofu v1.12.6", "tofu", []CLIFeature{FeatureEphemeralResources, FeatureWriteOnlyAttrs, FeatureProviderFunctions, FeatureIdentityImport}, nil},
		{"OpenTofu v1.10.6", "tofu", []CLIFeature{FeatureProviderFunctions}, []CLIFeature{FeatureEphemeralResources, FeatureWriteOnlyAttrs, FeatureIdentityImport}},
		{"Terraform v1.5.7", "terraform", nil, []CLIFeature{FeatureProviderFunctions, FeatureEphemeralResources, FeatureWriteOnlyAttrs, FeatureIdentityImport}},
		{"Terraform v1.10.0-dev", "terraform", []CLIFeature{FeatureEphemeralResources}, []CLIFeature{FeatureWriteOnlyAttrs}},
	} {
		info, err := parseVersionLine("cli", tc.line)
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if info.Name != tc.name {
			t.Errorf("%s: name %q, want %q", tc.line, info.Name, tc.name)
		}
		for _, f := range tc.has {
			if !info.Has(f) {
				t.Errorf("%s: should have %s", tc.line, f)
			}
		}
		for _, f := range tc.hasNot {
			if info.Has(f) {
				t.Errorf("%s: should not have %s", tc.line, f)
			}
		}
	}
	if _, err := parseVersionLine("cli", "something else"); err == nil {
		t.Error("an unrecognised version line must be an error")
	}
}
