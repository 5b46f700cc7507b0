package fsm

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// The apply path of one W1 cycle (an acquire then a release of a free
// key), as raft drives it: encode, then Apply of the log entry. The
// observer is a no-op, as cheap as the server's is not.
//
//	go test ./internal/fsm/ -run '^$' -bench 'Apply' -benchmem
func BenchmarkApplyAcquireRelease(b *testing.B) {
	for _, id := range []bool{false, true} {
		name := "no-request-id"
		if id {
			name = "request-id"
		}
		b.Run(name, func(b *testing.B) {
			f := New(func(uint64, locktable.Event) {})
			b.ReportAllocs()
			var index uint64
			for i := 0; i < b.N; i++ {
				now := locktable.Time(i) * locktable.Time(locktable.Millisecond)
				acq := Command{Op: OpAcquire, Now: now, Key: "w1/" + strconv.Itoa(i%10000), Holder: "client-7", TTL: 10 * locktable.Second}
				rel := Command{Op: OpRelease, Now: now, Key: acq.Key, Holder: acq.Holder}
				if id {
					// 24 hex digits, as the client package makes them
					acq.RequestID = fmt.Sprintf("%024x", 2*i)
					rel.RequestID = fmt.Sprintf("%024x", 2*i+1)
				}
				d, err := Encode(acq)
				if err != nil {
					b.Fatal(err)
				}
				index++
				r := f.Apply(index, 1, d)
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				rel.Token = r.Lease.Token
				if d, err = Encode(rel); err != nil {
					b.Fatal(err)
				}
				index++
				if r := f.Apply(index, 1, d); !r.Released {
					b.Fatal("not released", r.Err)
				}
			}
		})
	}
}

// BenchmarkApplyBatch64 is 32 W1 cycles in one batch of 64 entries, the
// most raft hands the FSM at once (MaxAppendEntries), reported per cycle:
// "each" applies them one Apply at a time, "batch" in one ApplyBatch.
func BenchmarkApplyBatch64(b *testing.B) {
	for _, mode := range []string{"each", "batch"} {
		b.Run(mode, func(b *testing.B) {
			f := New(func(uint64, locktable.Event) {})
			const cycles = 32
			logs := make([]Entry, 2*cycles)
			var index uint64
			b.ReportAllocs()
			for i := 0; i < b.N; i += cycles {
				now := locktable.Time(i) * locktable.Time(locktable.Millisecond)
				for j := 0; j < cycles; j++ {
					k := "w1/" + strconv.Itoa(j)
					a, _ := Encode(Command{Op: OpAcquire, Now: now, Key: k, Holder: "client-" + strconv.Itoa(j), TTL: 10 * locktable.Second})
					r, _ := Encode(Command{Op: OpRelease, Now: now, Key: k, Holder: "client-" + strconv.Itoa(j)})
					index++
					logs[2*j] = Entry{Index: index, Term: 1, Data: a}
					index++
					logs[2*j+1] = Entry{Index: index, Term: 1, Data: r}
				}
				var out []Result
				if mode == "batch" {
					out = f.ApplyBatch(logs, nil)
				} else {
					out = make([]Result, len(logs))
					for i, l := range logs {
						out[i] = *f.Apply(l.Index, l.Term, l.Data)
					}
				}
				for j, r := range out {
					if r.Err != nil || (j%2 == 1 && !r.Released) {
						b.Fatal(j, r.Err)
					}
				}
			}
		})
	}
}

// BenchmarkReplayW4 is the state machine's part of a restart that
// replays a W4 log: acquires of new keys, each held, applied in raft's
// batches of 64 into a table that grows to 100,000 locks; per entry.
//
//	go test ./internal/fsm/ -run '^$' -bench 'ReplayW4' -benchmem
func BenchmarkReplayW4(b *testing.B) {
	const n = 100_000
	ents := make([]Entry, n)
	for i := range ents {
		d, err := Encode(Command{Op: OpAcquire, Now: locktable.Time(i), Key: fmt.Sprintf("flbench/w4/%d", i),
			Holder: "w4-" + strconv.Itoa(i%64), TTL: 600 * locktable.Second})
		if err != nil {
			b.Fatal(err)
		}
		ents[i] = Entry{Index: uint64(i + 1), Term: 1, Data: d}
	}
	b.ReportAllocs()
	for b.Loop() {
		f := New(func(uint64, locktable.Event) {})
		for i := 0; i < n; i += 64 {
			for _, r := range f.ApplyBatch(ents[i:min(i+64, n)], nil) {
				if !r.Granted {
					b.Fatal("not granted", r.Err)
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
}
