package pgfence_test

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/jackc/pgx/v5"
)

// BenchmarkWrite is the fence's cost per write: one transaction that upserts
// a row, without the fence and through it (the fence-table upsert plus the
// savepoint that keeps the mark if the effect fails, in the same
// transaction), Check in the caller's own transaction (no savepoint), and
// the Row shape (the row's own token column, one UPDATE).
// One connection, sequential, against the test cluster over 127.0.0.1.
func BenchmarkWrite(b *testing.B) {
	pool := newPool(b)
	ctx := context.Background()
	mustExec(b, pool, `INSERT INTO data VALUES ('r', 'v', 1)`)
	upsert := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO data VALUES ('r', 'v', 1) ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value`)
		return err
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return upsert(ctx, tx) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		f := pgfence.New(pool)
		for b.Loop() {
			if err := f.Do(ctx, "r", 7, upsert); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check-in-own-tx", func(b *testing.B) {
		for b.Loop() {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := pgfence.Check(ctx, tx, pgfence.DefaultTable, "r", 7); err != nil {
					return err
				}
				return upsert(ctx, tx)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("row-token", func(b *testing.B) {
		r := pgfence.Row{Table: "data", Key: "resource", TokenColumn: "token"}
		for b.Loop() {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return r.Update(ctx, tx, "r", 7, "value = $1", "v")
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
