package mysqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/go-sql-driver/mysql"
)

// The misuses of FENCING.md's "Pitfalls" that no API call can see, run
// against a real MariaDB so that what the page says of them is what they
// do. Each asserts the misuse's outcome, not a wish. The ones pgfence
// shares come first; then InnoDB's own.

// Two fence tables over one data table: each keeps its own marks, so a
// writer checked against the other table passes with an older token.
func TestPitfallTwoFenceTables(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	if err := mysqlfence.CreateTable(ctx, db, "fence_b"); err != nil {
		t.Fatal(err)
	}
	a := mysqlfence.New(db)
	b := mysqlfence.New(db, mysqlfence.WithTable("fence_b"))
	if err := a.Admit(ctx, "acct", 70, write("acct", "seventy", 70)); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(ctx, "acct", 60, write("acct", "sixty", 60)); err != nil {
		t.Fatalf("the other table's check: %v", err)
	}
	if v := value(t, db, "acct"); v != "sixty" {
		t.Fatalf("value %q", v)
	}
}

// Row on a row the fence table also guards: two marks, and each lets in
// what the other refused.
func TestPitfallRowAndFenceTable(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	mustExec(t, db, `CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB`)
	mustExec(t, db, `INSERT INTO accounts (id, balance) VALUES (42, 0)`)
	if err := mysqlfence.New(db).Do(ctx, "accounts/42", 80, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = 80 WHERE id = 42`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r := mysqlfence.Row{Table: "accounts", Key: "id", TokenColumn: "fence_token"}
	if err := r.Update(ctx, db, int64(42), 40, "balance = ?", 40); err != nil {
		t.Fatalf("Row's own check: %v", err)
	}
	var bal int64
	if err := db.QueryRow(`SELECT balance FROM accounts WHERE id = 42`).Scan(&bal); err != nil || bal != 40 {
		t.Fatalf("balance %d %v", bal, err)
	}
}

// A write through the pool, not the fence's transaction, is not fenced.
func TestPitfallWriteOutsideTheTransaction(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	f := mysqlfence.New(db)
	if err := f.Admit(ctx, "acct", 9, write("acct", "nine", 9)); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(ctx, "acct", 3, write("acct", "three", 3)); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale: %v", err)
	}
	mustExec(t, db, `UPDATE data SET value = 'three' WHERE resource = 'acct'`)
	if v := value(t, db, "acct"); v != "three" {
		t.Fatalf("value %q", v)
	}
}

// One shared row written under several resources (each holder fenced on
// its own key's resource): two read-modify-writes interleave and one
// increment is lost, at READ COMMITTED and, unlike PostgreSQL (which
// fails the second with 40001), at InnoDB's REPEATABLE READ too.
func TestPitfallSharedRowAcrossResources(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			db := newDB(t)
			ctx := context.Background()
			mustExec(t, db, `CREATE TABLE totals (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB`)
			mustExec(t, db, `INSERT INTO totals VALUES (1, 0)`)
			begin := func(resource string, token uint64) (*sql.Tx, int64) {
				tx, err := db.BeginTx(ctx, l.opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { tx.Rollback() })
				if err := mysqlfence.Check(ctx, tx, mysqlfence.DefaultTable, resource, token); err != nil {
					t.Fatal(err)
				}
				var n int64
				if err := tx.QueryRow(`SELECT n FROM totals WHERE id = 1`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return tx, n
			}
			txA, nA := begin("jobs/a", 5)
			txB, nB := begin("jobs/b", 6)
			if _, err := txB.Exec(`UPDATE totals SET n = ? WHERE id = 1`, nB+1); err != nil {
				t.Fatal(err)
			}
			if err := txB.Commit(); err != nil {
				t.Fatal(err)
			}
			if _, err := txA.Exec(`UPDATE totals SET n = ? WHERE id = 1`, nA+1); err != nil {
				t.Fatal(err)
			}
			if err := txA.Commit(); err != nil {
				t.Fatal(err)
			}
			var n int64
			if err := db.QueryRow(`SELECT n FROM totals WHERE id = 1`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("total %d after two committed increments (%v)", n, err)
			}
		})
	}
}

// At REPEATABLE READ a transaction reads from the snapshot of its first
// plain read. One made before the check (here: anything at all) is from
// before the previous holder's commit, so a plain read after the check
// still misses that holder's write; a locking read (FOR UPDATE) sees it.
// At READ COMMITTED each read is fresh. Fence.Do's own statements are all
// locking, so an effect's first plain read is after the check.
func TestPitfallReadBeforeTheCheck(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			db := newDB(t)
			ctx := context.Background()
			f := mysqlfence.New(db)
			if err := f.Admit(ctx, "acct", 5, write("acct", "five", 5)); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, l.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var n int
			if err := tx.QueryRow(`SELECT COUNT(*) FROM data`).Scan(&n); err != nil { // the snapshot, at RR
				t.Fatal(err)
			}
			if err := f.Admit(ctx, "acct", 5, write("acct", "five again", 5)); err != nil { // the previous holder commits
				t.Fatal(err)
			}
			if err := mysqlfence.Check(ctx, tx, mysqlfence.DefaultTable, "acct", 6); err != nil {
				t.Fatal(err)
			}
			var plain, locking string
			if err := tx.QueryRow(`SELECT value FROM data WHERE resource = 'acct'`).Scan(&plain); err != nil {
				t.Fatal(err)
			}
			if err := tx.QueryRow(`SELECT value FROM data WHERE resource = 'acct' FOR UPDATE`).Scan(&locking); err != nil {
				t.Fatal(err)
			}
			want := "five again"
			if l.opts.Isolation == sql.LevelRepeatableRead {
				want = "five"
			}
			if plain != want || locking != "five again" {
				t.Fatalf("plain read %q (want %q), locking read %q", plain, want, locking)
			}
		})
	}
}

// The check done by hand, SELECT ... FOR UPDATE and then INSERT when there
// is no row: at REPEATABLE READ both first writers of a new resource get
// the (shared) gap lock, both insert, and InnoDB kills one as a deadlock
// (1213); at READ COMMITTED the second fails on the duplicate key (1062).
// The fence inserts first (TestConcurrentTokensAtOneResource's fresh
// resources).
func TestPitfallSelectForUpdateThenInsert(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			db := newDB(t)
			ctx := context.Background()
			var txs [2]*sql.Tx
			for i := range txs {
				tx, err := db.BeginTx(ctx, l.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				var tok int64
				if err := tx.QueryRow(`SELECT token FROM fence WHERE resource = 'new' FOR UPDATE`).Scan(&tok); !errors.Is(err, sql.ErrNoRows) {
					t.Fatalf("no row yet: %v", err)
				}
				txs[i] = tx
			}
			first := make(chan error, 1)
			go func() {
				_, err := txs[0].Exec(`INSERT INTO fence (resource, token, write_token) VALUES ('new', 5, 5)`)
				if l.opts.Isolation == sql.LevelReadCommitted && err == nil {
					err = txs[0].Commit()
				}
				first <- err
			}()
			if l.opts.Isolation == sql.LevelReadCommitted {
				if err := <-first; err != nil {
					t.Fatalf("the first insert: %v", err)
				}
			}
			_, err := txs[1].Exec(`INSERT INTO fence (resource, token, write_token) VALUES ('new', 6, 6)`)
			want := uint16(1062)
			if l.opts.Isolation == sql.LevelRepeatableRead {
				want = 1213
				if err == nil { // the other one was the victim
					err = <-first
				} else {
					txs[1].Rollback()
					if e := <-first; e != nil {
						t.Fatalf("both failed: %v, %v", err, e)
					}
				}
			}
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != want {
				t.Fatalf("err %v, want MySQL error %d", err, want)
			}
		})
	}
}

// A fence table made by hand with text columns: under the default _ci,
// PAD SPACE collation "ACCT" and "acct " are the row of "acct", so a
// token of one resource is stale against another's mark (and raises it).
func TestPitfallCollationMergesResources(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	mustExec(t, db, `CREATE TABLE fence_text (resource VARCHAR(255) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB`)
	if err := mysqlfence.CreateTable(ctx, db, "fence_text"); err != nil {
		t.Fatal(err)
	}
	f := mysqlfence.New(db, mysqlfence.WithTable("fence_text"))
	if err := f.Admit(ctx, "acct", 50, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"ACCT", "acct "} {
		if err := f.Admit(ctx, r, 1, nil); !errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("%q on a _ci table: %v", r, err)
		}
	}
}

// DDL in the effect commits the transaction where it stands (MySQL's
// implicit commit): the effect's write before it is kept though the
// effect fails, and the savepoint it was to roll back to is gone.
func TestPitfallDDLInTheEffect(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	err := mysqlfence.New(db).Admit(ctx, "acct", 4, func(ctx context.Context) error {
		if err := write("acct", "kept", 4)(ctx); err != nil {
			return err
		}
		if _, err := mysqlfence.Tx(ctx).ExecContext(ctx, `CREATE TABLE scratch (id INT)`); err != nil {
			return err
		}
		return errEffect
	})
	if !errors.Is(err, errEffect) || err.Error() == errEffect.Error() {
		t.Fatalf("err %v, want the effect's and the lost savepoint's", err)
	}
	if v := value(t, db, "acct"); v != "kept" {
		t.Fatalf("value %q", v)
	}
}

// A MyISAM table is not transactional: a failed effect's write to it is
// not rolled back with the savepoint.
func TestPitfallMyISAMTable(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	mustExec(t, db, `CREATE TABLE notes (resource VARBINARY(64) PRIMARY KEY, note VARCHAR(64)) ENGINE=MyISAM`)
	err := mysqlfence.New(db).Admit(ctx, "acct", 4, func(ctx context.Context) error {
		if _, err := mysqlfence.Tx(ctx).ExecContext(ctx, `INSERT INTO notes VALUES ('acct', 'kept')`); err != nil {
			return err
		}
		return errEffect
	})
	if !errors.Is(err, errEffect) {
		t.Fatalf("err %v", err)
	}
	var note string
	if err := db.QueryRow(`SELECT note FROM notes WHERE resource = 'acct'`).Scan(&note); err != nil || note != "kept" {
		t.Fatalf("note %q %v", note, err)
	}
}
