package faults

import (
	"reflect"
	"testing"
	"time"
)

func TestCheck_countsWhatTheFencingRuleMustPrevent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		log  []Write
		want Report
	}{
		{
			name: "clean hand-over",
			log: []Write{
				{Kind: KindStart, Run: "a", Token: 1, At: at(0), Accepted: true},
				{Kind: KindEnd, Run: "a", Token: 1, At: at(200), Accepted: true},
				{Kind: KindStart, Run: "b", Token: 2, At: at(210), Accepted: true},
				{Kind: KindEnd, Run: "b", Token: 2, At: at(400), Accepted: true},
			},
			want: Report{Executions: 2, HandOvers: 1, Completed: 2, MaxGap: 10 * time.Millisecond, Gaps: []time.Duration{10 * time.Millisecond}},
		},
		{
			name: "stalled leader fenced",
			log: []Write{
				{Kind: KindStart, Run: "a", Token: 1, At: at(0), Accepted: true},
				{Kind: KindFault, At: at(100)},
				{Kind: KindStart, Run: "b", Token: 2, At: at(21100), Accepted: true},
				{Kind: KindEnd, Run: "a", Token: 1, At: at(22000)},
				{Kind: KindEnd, Run: "b", Token: 2, At: at(23000), Accepted: true},
			},
			want: Report{Executions: 2, HandOvers: 1, Completed: 1, Interrupted: 1, FencedOverlaps: 1, MaxFencedOverlap: 900 * time.Millisecond, StaleRejected: 1, MaxGap: 21 * time.Second, Gaps: []time.Duration{21 * time.Second}},
		},
		{
			name: "a broken store accepting a stale token",
			log: []Write{
				{Kind: KindStart, Run: "a", Token: 1, At: at(0), Accepted: true},
				{Kind: KindStart, Run: "b", Token: 2, At: at(100), Accepted: true},
				{Kind: KindEnd, Run: "a", Token: 1, At: at(200), Accepted: true},
				{Kind: KindEnd, Run: "b", Token: 2, At: at(300), Accepted: true},
			},
			want: Report{Executions: 2, HandOvers: 1, Completed: 2, Overlaps: 1, StaleAccepted: 1, Gaps: []time.Duration{-100 * time.Millisecond}},
		},
		{
			name: "one acquisition running the job twice",
			log: []Write{
				{Kind: KindStart, Run: "a", Token: 3, At: at(0), Accepted: true},
				{Kind: KindEnd, Run: "a", Token: 3, At: at(100), Accepted: true},
				{Kind: KindStart, Run: "b", Token: 3, At: at(150), Accepted: true},
				{Kind: KindAbort, Run: "b", Token: 3, At: at(200), Accepted: true},
			},
			want: Report{Executions: 2, Completed: 1, Interrupted: 1, Duplicated: 1, MaxGap: 50 * time.Millisecond, Gaps: []time.Duration{50 * time.Millisecond}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Check("x", tt.log, 21*time.Second)
			got.Fault, got.WorstCaseGap = "", 0
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Check() =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestStore_rejectsLowerTokens(t *testing.T) {
	s, err := NewStore("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		token uint64
		want  bool
	}{{5, true}, {5, true}, {4, false}, {6, true}, {5, false}} {
		if got := s.Apply(Write{Kind: KindStart, Token: c.token}).Accepted; got != c.want {
			t.Errorf("token %d: accepted = %v, want %v", c.token, got, c.want)
		}
	}
}
