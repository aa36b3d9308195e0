package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// run_once.max_runtime that, with the runner's default -grace, outlasts
// max_hold is a plan warning naming run_once.max_runtime, both values
// and the largest max_runtime that fits; one that fits plans without it.
func TestAccLock_maxRuntimeAboveMaxHoldWarnsAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	w := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(p+"/registry")+fmt.Sprintf(`
resource "consullock_lock" "long" {
  name     = "long"
  prefix   = "%s/long"
  max_hold = "1h"
  run_once = { period = "24h", max_runtime = "2h" }
}

resource "consullock_lock" "fits" {
  name     = "fits"
  prefix   = "%s/fits"
  max_hold = "1h"
  run_once = { period = "24h", max_runtime = "55m" }
}
`, p, p))
	out := w.mustRun(t, "plan", "-input=false", "-no-color")
	assertOutputHas(t, out,
		"Warning: Max Runtime Above Max Hold",
		"with consullock_lock.long",
		"run_once.max_runtime 2h0m0s plus the runner's -grace (default 5s)",
		"max_hold 1h0m0s:",
		"59m55s, or raise max_hold",
	)
	if n := strings.Count(out, "Warning: Max Runtime Above Max Hold"); n != 1 {
		t.Errorf("%d such warnings, want 1 (for lock long only):\n%s", n, out)
	}
}
