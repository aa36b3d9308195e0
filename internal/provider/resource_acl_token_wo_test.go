package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A CLI that cannot send write-only values (OpenTofu before 1.11,
// Terraform before 1.11) would keep secret_id_wo in plan and state: the
// configuration is refused at validation, saying why. (Checked by hand with
// OpenTofu 1.10.6 too: `tofu validate` shows this error.)
func TestACLTokenValidateConfig_refusesWriteOnlySecretWithoutClientSupport(t *testing.T) {
	ctx := context.Background()
	r := &aclTokenResource{}
	var sresp resource.SchemaResponse
	r.Schema(ctx, resource.SchemaRequest{}, &sresp)
	typ, ok := sresp.Schema.Type().TerraformType(ctx).(tftypes.Object)
	if !ok {
		t.Fatal("the schema's type is not an object")
	}
	vals := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		vals[name] = tftypes.NewValue(at, nil)
	}
	vals["secret_id_wo"] = tftypes.NewValue(tftypes.String, testenv.NewUUID())
	vals["secret_id_wo_version"] = tftypes.NewValue(tftypes.Number, 1)
	config := tfsdk.Config{Schema: sresp.Schema, Raw: tftypes.NewValue(typ, vals)}

	for _, allowed := range []bool{false, true} {
		var resp resource.ValidateConfigResponse
		r.ValidateConfig(ctx, resource.ValidateConfigRequest{Config: config,
			ClientCapabilities: resource.ValidateConfigClientCapabilities{WriteOnlyAttributesAllowed: allowed}}, &resp)
		refused := resp.Diagnostics.HasError()
		if refused == allowed {
			t.Errorf("WriteOnlyAttributesAllowed=%t: refused=%t (%v)", allowed, refused, resp.Diagnostics)
		}
		if refused && !strings.Contains(resp.Diagnostics[0].Summary(), "Write-Only Secret Not Supported By This CLI") {
			t.Errorf("diagnostic %q does not say the CLI cannot send write-only values", resp.Diagnostics[0].Summary())
		}
	}
}
