package mysqlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/fencelock/fencelock/internal/mysqltest"
	"github.com/go-sql-driver/mysql"
)

// BenchmarkWrite is the fence's cost per write: one transaction that
// upserts a row, without the fence and through it (the locking upsert and
// read of the fence row, plus the savepoint that keeps the mark if the
// effect fails), Check in the caller's own transaction (no savepoint), a
// token that raises the mark each time (one UPDATE more), and the Row
// shape (the row's own token column). Every write changes its row. One connection, sequential, against
// the test server over 127.0.0.1, with innodb_flush_log_at_trx_commit=1;
// with the driver's default, a statement with arguments is prepared,
// executed and closed (two round trips), and with interpolateParams=true
// it is sent as one query (one).
func BenchmarkWrite(b *testing.B) {
	dsn := mysqltest.DB(b)
	for _, interpolate := range []bool{false, true} {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			b.Fatal(err)
		}
		cfg.InterpolateParams = interpolate
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		name := map[bool]string{false: "prepared", true: "interpolated"}[interpolate]
		b.Run(name, func(b *testing.B) { benchWrite(b, db) })
	}
}

func benchWrite(b *testing.B, db *sql.DB) {
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if err := mysqlfence.CreateTable(ctx, db, mysqlfence.DefaultTable); err != nil {
		b.Fatal(err)
	}
	mustExec(b, db, `CREATE TABLE IF NOT EXISTS data (resource VARBINARY(200) PRIMARY KEY, value VARCHAR(200) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`)
	mustExec(b, db, `INSERT IGNORE INTO data VALUES ('r', 'v', 1)`)
	// Each write changes the row, so that each commit flushes the redo
	// log, as a real write's does (an upsert that changes nothing commits
	// nothing to flush).
	n := 0
	up := func(ctx context.Context, tx *sql.Tx) error {
		n++
		return upsert(ctx, tx, "r", fmt.Sprint(n), 7)
	}
	inTx := func(fn func(tx *sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if err := inTx(func(tx *sql.Tx) error { return up(ctx, tx) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		f := mysqlfence.New(db)
		for b.Loop() {
			if err := f.Do(ctx, "r", 7, up); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check-in-own-tx", func(b *testing.B) {
		for b.Loop() {
			err := inTx(func(tx *sql.Tx) error {
				if err := mysqlfence.Check(ctx, tx, mysqlfence.DefaultTable, "r", 7); err != nil {
					return err
				}
				return up(ctx, tx)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced-raising", func(b *testing.B) {
		f := mysqlfence.New(db)
		var tok uint64
		_ = db.QueryRow(`SELECT token FROM fence WHERE resource = 'raising'`).Scan(&tok)
		for b.Loop() {
			tok++
			if err := f.Do(ctx, "raising", tok, up); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("row-token", func(b *testing.B) {
		r := mysqlfence.Row{Table: "data", Key: "resource", TokenColumn: "token"}
		for b.Loop() {
			if err := inTx(func(tx *sql.Tx) error {
				n++
				return r.Update(ctx, tx, "r", 7, "value = ?", fmt.Sprint(n))
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
