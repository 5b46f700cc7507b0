package locktable_test

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// The snapshot bytes are a data-dir format: a table built by the same
// calls must encode to the same bytes, version by version, whatever the
// code that writes them. TestSnapshotBytesAreStable holds the encoding to
// testdata/snapshot-*.hex (rewritten with -update, after a deliberate
// format change only) and checks that those bytes restore and re-encode
// to themselves.
func TestSnapshotBytesAreStable(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(t *testing.T) *locktable.Table
	}{
		{"v2", goldenPlain},
		{"v3", goldenEverything},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.build(t).MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "snapshot-"+c.name+".hex")
			if *update {
				if err := os.WriteFile(path, []byte(hexLines(got)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the encoding changed:\n got %s\nwant %s", hexLines(got), hexLines(want))
			}
			back := locktable.New()
			if err := back.UnmarshalBinary(want); err != nil {
				t.Fatal(err)
			}
			if again, _ := back.MarshalBinary(); !bytes.Equal(again, want) {
				t.Fatalf("restored and encoded again:\n got %s\nwant %s", hexLines(again), hexLines(want))
			}
		})
	}
}

func hexLines(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		n := min(len(b), 32)
		s.WriteString(hex.EncodeToString(b[:n]) + "\n")
		b = b[n:]
	}
	return s.String()
}

// goldenPlain has exclusive leases only, with waiters: keys sharing
// prefixes, ttls alike and not, extended leases, a lease expired and not
// yet ended.
func goldenPlain(t *testing.T) *locktable.Table {
	tb := locktable.New()
	for i := range 12 {
		key := "jobs/" + strconv.Itoa(i)
		if i%4 == 0 {
			key = "z/" + key
		}
		ttl := locktable.Second
		if i%3 == 0 {
			ttl = 3 * locktable.Second
		}
		if _, err := tb.Acquire(key, "h"+strconv.Itoa(i%3), locktable.Time(i)*locktable.Time(locktable.Millisecond), ttl); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			l, _ := tb.Get(key, locktable.Time(i)*locktable.Time(locktable.Millisecond))
			if _, err := tb.Extend(key, l.Holder, l.Token, locktable.Time(i+7)*locktable.Time(locktable.Millisecond), 2*locktable.Second); err != nil {
				t.Fatal(err)
			}
		}
		if i%4 == 1 {
			if _, _, err := tb.Wait(key, "waiter"+strconv.Itoa(i), locktable.Time(i+9)*locktable.Time(locktable.Millisecond), locktable.Second, locktable.Time(i+9)*locktable.Time(locktable.Second)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := tb.Wait(key, "second", locktable.Time(i+10)*locktable.Time(locktable.Millisecond), 2*locktable.Second, locktable.NoDeadline); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The table's clock moves on (a call that finds nothing to release):
	// the leases of one second have expired, not ended.
	if ok, err := tb.Release("nothing", "nobody", 5*locktable.Time(locktable.Second)); ok || err != nil {
		t.Fatal(ok, err)
	}
	return tb
}

// goldenEverything adds every kind of state a section carries: sessions
// with locks and queue places (and one closed, so the id counter runs
// ahead), lock-delays on a lease, a waiter and a key in its delay,
// semaphores and read/write locks with holders and waiters.
func goldenEverything(t *testing.T) *locktable.Table {
	tb := goldenPlain(t)
	now := 5 * locktable.Time(locktable.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	s1, err := tb.OpenSession("sess", now, 4*locktable.Second)
	must(err)
	s2, err := tb.OpenSession("other", now, 6*locktable.Second)
	must(err)
	_, err = tb.CloseSession(s2.ID, "other", now)
	must(err)
	_, err = tb.OpenSession("other", now+1, 6*locktable.Second)
	must(err)
	_, err = tb.AcquireWith("s/a", "sess", now, 0, locktable.Options{Session: s1.ID})
	must(err)
	_, err = tb.AcquireWith("s/b", "sess", now, 0, locktable.Options{Session: s1.ID, LockDelay: 2 * locktable.Second})
	must(err)
	_, _, err = tb.WaitWith("jobs/5", "sess", now, 0, locktable.NoDeadline, locktable.WaitLimits{}, locktable.Options{Session: s1.ID})
	must(err)
	_, err = tb.AcquireWith("d/lease", "h", now, locktable.Second, locktable.Options{LockDelay: 3 * locktable.Second})
	must(err)
	_, err = tb.AcquireWith("d/gone", "h", now, locktable.Second, locktable.Options{LockDelay: 30 * locktable.Second})
	must(err)
	_, _, err = tb.WaitWith("d/lease", "patient", now, locktable.Second, locktable.NoDeadline, locktable.WaitLimits{}, locktable.Options{LockDelay: locktable.Second})
	must(err)
	tb.Tick(now + locktable.Time(locktable.Second)) // d/gone and d/lease expire: both keys in their delays
	now += locktable.Time(locktable.Second)
	sem := locktable.Shared{Kind: locktable.Semaphore, Permits: 2}
	for i, h := range []string{"p", "q", "r"} {
		_, _, err = tb.AcquireShared("sem", h, sem, now+locktable.Time(i), locktable.Duration(i+1)*locktable.Second, locktable.NoDeadline, locktable.WaitLimits{})
		must(err)
	}
	_, _, err = tb.AcquireShared("rw", "reader", locktable.Shared{Kind: locktable.ReadWrite}, now, 2*locktable.Second, 0, locktable.WaitLimits{})
	must(err)
	_, _, err = tb.AcquireShared("rw", "writer", locktable.Shared{Kind: locktable.ReadWrite, Write: true}, now, 2*locktable.Second, now+locktable.Time(9*locktable.Second), locktable.WaitLimits{})
	must(err)
	_, _, err = tb.AcquireShared("rw", "late", locktable.Shared{Kind: locktable.ReadWrite}, now, 2*locktable.Second, locktable.NoDeadline, locktable.WaitLimits{})
	must(err)
	return tb
}
