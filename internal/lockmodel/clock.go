package lockmodel

import (
	"fmt"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

// EnvClockOffset is a fault-injection hook, not a feature: the offset
// (a Go duration, e.g. "-90s") that CONSULLOCK_CLOCK_OFFSET gives the wall
// clock of `consullock run` and `consullock controller`, read once at
// start. The nemesis (tests/faults) sets it to test clock skew between
// nodes; users never set it, and the user docs do not name it.
const EnvClockOffset = "CONSULLOCK_CLOCK_OFFSET"

// MaxClockOffset bounds EnvClockOffset.
const MaxClockOffset = 24 * time.Hour

// Clock is the wall clock of a runner or a controller: the system's, moved
// by Offset (zero except under fault injection). It drives what is
// compared with another process's clock: the holder value's "started"
// (lockmodel.HoldStart, max_hold), the run-once slot (RunSlot) and the
// ledger's times. Durations a process measures itself (renewals, the stop
// rule, lock-delay waits) use the monotonic clock, which skew does not
// move. Two readings of one Clock subtract exactly; never pass one to
// time.Since or time.Until, which read the unmoved clock.
type Clock struct {
	Offset time.Duration
}

// Now is the moved wall clock.
func (c Clock) Now() time.Time {
	if c.Offset == 0 {
		return time.Now()
	}
	return time.Now().Add(c.Offset)
}

// ClockFromEnv reads EnvClockOffset through getenv (os.Getenv): unset or
// empty is the system clock; anything but a duration within
// ±MaxClockOffset is a *FieldError.
func ClockFromEnv(getenv func(string) string) (Clock, error) {
	v := getenv(EnvClockOffset)
	if v == "" {
		return Clock{}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < -MaxClockOffset || d > MaxClockOffset {
		return Clock{}, &validation.FieldError{Field: EnvClockOffset, Value: v,
			Allowed: fmt.Sprintf("a duration from -%s to %s (fault injection only)", FormatDuration(MaxClockOffset), FormatDuration(MaxClockOffset))}
	}
	return Clock{Offset: d}, nil
}
