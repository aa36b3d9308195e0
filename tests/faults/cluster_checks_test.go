package faults

import (
	"testing"
	"time"
)

func TestCheckSemaphore_countsHoldersAboveTheLimit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	start := func(run, token string, ms int) Write {
		return Write{Kind: KindStart, Run: run, Note: "token=" + token, At: at(ms), Accepted: true}
	}
	end := func(run string, ms int) Write { return Write{Kind: KindEnd, Run: run, At: at(ms), Accepted: true} }
	tests := []struct {
		name                                         string
		log                                          []Write
		overlaps, duplicated, completed, interrupted int
	}{
		{
			name:      "two holders, a third after one ended",
			log:       []Write{start("a", "1", 0), start("b", "2", 10), end("a", 100), start("c", "3", 110), end("b", 200), end("c", 300)},
			completed: 3,
		},
		{
			name:     "a third holder while two work",
			log:      []Write{start("a", "1", 0), start("b", "2", 10), start("c", "3", 50), end("a", 100), end("b", 200), end("c", 300)},
			overlaps: 1, completed: 3,
		},
		{
			name:      "a killed holder stops counting at its last write",
			log:       []Write{start("a", "1", 0), start("b", "2", 10), {Kind: KindFault, At: at(20)}, start("c", "3", 5000), end("b", 6000)},
			completed: 1, interrupted: 2,
		},
		{
			name:       "one token used twice",
			log:        []Write{start("a", "7", 0), end("a", 10), start("b", "7", 20), end("b", 30)},
			duplicated: 1, completed: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkSemaphore("x", tt.log, 2)
			if r.Overlaps != tt.overlaps || r.Duplicated != tt.duplicated || r.Completed != tt.completed || r.Interrupted != tt.interrupted {
				t.Errorf("checkSemaphore() = overlaps %d, duplicated %d, completed %d, interrupted %d; want %d, %d, %d, %d",
					r.Overlaps, r.Duplicated, r.Completed, r.Interrupted, tt.overlaps, tt.duplicated, tt.completed, tt.interrupted)
			}
		})
	}
}
