package fencetest_test

import (
	"context"
	"errors"
	"math"
	"os/exec"
	"os/user"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/pgfence"
)

// Finding 5 of issue 43 in PostgreSQL: a mark was mended with a plain
// UPDATE that nothing recorded. 'fencelock fence reset --sql postgres://'
// lowers it (only), and records who, why and what in fence_resets in the
// same transaction; the live holder writes again.
func TestFenceResetPostgresProcess(t *testing.T) {
	bin := fencelockBinary(t)
	pool := newPool(t)
	ctx := context.Background()
	f := pgfence.New(pool)
	if err := f.Admit(ctx, "ledger/alice", math.MaxInt64, nil); err != nil {
		t.Fatal(err)
	}
	dsn := pool.Config().ConnString()
	if !strings.HasPrefix(dsn, "postgres") {
		t.Skipf("the test server's DSN %q is not a URL", dsn)
	}
	run := func(args ...string) (string, int) {
		out, err := exec.Command(bin, append([]string{"fence", "reset", "--sql", dsn, "--resource", "ledger/alice"}, args...)...).CombinedOutput()
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			return string(out), xe.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := run("--to", "7", "--reason", "a token typed while testing"); code != 0 ||
		out != `reset "ledger/alice": mark 9223372036854775807 -> 7, last write 9223372036854775807 -> 7 (recorded in fence_resets)`+"\n" {
		t.Fatalf("reset: exit %d %q", code, out)
	}
	if out, code := run("--to", "9", "--reason", "x"); code != 1 || !strings.Contains(out, "--raise") {
		t.Fatalf("a raise without --raise: exit %d %q", code, out)
	}
	if err := f.Admit(ctx, "ledger/alice", 7, nil); err != nil {
		t.Fatalf("the live holder after the reset: %v", err)
	}
	var who, why string
	var before, after int64
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) OVER (), os_user, reason, token_before, token_after FROM fence_resets").Scan(&n, &who, &why, &before, &after); err != nil {
		t.Fatal(err)
	}
	me, _ := user.Current()
	if n != 1 || (me != nil && who != me.Username) || why != "a token typed while testing" || before != math.MaxInt64 || after != 7 {
		t.Fatalf("recorded %d: %q %q %d -> %d", n, who, why, before, after)
	}
	// The library call is the same, and so are its refusals.
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 8, User: "u", Reason: "r"}); !errors.Is(err, fence.ErrResetRaises) {
		t.Fatalf("raise: %v", err)
	}
	if _, err := f.Reset(ctx, fence.ResetRequest{Resource: "nope", To: 1, User: "u", Reason: "r"}); !errors.Is(err, fence.ErrNoMark) {
		t.Fatalf("no mark: %v", err)
	}
	if m, err := f.Reset(ctx, fence.ResetRequest{Resource: "ledger/alice", To: 0, User: "u", Reason: "forget it"}); err != nil || m.Token != 7 {
		t.Fatalf("forget: %+v %v", m, err)
	}
}
