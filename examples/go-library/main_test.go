package main

import (
	"testing"
	"time"
)

// The package builds (go test compiles main), and every replica names a
// slot the same way whenever in the minute its cron fires.
func TestSlotID_sameAcrossTheMinute(t *testing.T) {
	slot := time.Date(2026, 12, 7, 2, 5, 0, 0, time.UTC)
	for _, late := range []time.Duration{0, 3 * time.Millisecond, 59 * time.Second} {
		if got := slotID(slot.Add(late).In(time.FixedZone("CET", 3600))); got != "2026-12-07T02:05:00Z" {
			t.Errorf("fired %s late: run ID %s", late, got)
		}
	}
}
