package lockmodel

import (
	"strings"
	"testing"
	"time"
)

func TestClockFromEnv(t *testing.T) {
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == EnvClockOffset {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{{"", 0}, {"-90s", -90 * time.Second}, {"3m", 3 * time.Minute}, {"0", 0}} {
		c, err := ClockFromEnv(env(tc.value))
		if err != nil || c.Offset != tc.want {
			t.Errorf("ClockFromEnv(%q) = %v, %v; want offset %s", tc.value, c.Offset, err, tc.want)
		}
	}
	for _, bad := range []string{"soon", "25h", "-25h", "90"} {
		_, err := ClockFromEnv(env(bad))
		if err == nil || !strings.Contains(err.Error(), EnvClockOffset) || !strings.Contains(err.Error(), bad) ||
			!strings.Contains(err.Error(), "from -24h") {
			t.Errorf("ClockFromEnv(%q) = %v; want an error naming %s, the value and the range", bad, err, EnvClockOffset)
		}
	}
}

func TestClock_movesTheWallClockByItsOffset(t *testing.T) {
	c := Clock{Offset: -2 * time.Minute}
	before := time.Now()
	got := c.Now()
	after := time.Now()
	if got.Before(before.Add(c.Offset)) || got.After(after.Add(c.Offset)) {
		t.Errorf("Now() = %s; want within [%s, %s]", got, before.Add(c.Offset), after.Add(c.Offset))
	}
	// Two readings subtract exactly: what a process measures itself is not moved.
	a := c.Now()
	time.Sleep(10 * time.Millisecond)
	if d := c.Now().Sub(a); d < 10*time.Millisecond || d > time.Second {
		t.Errorf("two readings 10ms apart differ by %s", d)
	}
}
