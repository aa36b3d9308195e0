package lockmodel

import (
	"fmt"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// MaxRuntimeWarnings warns when run_once.max_runtime plus the runner's
// default -grace (DefaultRunnerGrace) is above max_hold (both > 0): the
// controller then reports the holder (and in enforce mode ends its
// session, a lost lock) before the runner stops the command itself as
// timed_out. See the max_runtime and max_hold rule in package ledger (jobcontrol.go).
func MaxRuntimeWarnings(maxRuntime, maxHold time.Duration) []validation.Warning {
	if maxRuntime <= 0 || maxHold <= 0 || maxRuntime+DefaultRunnerGrace <= maxHold {
		return nil
	}
	return []validation.Warning{{Field: ledger.FieldRunOnceMaxRuntime, Summary: "Max Runtime Above Max Hold",
		Detail: fmt.Sprintf("run_once.max_runtime %s plus the runner's -grace (default %s) is above max_hold %s: a command that runs that long "+
			"is reported by the controller as a holder past max_hold (in enforce mode its session is ended and the attempt is lost) "+
			"before its runner stops it as timed_out. Set max_runtime to at most %s, or raise max_hold.",
			FormatDuration(maxRuntime), FormatDuration(DefaultRunnerGrace), FormatDuration(maxHold), FormatDuration(maxHold-DefaultRunnerGrace))}}
}
