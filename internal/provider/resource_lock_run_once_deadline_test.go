package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// A schedule without starting_deadline is a plan warning naming
// run_once.starting_deadline and the default bound (the latest slot may
// start until the next slot's time); one with a deadline, and a period,
// plan without it.
func TestAccLock_runOnceScheduleWithoutStartingDeadlineWarnsAtPlan(t *testing.T) {
	p := testenv.UniquePrefix(t.Name())
	reg := p + "/registry"
	w := newTofuWorkdir(t, reattachTerraformBlock+lockTestProvider(reg)+fmt.Sprintf(`
resource "consullock_lock" "unbounded" {
  name     = "unbounded"
  prefix   = "%s/unbounded"
  run_once = { schedule = "0 2 * * *", time_zone = "Europe/Berlin" }
}

resource "consullock_lock" "bounded" {
  name     = "bounded"
  prefix   = "%s/bounded"
  run_once = { schedule = "0 3 * * *", starting_deadline = "10m" }
}

resource "consullock_lock" "period" {
  name     = "period"
  prefix   = "%s/period"
  run_once = { period = "24h" }
}
`, p, p, p))
	out := w.mustRun(t, "plan", "-input=false", "-no-color")
	assertOutputHas(t, out,
		"Warning: Schedule Without Starting Deadline",
		"with consullock_lock.unbounded",
		"has no run_once.starting_deadline",
		"up to the next slot's time",
	)
	if n := strings.Count(out, "Warning: Schedule Without Starting Deadline"); n != 1 {
		t.Errorf("%d such warnings, want 1 (for the schedule without a deadline only):\n%s", n, out)
	}
}
