package lockproto

import (
	"strings"
	"testing"
	"time"
)

// Issue 44: deadlines counted from the last contact (the guard's kill-by,
// the outcome's deadlines) are on the monotonic clock, so that a step of
// the wall clock does not move them. LastContact keeps the monotonic
// reading of the time it was given (time.Time's String shows it as m=).
func TestHold_lastContactKeepsTheMonotonicReading(t *testing.T) {
	var h Hold
	if !h.LastContact().IsZero() {
		t.Fatalf("a hold without contact: %s, want the zero time", h.LastContact())
	}
	now := time.Now()
	h.storeContact(now)
	got := h.LastContact()
	if !got.Equal(now) || !strings.Contains(got.String(), " m=") {
		t.Fatalf("LastContact() = %s, want %s with its monotonic reading", got, now)
	}
	// Stripping the monotonic reading is what a wall-clock step moves:
	// time.Until(got) must not depend on the wall clock.
	if got.Round(0).String() == got.String() {
		t.Fatal("LastContact() has no monotonic reading")
	}
}
