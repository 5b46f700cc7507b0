package sqlitefence

import (
	"path/filepath"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
)

// Finding 3 of issue 43 in SQLite: a new token's check hung while its
// transaction held SQLite's write lock, and every other writer of the
// database (the current holder of that resource and of others) failed
// with SQLITE_BUSY after the busy timeout. The check is made before
// BEGIN IMMEDIATE.
func TestSQLiteFenceNeverAsksUnderTheWriteLock(t *testing.T) {
	fencetest.CheckStalledVerifier(t, func(t *testing.T, v *fence.Verification) fence.Fence {
		db, err := Open(filepath.Join(t.TempDir(), "stall.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		f, err := New(db, "", WithVerification(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.CreateTable(ctx); err != nil {
			t.Fatal(err)
		}
		return f
	})
}
