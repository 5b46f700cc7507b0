package peerbench

import (
	"testing"
	"time"
)

func TestMeasureFairness(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := func(client, start, granted int) Wait {
		return Wait{Client: client, Start: at(start), Granted: at(granted)}
	}
	tests := []struct {
		name  string
		waits []Wait
		slack time.Duration
		want  Fairness
	}{
		{
			name:  "no waits is not FIFO evidence",
			waits: nil,
			want:  Fairness{},
		},
		{
			name: "granted in start order",
			// A and B queue, C queues later; grants A, B, C.
			waits: []Wait{w(0, 0, 1), w(1, 2, 10), w(2, 5, 20)},
			want:  Fairness{Grants: 3, HandOffs: 2, LongestWait: 15 * time.Millisecond},
		},
		{
			name: "a later starter granted first is an overtake (barging)",
			// client 0 waits from 0 to 30; clients 1 and 2 start at 10 and 12
			// and are granted at 15 and 20, ahead of it.
			waits: []Wait{w(1, 10, 15), w(2, 12, 20), w(0, 0, 30)},
			want:  Fairness{Grants: 3, HandOffs: 2, Overtaken: 1, MaxOvertakes: 2, WorstGap: 12 * time.Millisecond, LongestWait: 30 * time.Millisecond},
		},
		{
			name: "starts closer than the slack are ties, not overtakes",
			// Both start within 1ms; the later one is granted first.
			waits: []Wait{w(1, 1, 5), w(0, 0, 9)},
			slack: 2 * time.Millisecond,
			want:  Fairness{Grants: 2, HandOffs: 1, LongestWait: 9 * time.Millisecond},
		},
		{
			name:  "the same client re-acquiring is a grant but not a hand-off",
			waits: []Wait{w(0, 0, 1), w(0, 2, 3), w(0, 4, 5), w(1, 0, 6)},
			want:  Fairness{Grants: 4, HandOffs: 1, Overtaken: 1, MaxOvertakes: 2, WorstGap: 4 * time.Millisecond, LongestWait: 6 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MeasureFairness(tt.waits, tt.slack)
			if got != tt.want {
				t.Errorf("MeasureFairness = %+v\nwant %+v", got, tt.want)
			}
			if got.FIFO() != (tt.want.Grants > 0 && tt.want.Overtaken == 0) {
				t.Errorf("FIFO() = %v", got.FIFO())
			}
		})
	}
}
