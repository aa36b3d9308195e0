package lockmodel

import (
	"strings"
	"testing"
	"time"
)

func TestMaxRuntimeWarnings(t *testing.T) {
	for _, tc := range []struct {
		runtime, hold time.Duration
		warn          bool
	}{
		{0, time.Hour, false},
		{2 * time.Hour, 0, false},
		{time.Hour - DefaultRunnerGrace, time.Hour, false},
		{time.Hour - DefaultRunnerGrace + time.Second, time.Hour, true},
		{2 * time.Hour, time.Hour, true},
	} {
		ws := MaxRuntimeWarnings(tc.runtime, tc.hold)
		if (len(ws) > 0) != tc.warn {
			t.Errorf("max_runtime %s, max_hold %s: %+v, want warning %v", tc.runtime, tc.hold, ws, tc.warn)
			continue
		}
		if tc.warn && (ws[0].Field != "run_once.max_runtime" || !strings.Contains(ws[0].Detail, "max_hold "+FormatDuration(tc.hold))) {
			t.Errorf("warning %+v does not name the field and max_hold", ws[0])
		}
	}
}
