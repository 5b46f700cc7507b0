package node

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// The entries are read in parts at once; the failure reported is the
// lowest index that fails, as a read in order would report.
func TestVerifyEntriesReportsTheFirstBadEntry(t *testing.T) {
	mem := monotonicInmem{raft.NewInmemStore()}
	const n = 10000
	bad := map[uint64]bool{7321: true, 9000: true, 5200: true}
	for i := uint64(1); i <= n; i++ {
		l := &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}}
		if !bad[i] {
			l = sealEntry(l)
		}
		if err := mem.StoreLog(l); err != nil {
			t.Fatal(err)
		}
	}
	cl := &checkedLog{inner: mem, crcFrom: 1}
	saved := verifyParts
	t.Cleanup(func() { verifyParts = saved })
	for _, parts := range []int{1, 2, 3, 4} {
		verifyParts = parts
		i, err := verifyEntries(cl, 1, n)
		if i != 5200 || !errors.Is(err, errEntryCorrupt) {
			t.Fatalf("%d parts: index %d, %v; want entry 5200 reported", parts, i, err)
		}
	}
	delete(bad, 5200)
	if i, err := verifyEntries(cl, 5201, n); i != 7321 || err == nil {
		t.Fatalf("from 5201: index %d, %v; want 7321", i, err)
	}
	if i, err := verifyEntries(cl, 1, 5199); err != nil {
		t.Fatalf("a clean range: index %d, %v", i, err)
	}
}
