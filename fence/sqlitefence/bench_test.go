package sqlitefence

import (
	"path/filepath"
	"testing"
)

// BenchmarkSQLiteWrite is one ledger insert per transaction, with the
// fence (Admit: BEGIN IMMEDIATE, the upsert, a savepoint, the insert,
// COMMIT) and without it (BEGIN IMMEDIATE, the insert, COMMIT), on a WAL
// database file with synchronous=FULL.
func BenchmarkSQLiteWrite(b *testing.B) {
	b.Run("fenced", func(b *testing.B) {
		_, f := setup(b, filepath.Join(b.TempDir(), "f.db"))
		for b.Loop() {
			if err := f.AdmitTx(ctx, "acct", 7, write("acct", 7, "x")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unfenced", func(b *testing.B) {
		db, _ := setup(b, filepath.Join(b.TempDir(), "f.db"))
		for b.Loop() {
			conn, err := db.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				b.Fatal(err)
			}
			if err := write("acct", 7, "x")(ctx, conn); err != nil {
				b.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
}
