package mysqlfence_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/mysqlfence"
)

// Finding 5 of issue 43 in MySQL/MariaDB: a mark was mended with a plain
// UPDATE that nothing recorded. Reset lowers it (only, unless Raise),
// keeps its binding, and records who, why and what in fence_resets in the
// same transaction; a verifying fence's holder writes again.
func TestResetLowersOnlyAndIsRecorded(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	v := &fence.Verification{Verifier: verifierFunc(func(context.Context, string, uint64) error { return nil }), Key: func(string) string { return "ledger/alice" }}
	f := mysqlfence.New(db, mysqlfence.WithVerification(v))
	if err := f.Admit(ctx, "ledger/alice", math.MaxInt64, nil); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UTC().Add(-time.Minute)
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 8, User: "u", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 9, User: "u", Reason: "r"}); !errors.Is(err, fence.ErrResetRaises) {
		t.Fatalf("raise: %v", err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "nope", To: 1, User: "u", Reason: "r"}); !errors.Is(err, fence.ErrNoMark) {
		t.Fatalf("no mark: %v", err)
	}
	m, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 7, User: "ops", Reason: "a token typed while testing ✓"})
	if err != nil || m.Token != 8 || m.LastWrite != 8 || m.Key != "ledger/alice" || m.Raised.Before(before) {
		t.Fatalf("reset: %+v %v", m, err)
	}
	if err := f.Admit(ctx, "ledger/alice", 7, nil); err != nil {
		t.Fatalf("the live holder after the reset: %v", err)
	}
	if err := f.Admit(ctx, "ledger/alice", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("below the reset mark: %v", err)
	}
	if m, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 100, Raise: true, User: "ops", Reason: "retire"}); err != nil || m.Token != 7 {
		t.Fatalf("raise with Raise: %+v %v", m, err)
	}
	if err := f.Admit(ctx, "ledger/alice", 99, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("below the raised mark: %v", err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 0, User: "ops", Reason: "forget it"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := stored(t, db, "ledger/alice"); ok {
		t.Fatal("the forgotten mark is still there")
	}

	rows, err := db.Query("SELECT os_user, reason, resource, token_before, write_token_before, token_after, write_token_after, COALESCE(lock_key, ''), at >= ? FROM fence_resets ORDER BY id", before)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type rec struct {
		user, reason, resource   string
		tokB, lastB, tokA, lastA int64
		key                      string
		recent                   bool
	}
	var got []rec
	for rows.Next() {
		var r rec
		if err := rows.Scan(&r.user, &r.reason, &r.resource, &r.tokB, &r.lastB, &r.tokA, &r.lastA, &r.key, &r.recent); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []rec{
		{"u", "r", "ledger/alice", math.MaxInt64, math.MaxInt64, 8, 8, "ledger/alice", true},
		{"ops", "a token typed while testing ✓", "ledger/alice", 8, 8, 7, 7, "ledger/alice", true},
		{"ops", "retire", "ledger/alice", 7, 7, 100, 7, "ledger/alice", true},
		{"ops", "forget it", "ledger/alice", 100, 7, 0, 0, "ledger/alice", true},
	}
	if len(got) != len(want) {
		t.Fatalf("recorded %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d: %+v, want %+v", i+1, got[i], want[i])
		}
	}
}

// A fence table made before resets were recorded gains its resets table
// from CreateTable; without it, Reset changes nothing and says what to run.
func TestResetNeedsItsTable(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	mustExec(t, db, "DROP TABLE fence_resets")
	f := mysqlfence.New(db)
	if err := f.Admit(ctx, "r", 5, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "r", To: 1, User: "u", Reason: "r"}); err == nil {
		t.Fatal("reset without its table")
	}
	if m, _ := stored(t, db, "r"); m != 5 {
		t.Fatalf("mark %d after a reset that could not be recorded", m)
	}
	if err := mysqlfence.CreateTable(ctx, db, mysqlfence.DefaultTable); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "r", To: 1, User: "u", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
}
