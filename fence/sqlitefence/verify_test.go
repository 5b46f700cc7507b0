package sqlitefence

import (
	"context"
	"errors"
	"fmt"
	"github.com/fencelock/fencelock/fence/fencetest"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
)

// Findings 1 and 2 of issue 25 against a real SQLite file and the real
// server: a made-up token (2^63-1; 2^64-1 does not fit an INTEGER) or
// another key's live token raised the mark for good. Verifying, both are
// refused, nothing is written, and the live holder writes.
func TestVerifyingFenceRefusesForgedAndForeignTokens(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	srv := clienttest.NewServer(clk)
	defer srv.Close()
	c, err := client.New([]string{srv.Addr}, client.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Grant(ctx, "ledger/first", "x", time.Minute, 0)
	a, _ := c.Grant(ctx, "ledger/a", "alice", time.Minute, 0)
	b, _ := c.Grant(ctx, "ledger/b", "bob", time.Minute, 0)

	path := filepath.Join(t.TempDir(), "fence.db")
	db, plain := setup(t, path)
	if err := plain.AdmitTx(ctx, "acct", math.MaxInt64, write("acct", math.MaxInt64, "forged")); err != nil {
		t.Fatal(err)
	}
	if err := plain.AdmitTx(ctx, "acct", a.Token, write("acct", a.Token, "alice")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("unverified, as before: %v", err)
	}
	if _, err := db.Exec("DELETE FROM fencelock_fence; DELETE FROM ledger"); err != nil {
		t.Fatal(err)
	}

	v := &fence.Verification{Verifier: client.NewVerifier(c), Key: func(string) string { return "ledger/a" }}
	f, err := New(db, "", WithVerification(v), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
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
		err := f.AdmitTx(s.ctx, "acct", s.token, write("acct", s.token, "forged"))
		if err == nil || (s.want != nil && !errors.Is(err, s.want)) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.want)
		}
		if m, _ := f.Marks(ctx); len(m) != 0 || notes(t, db) != "" {
			t.Fatalf("%s: written: marks %v, ledger %q", s.name, m, notes(t, db))
		}
	}
	if err := f.AdmitTx(ctx, "acct", a.Token, write("acct", a.Token, "alice")); err != nil {
		t.Fatal(err)
	}
	m, err := f.Marks(ctx)
	if err != nil || len(m) != 1 || m[0].Resource != "acct" || m[0].Token != a.Token || m[0].Key != "ledger/a" || !m[0].Raised.Equal(clk.Now()) {
		t.Fatalf("marks %+v %v", m, err)
	}
	if notes(t, db) != "alice" {
		t.Fatalf("ledger %q", notes(t, db))
	}
	var listed string
	if err := db.QueryRow(fmt.Sprintf(MarksSQL, DefaultTable)).Scan(new(string), new(int64), new(int64), new(string), &listed); err != nil || listed != "2025-03-01T12:00:00.000Z" {
		t.Fatalf("MarksSQL: %q %v", listed, err)
	}
}

// A table of the old DDL (resource, token) gets the new columns from
// CreateTable and keeps its marks.
func TestCreateTableUpgradesAnOldTable(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "old.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE fencelock_fence (resource TEXT PRIMARY KEY, token INTEGER NOT NULL CHECK (token > 0)); INSERT INTO fencelock_fence VALUES ('acct', 7)"); err != nil {
		t.Fatal(err)
	}
	f, _ := New(db, "")
	if err := f.Admit(ctx, "acct", 8, nil); err == nil || !strings.Contains(err.Error(), "run CreateTable") {
		t.Fatalf("on the old table: %v", err)
	}
	for range 2 {
		if err := f.CreateTable(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Admit(ctx, "acct", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("the old mark is kept: %v", err)
	}
	if err := f.Admit(ctx, "acct", 8, nil); err != nil {
		t.Fatal(err)
	}
}

// Finding 7 of issue 25: only the in-memory RWGuard knew the read/write
// rule. The SQLite fence keeps it, the database closed and opened again
// after every step.
func TestReadWriteRule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rw.db")
	open := func() *Fence {
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		f, _ := New(db, "")
		if err := f.CreateTable(ctx); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := open()
	fencetest.CheckRW(t, f, func() fence.RWFence {
		f.db.Close()
		f = open()
		return f
	})
	if m, err := f.Marks(ctx); err != nil || len(m) != 1 || m[0].Token != 8 || m[0].LastWrite != 7 {
		t.Fatalf("marks %+v %v", m, err)
	}
}

// A pitfall of FENCING.md: two fence tables over one data table keep two
// marks, and each lets in a token the other has superseded.
func TestPitfallTwoFenceTables(t *testing.T) {
	db, a := setup(t, filepath.Join(t.TempDir(), "two.db"))
	b, _ := New(db, "other_fence")
	if err := b.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.AdmitTx(ctx, "acct", 70, write("acct", 70, "seventy")); err != nil {
		t.Fatal(err)
	}
	if err := b.AdmitTx(ctx, "acct", 60, write("acct", 60, "sixty")); err != nil {
		t.Fatalf("the other table's check: %v", err)
	}
	if got := notes(t, db); got != "seventy,sixty" {
		t.Fatalf("ledger %q", got)
	}
}
