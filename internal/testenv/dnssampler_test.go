package testenv

import (
	"testing"
	"time"
)

// TestDNSSamples_firstAndLastAnswerNamingAPort: FirstWith and LastWith
// date the first and the last answer that names a port among answers with
// one holder, two, none, and the port gone and back; zero when no answer
// names it.
func TestDNSSamples_firstAndLastAnswerNamingAPort(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := DNSSamples{
		{Sent: at(0), Ports: nil},
		{Sent: at(50), Ports: []int{20001}},
		{Sent: at(100), Ports: []int{20001, 20002}},
		{Sent: at(150), Ports: []int{20002}},
		{Sent: at(200), Ports: []int{20001, 20002}},
		{Sent: at(250), Ports: []int{}},
	}
	for _, tc := range []struct {
		name        string
		port        int
		first, last time.Time
	}{
		{"named first alone, then with another, gone and back", 20001, at(50), at(200)},
		{"named from the second holder's arrival on", 20002, at(100), at(200)},
		{"never named", 20003, time.Time{}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := samples.FirstWith(tc.port); !got.Equal(tc.first) {
				t.Errorf("FirstWith(%d) = %v, want %v", tc.port, got, tc.first)
			}
			if got := samples.LastWith(tc.port); !got.Equal(tc.last) {
				t.Errorf("LastWith(%d) = %v, want %v", tc.port, got, tc.last)
			}
			if first, last := samples.FirstWith(tc.port), samples.LastWith(tc.port); first.After(last) {
				t.Errorf("port %d: first answer %v after the last %v", tc.port, first, last)
			}
		})
	}
	if got := (DNSSamples{}).LastWith(20001); !got.IsZero() {
		t.Errorf("no answers: LastWith = %v, want zero", got)
	}
}
