package locktable

import (
	"strconv"
	"testing"
)

func BenchmarkAcquireRelease(b *testing.B) {
	tb := New()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now := Time(i)
		if _, err := tb.Acquire("jobs/nightly", "worker-1", now, Second); err != nil {
			b.Fatal(err)
		}
		if ok, _ := tb.Release("jobs/nightly", "worker-1", now); !ok {
			b.Fatal("release")
		}
	}
}

func BenchmarkExtend(b *testing.B) {
	tb := New()
	l, _ := tb.Acquire("jobs/nightly", "worker-1", 0, Second)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := tb.Extend("jobs/nightly", "worker-1", l.Token, Time(i), Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReleaseManyKeys cycles over 10,000 keys with 10,000 other
// leases held, so the expiry heap has real depth.
func BenchmarkAcquireReleaseManyKeys(b *testing.B) {
	tb := New()
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "key/" + strconv.Itoa(i)
		if _, err := tb.Acquire("held/"+strconv.Itoa(i), "other", 0, 1000*Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i%len(keys)]
		if _, err := tb.Acquire(k, "worker", Time(i), Second); err != nil {
			b.Fatal(err)
		}
		tb.Release(k, "worker", Time(i))
	}
}

func BenchmarkHandOff(b *testing.B) {
	tb := New()
	holders := []string{"a", "b", "c", "d"}
	for _, h := range holders {
		_, _, _ = tb.Wait("hot", h, 0, Second, NoDeadline)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h := holders[i%len(holders)]
		if ok, _ := tb.Release("hot", h, 0); !ok {
			b.Fatalf("release by %s", h)
		}
		_, _, _ = tb.Wait("hot", h, 0, Second, NoDeadline)
	}
}
