package pgfence_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// grants is a real in-process fencelock server with three live leases:
// ledger/first (token 1), ledger/a (2) and ledger/b (3).
func grants(t *testing.T) (c *client.Client, a, b client.Lock) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv := clienttest.NewServer(clk)
	t.Cleanup(srv.Close)
	c, err := client.New([]string{srv.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, k := range []string{"ledger/first", "ledger/a", "ledger/b"} {
		l, err := c.Grant(ctx, k, "h-"+k, time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b = b, l
	}
	return c, a, b
}

// Findings 1 and 2 of issue 25 against a real PostgreSQL: a made-up token
// (2^63-1, the largest a bigint holds; 2^64-1 does not fit at all) or
// another key's live token raised the fence row for good. Verifying, both
// are refused, in READ COMMITTED and SERIALIZABLE, the transaction rolls
// back, and the live holder writes.
func TestVerifyingFenceRefusesForgedAndForeignTokens(t *testing.T) {
	c, a, b := grants(t)
	ctx := context.Background()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			pool := newPool(t)
			plain := pgfence.New(pool, pgfence.WithTxOptions(pgx.TxOptions{IsoLevel: iso}), pgfence.WithTable("plain"))
			if err := pgfence.CreateTable(ctx, pool, "plain"); err != nil {
				t.Fatal(err)
			}
			if err := plain.Admit(ctx, "acct", math.MaxInt64, nil); err != nil {
				t.Fatal(err)
			}
			if err := plain.Admit(ctx, "acct", a.Token, nil); !errors.Is(err, fence.ErrStaleToken) {
				t.Fatalf("unverified, as before: %v", err)
			}

			v := &fence.Verification{Verifier: client.NewVerifier(c), Key: func(string) string { return "ledger/a" }}
			f := pgfence.New(pool, pgfence.WithTxOptions(pgx.TxOptions{IsoLevel: iso}), pgfence.WithVerification(v))
			for _, s := range []struct {
				name  string
				ctx   context.Context
				token uint64
				want  error
			}{
				{"2^64-1", ctx, math.MaxUint64, nil},
				{"2^63-1", ctx, math.MaxInt64, fence.ErrUnverifiedToken},
				{"b's live token", ctx, b.Token, fence.ErrUnverifiedToken},
				{"b's live token, naming b", fence.WithKey(ctx, "ledger/b"), b.Token, fence.ErrWrongKey},
			} {
				err := f.Admit(s.ctx, "acct", s.token, write("acct", "forged", s.token))
				if err == nil || (s.want != nil && !errors.Is(err, s.want)) {
					t.Fatalf("%s: %v, want %v", s.name, err, s.want)
				}
				if _, ok := stored(t, pool, "acct"); ok || value(t, pool, "acct") != "<none>" {
					t.Fatalf("%s: a row was written", s.name)
				}
			}
			if err := f.Admit(ctx, "acct", a.Token, write("acct", "alice", a.Token)); err != nil {
				t.Fatal(err)
			}
			var key string
			if err := pool.QueryRow(ctx, `SELECT lock_key FROM fence WHERE resource = 'acct'`).Scan(&key); err != nil || key != "ledger/a" {
				t.Fatalf("lock_key %q %v", key, err)
			}
			if value(t, pool, "acct") != "alice" {
				t.Fatal("alice's write is not there")
			}
		})
	}
}

// A table made by the old TableDDL (resource, token) is upgraded by
// CreateTable, keeping its marks; MarksSQL lists them.
func TestCreateTableUpgradesAnOldTable(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE old (resource text PRIMARY KEY, token bigint NOT NULL)`)
	mustExec(t, pool, `INSERT INTO old VALUES ('acct', 7)`)
	f := pgfence.New(pool, pgfence.WithTable("old"))
	if err := f.Admit(ctx, "acct", 8, nil); err == nil || !strings.Contains(err.Error(), "run pgfence.CreateTable") {
		t.Fatalf("on a table without the new columns: %v", err)
	}
	if err := pgfence.CreateTable(ctx, pool, "old"); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(ctx, "acct", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("the old mark is kept: %v", err)
	}
	// The old row has no write_token: its mark was a write's.
	if err := f.AdmitRead(ctx, "acct", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("a read below an old row's mark: %v", err)
	}
	if err := f.AdmitRead(ctx, "acct", 7, nil); err != nil {
		t.Fatalf("a read at an old row's mark: %v", err)
	}
	if err := f.Admit(ctx, "acct", 8, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, pgfence.MarksSQL("old"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n int
	for rows.Next() {
		var res string
		var tok, last int64
		var key *string
		var at time.Time
		if err := rows.Scan(&res, &tok, &last, &key, &at); err != nil {
			t.Fatal(err)
		}
		if res != "acct" || tok != 8 || last != 8 || key != nil || at.IsZero() {
			t.Fatalf("mark %s %d %v %v", res, tok, key, at)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d marks", n)
	}
	// Mending one mark by hand (fence reset --sql is the recorded way).
	mustExec(t, pool, `UPDATE old SET token = 7, write_token = 7 WHERE resource = 'acct'`)
	if err := f.AdmitRead(ctx, "acct", 7, nil); err != nil {
		t.Fatalf("a read with token 7 after the marks were set to 7: %v", err)
	}
	if err := f.Admit(ctx, "acct", 7, nil); err != nil {
		t.Fatalf("token 7 after the marks were set to 7: %v", err)
	}
}

// Finding 7 of issue 25: only the in-memory RWGuard knew the read/write
// rule. The PostgreSQL fence keeps it, with a new pool (new sessions)
// after every step, at both isolation levels.
func TestReadWriteRule(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			pool := newPool(t)
			cfg := pool.Config()
			f := pgfence.New(pool, pgfence.WithTxOptions(pgx.TxOptions{IsoLevel: iso}))
			fencetest.CheckRW(t, f, func() fence.RWFence {
				p, err := pgxpool.NewWithConfig(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				return pgfence.New(p, pgfence.WithTxOptions(pgx.TxOptions{IsoLevel: iso}))
			})
			var tok, last int64
			if err := pool.QueryRow(context.Background(), `SELECT token, write_token FROM fence WHERE resource = 'doc'`).Scan(&tok, &last); err != nil || tok != 8 || last != 7 {
				t.Fatalf("row %d %d %v", tok, last, err)
			}
		})
	}
}
