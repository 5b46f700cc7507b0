package locktable

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
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

// BenchmarkHeldLockMemory reports the live heap per held lock with 200,000
// leases held by 32 holders (keys like "w4/123456"), after a full GC: the
// table's share of issue 7's W4 bytes-per-lock figure.
func BenchmarkHeldLockMemory(b *testing.B) {
	const n = 200000
	holders := make([]string, 32)
	for i := range holders {
		holders[i] = "c" + strconv.Itoa(i) + "-0123456789abcdef"
	}
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tb := New()
		for k := 0; k < n; k++ {
			// Fresh strings, as decoding a command would make them.
			key := "w4/" + strconv.Itoa(k)
			holder := strings.Clone(holders[k%len(holders)])
			if _, err := tb.Acquire(key, holder, 0, 1000*Second); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/lock")
		runtime.KeepAlive(tb)
	}
}

// BenchmarkRestoreMillion decodes a snapshot of 1,000,000 held leases: the
// table's share of issue 7's W4 restart time.
func BenchmarkRestoreMillion(b *testing.B) {
	tb := New()
	for k := 0; k < 1000000; k++ {
		if _, err := tb.Acquire("w4/"+strconv.Itoa(k), "c"+strconv.Itoa(k%32)+"-0123456789abcdef", Time(k), 3600*Second); err != nil {
			b.Fatal(err)
		}
	}
	snap, _ := tb.MarshalBinary()
	b.ReportMetric(float64(len(snap))/1e6, "MB")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := New().UnmarshalBinary(snap); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSnapshotMillion(b *testing.B) {
	tb := New()
	for k := 0; k < 1000000; k++ {
		if _, err := tb.Acquire("w4/"+strconv.Itoa(k), "c"+strconv.Itoa(k%32)+"-0123456789abcdef", Time(k), 3600*Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tb.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}

// The entry must stay in the 64-byte size class: BenchmarkHeldLockMemory
// counts it once per held lock.
func TestEntryFitsSixtyFourBytes(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 64 {
		t.Fatalf("entry is %d bytes", n)
	}
}
