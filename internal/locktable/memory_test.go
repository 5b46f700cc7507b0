package locktable

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// heldLockBytesBound is what a held lock may cost the table's live heap,
// its key's own bytes included, for keys shaped like the bench's W4
// ("flbench/<19 digits>/w4/<n>": a 48-byte allocation) held by 32
// holders: the entry (64), the key (48), the key index, the ordered index
// and the expiry heap. With a Go map from the key to the entry as the key
// index a lock took 174.7 bytes here (the map's slot repeats the key's
// string header); with the key index of entry pointers, 152.9.
const heldLockBytesBound = 160

// TestHeldLockBytes pins the live heap per held lock of a table of
// 100,000 held locks: a change that puts bytes back on every lock fails
// here, not in a million-lock run of the bench.
func TestHeldLockBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 100,000 locks and collects the heap; run without -short")
	}
	const n = 100000
	holders := make([]string, 32)
	for i := range holders {
		holders[i] = "c" + strconv.Itoa(i) + "-0123456789abcdef"
	}
	keys := make([]string, n)
	for k := range keys {
		// Fresh strings, as decoding a command makes them; the table keeps
		// a copy of its own, which is counted.
		keys[k] = "flbench/1765000000000000000/w4/" + strconv.Itoa(k)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := New()
	for k, key := range keys {
		if _, err := tb.Acquire(key, strings.Clone(holders[k%len(holders)]), Time(k), 3600*Second); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	runtime.KeepAlive(tb)
	runtime.KeepAlive(keys)
	t.Logf("%.1f B per held lock", per)
	if per > heldLockBytesBound {
		t.Fatalf("%.1f B per held lock, the bound is %d", per, heldLockBytesBound)
	}
}
