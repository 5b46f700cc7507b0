package locktable

import (
	"strconv"
	"testing"
)

// BenchmarkSemaphoreAcquireRelease: one holder takes and gives back a
// permit of a 100-permit semaphore whose other 99 permits are held.
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	tb := New()
	sem := Shared{Kind: Semaphore, Permits: 100}
	for i := range 99 {
		if _, _, err := tb.AcquireShared("s", "h"+strconv.Itoa(i), sem, 0, Second*1000, 0, WaitLimits{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := tb.AcquireShared("s", "me", sem, 1, Second, 0, WaitLimits{}); err != nil {
			b.Fatal(err)
		}
		if ok, _ := tb.Release("s", "me", 1); !ok {
			b.Fatal("release")
		}
	}
}

// BenchmarkReadLockHandOff: a writer and a reader take turns through the
// queue: every release hands the key to the other.
func BenchmarkReadLockHandOff(b *testing.B) {
	tb := New()
	rd, wr := Shared{Kind: ReadWrite}, Shared{Kind: ReadWrite, Write: true}
	if _, _, err := tb.AcquireShared("k", "w", wr, 0, Second, 0, WaitLimits{}); err != nil {
		b.Fatal(err)
	}
	now := Time(0)
	b.ReportAllocs()
	for b.Loop() {
		now++
		tb.AcquireShared("k", "r", rd, now, Second, NoDeadline, WaitLimits{})
		tb.Release("k", "w", now)
		tb.AcquireShared("k", "w", wr, now, Second, NoDeadline, WaitLimits{})
		tb.Release("k", "r", now)
	}
}
