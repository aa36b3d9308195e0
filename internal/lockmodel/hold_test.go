package lockmodel

import (
	"encoding/json"
	"testing"
	"time"
)

func TestHoldStart(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	value := func(started time.Time) []byte {
		b, _ := json.Marshal(HolderValue{Node: "n1", PID: 7, Started: started})
		return b
	}
	for _, tc := range []struct {
		name   string
		value  []byte
		seen   HoldEvidence
		want   time.Time
		wantOK bool
	}{
		{"holder's start is believed when the observer did not see the hold begin (controller restart)",
			value(at(-3 * time.Hour)), HoldEvidence{FirstSeen: at(-time.Second)}, at(-3 * time.Hour), true},
		{"status without evidence of its own believes the holder",
			value(at(-10 * time.Minute)), HoldEvidence{}, at(-10 * time.Minute), true},
		{"a holder clock ahead is not believed beyond the observer's first sight",
			value(at(time.Minute)), HoldEvidence{FirstSeen: at(-5 * time.Second)}, at(-5 * time.Second), true},
		{"a holder clock ahead is not believed beyond now without a first sight",
			value(at(time.Minute)), HoldEvidence{}, now, true},
		{"a holder clock behind is not believed before the observer saw the lock without the hold",
			value(at(-2 * time.Hour)), HoldEvidence{FirstSeen: at(-29 * time.Second), NotBefore: at(-30 * time.Second)}, at(-30 * time.Second), true},
		{"within the observed window the holder's start stands",
			value(at(-20 * time.Second)), HoldEvidence{FirstSeen: at(-10 * time.Second), NotBefore: at(-30 * time.Second)}, at(-20 * time.Second), true},
		{"a value without started (consul lock) falls back to the first sight",
			[]byte("consul lock value"), HoldEvidence{FirstSeen: at(-time.Minute)}, at(-time.Minute), true},
		{"an empty value falls back to the first sight",
			nil, HoldEvidence{FirstSeen: at(-time.Minute), NotBefore: at(-2 * time.Minute)}, at(-time.Minute), true},
		{"JSON without started falls back to the first sight",
			[]byte(`{"node":"n1","pid":3}`), HoldEvidence{FirstSeen: at(-time.Minute)}, at(-time.Minute), true},
		{"without started and without a first sight the start is unknown (status: held for unknown)",
			[]byte("x"), HoldEvidence{}, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := HoldStart(tc.value, tc.seen, now)
			if !got.Equal(tc.want) || ok != tc.wantOK {
				t.Fatalf("HoldStart = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestHoldStart_neverOlderThanEvidencePlusSkew checks the bound the rule
// promises over a grid: the judged age exceeds the true age by at most the
// holder's clock lag, and by nothing when the observer saw the hold begin.
func TestHoldStart_neverOlderThanEvidencePlusSkew(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	for _, trueAge := range []time.Duration{time.Second, time.Minute, time.Hour} {
		for _, lag := range []time.Duration{-time.Hour, -time.Second, 0, time.Second, time.Hour} { // holder clock behind by lag
			for _, sawBegin := range []bool{false, true} {
				begin := now.Add(-trueAge)
				seen := HoldEvidence{FirstSeen: begin.Add(time.Millisecond)}
				if sawBegin {
					seen.NotBefore = begin.Add(-time.Millisecond)
				}
				b, _ := json.Marshal(HolderValue{Started: begin.Add(-lag)})
				start, ok := HoldStart(b, seen, now)
				judged := now.Sub(start)
				limit := trueAge + max(lag, 0)
				if sawBegin {
					limit = trueAge + time.Millisecond
				}
				if !ok || judged > limit || judged < now.Sub(seen.FirstSeen) {
					t.Errorf("true age %s, holder lag %s, saw begin %v: judged %s (ok %v); want within [%s, %s]",
						trueAge, lag, sawBegin, judged, ok, now.Sub(seen.FirstSeen), limit)
				}
			}
		}
	}
}
