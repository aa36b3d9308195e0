package main

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"

	consullock "github.com/consullock/terraform-provider-consullock/internal/provider"
)

// TestFloorHasConsullocksShape: the floor's resources have consullock's
// types, attributes, flags and defaults, so that the benchmark compares
// like with like whatever consullock's schema gains.
func TestFloorHasConsullocksShape(t *testing.T) {
	ctx := context.Background()
	for _, f := range []func() resource.Resource{consullock.NewLockResource, consullock.NewSessionDefaultsResource} {
		var want, got resource.SchemaResponse
		f().Schema(ctx, resource.SchemaRequest{}, &want)
		(&noopResource{shape: f}).Schema(ctx, resource.SchemaRequest{}, &got)
		if !got.Schema.Type().TerraformType(ctx).Equal(want.Schema.Type().TerraformType(ctx)) {
			t.Errorf("type %s, want %s", got.Schema.Type(), want.Schema.Type())
		}
		for name, w := range want.Schema.Attributes {
			g, ok := got.Schema.Attributes[name]
			if !ok {
				t.Errorf("%s: missing", name)
				continue
			}
			if g.IsRequired() != w.IsRequired() || g.IsOptional() != w.IsOptional() || g.IsComputed() != w.IsComputed() {
				t.Errorf("%s: required/optional/computed %v/%v/%v, want %v/%v/%v", name,
					g.IsRequired(), g.IsOptional(), g.IsComputed(), w.IsRequired(), w.IsOptional(), w.IsComputed())
			}
		}
	}
}
