package pgfence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/jackc/pgx/v5"
)

// The misuses of FENCING.md's "Pitfalls" that no API call can see, run
// against a real PostgreSQL so that what the page says of them is what
// they do. Each asserts the misuse's outcome, not a wish.

// Two fence tables over one data table: each keeps its own marks, so a
// writer checked against the other table passes with an older token.
func TestPitfallTwoFenceTables(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	if err := pgfence.CreateTable(ctx, pool, "fence_b"); err != nil {
		t.Fatal(err)
	}
	a := pgfence.New(pool)
	b := pgfence.New(pool, pgfence.WithTable("fence_b"))
	if err := a.Admit(ctx, "acct", 70, write("acct", "seventy", 70)); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(ctx, "acct", 60, write("acct", "sixty", 60)); err != nil {
		t.Fatalf("the other table's check: %v", err)
	}
	if v := value(t, pool, "acct"); v != "sixty" {
		t.Fatalf("value %q", v)
	}
}

// pgfence.Row on a row the fence table also guards: the token column and
// the fence row are two marks, and each lets in what the other refused.
func TestPitfallRowAndFenceTable(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, fence_token bigint NOT NULL DEFAULT 0)`)
	mustExec(t, pool, `INSERT INTO accounts (id, balance) VALUES (42, 0)`)
	f := pgfence.New(pool)
	if err := f.Do(ctx, "accounts/42", 80, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = 80 WHERE id = 42`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r := pgfence.Row{Table: "accounts", Key: "id", TokenColumn: "fence_token"}
	if err := r.Update(ctx, pool, int64(42), 40, "balance = $1", 40); err != nil {
		t.Fatalf("Row's own check: %v", err)
	}
	var bal int64
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 42`).Scan(&bal); err != nil || bal != 40 {
		t.Fatalf("balance %d %v", bal, err)
	}
}

// One shared row written under several resources (each holder fenced on
// its own key's resource): at READ COMMITTED two read-modify-writes
// interleave and one increment is lost, though both were admitted; at
// SERIALIZABLE the second commit is refused with 40001 instead.
func TestPitfallSharedRowAcrossResources(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			pool := newPool(t)
			ctx := context.Background()
			mustExec(t, pool, `CREATE TABLE totals (id int PRIMARY KEY, n bigint NOT NULL)`)
			mustExec(t, pool, `INSERT INTO totals VALUES (1, 0)`)
			begin := func(resource string, token uint64) (pgx.Tx, int64) {
				tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { tx.Rollback(ctx) })
				if err := pgfence.Check(ctx, tx, pgfence.DefaultTable, resource, token); err != nil {
					t.Fatal(err)
				}
				var n int64
				if err := tx.QueryRow(ctx, `SELECT n FROM totals WHERE id = 1`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return tx, n
			}
			txA, nA := begin("jobs/a", 5) // holder of key jobs/a
			txB, nB := begin("jobs/b", 6) // holder of key jobs/b
			if _, err := txB.Exec(ctx, `UPDATE totals SET n = $1 WHERE id = 1`, nB+1); err != nil {
				t.Fatal(err)
			}
			if err := txB.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			_, err := txA.Exec(ctx, `UPDATE totals SET n = $1 WHERE id = 1`, nA+1)
			if err == nil {
				err = txA.Commit(ctx)
			}
			var n int64
			if err := pool.QueryRow(ctx, `SELECT n FROM totals WHERE id = 1`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			switch iso {
			case pgx.ReadCommitted:
				if err != nil || n != 1 {
					t.Fatalf("READ COMMITTED: err %v, total %d after two committed increments", err, n)
				}
			default:
				if !pgfence.IsSerializationFailure(err) || n != 1 {
					t.Fatalf("SERIALIZABLE: err %v, total %d", err, n)
				}
			}
		})
	}
}

// A write through the pool, not the fence's transaction, is not fenced:
// it commits whatever the check said.
func TestPitfallWriteOutsideTheTransaction(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	f := pgfence.New(pool)
	if err := f.Admit(ctx, "acct", 9, write("acct", "nine", 9)); err != nil {
		t.Fatal(err)
	}
	err := f.Admit(ctx, "acct", 3, func(ctx context.Context) error {
		return write("acct", "three", 3)(ctx)
	})
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale: %v", err)
	}
	// The same writer, writing on the pool after (or beside) the check.
	mustExec(t, pool, `UPDATE data SET value = 'three' WHERE resource = 'acct'`)
	if v := value(t, pool, "acct"); v != "three" {
		t.Fatalf("value %q", v)
	}
}
