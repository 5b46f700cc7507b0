package locktable

import (
	"strconv"
	"testing"
)

// One renewal round of 10,000 locks: one ExtendSession of the session that
// holds them all, against one Extend of each of 10,000 leases.
// go test ./internal/locktable -run X -bench RenewalRound -benchtime 2s
func BenchmarkRenewalRound(b *testing.B) {
	const n = 10000
	b.Run("session", func(b *testing.B) {
		tb := New()
		s, _ := tb.OpenSession("svc", 0, 30*Second)
		for i := 0; i < n; i++ {
			if _, err := tb.AcquireWith("k/"+strconv.Itoa(i), "svc", 0, 0, Options{Session: s.ID}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := tb.ExtendSession(s.ID, "svc", Time(i+1)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
	})
	b.Run("leases", func(b *testing.B) {
		tb := New()
		keys := make([]string, n)
		tokens := make([]uint64, n)
		for i := range keys {
			keys[i] = "k/" + strconv.Itoa(i)
			l, _ := tb.Acquire(keys[i], "svc", 0, 30*Second)
			tokens[i] = l.Token
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for j, k := range keys {
				if _, err := tb.Extend(k, "svc", tokens[j], Time(i+1), 30*Second); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
	})
}

// The end of a session of 10,000 locks with a waiter on every tenth key:
// one Tick releases them all and hands 1,000 keys on.
func BenchmarkSessionExpiry(b *testing.B) {
	const n = 10000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tb := New()
		s, _ := tb.OpenSession("svc", 0, 10)
		for j := 0; j < n; j++ {
			k := "k/" + strconv.Itoa(j)
			tb.AcquireWith(k, "svc", 0, 0, Options{Session: s.ID})
			if j%10 == 0 {
				tb.Wait(k, "w", 0, 10, NoDeadline)
			}
		}
		b.StartTimer()
		tb.Tick(10)
		if tb.SessionCount() != 0 {
			b.Fatal("session still open")
		}
	}
}
