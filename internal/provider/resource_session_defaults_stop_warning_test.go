package provider

import (
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A profile whose lock_delay is too short for a runner cut off from Consul
// to renew, notice and kill (with the runner's default -grace) gets a plan
// warning of two lines, the verdict with the numbers and the fix;
// Consul's defaults do not.
func TestAccSessionDefaults_warnsWhenACutOffHolderCannotStopInTime(t *testing.T) {
	reg := testenv.UniquePrefix(t.Name()) + "/registry"
	w := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(reg)+`
resource "consullock_session_defaults" "short" {
  name       = "short"
  ttl        = "10s"
  lock_delay = "2s"
}

resource "consullock_session_defaults" "defaults" {
  name = "defaults"
}
`)
	out := w.mustRun(t, "plan", "-input=false", "-no-color")
	assertOutputHas(t, out,
		"Warning: Holders Cut Off From Consul Cannot Stop In Time",
		"with consullock_session_defaults.short",
		"Another holder may take over lock_delay 2s (health checks) after a cut-off holder's last renewal, "+
			"but stopping it takes renew_every 3.333333333s + renewal timeout 2s + -grace 5s + margin 1s = 11.333333333s.",
		`Set lock_delay = "12s" or longer.`,
	)
	if n := strings.Count(spaceRun.ReplaceAllString(out, " "), "Warning: Holders Cut Off From Consul Cannot Stop In Time"); n != 1 {
		t.Errorf("%d such warnings, want 1 (for the short profile only):\n%s", n, out)
	}
}
