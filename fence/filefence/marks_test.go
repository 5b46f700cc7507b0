package filefence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"
)

// A marks file of version 1 (before the log) is read, and rewritten as
// version 2 by the first Open.
func TestVersion1FileIsRead(t *testing.T) {
	dir := t.TempDir()
	v1 := "fencelock filefence v1\n7 \"/v/demo\"\n3 \"b\"\ncrc32c de5444e9\n"
	// Its checksum, as filefence v1 wrote it, over the body above.
	body := v1[:strings.LastIndex(strings.TrimSuffix(v1, "\n"), "\n")+1]
	v1 = body + fmt.Sprintf("crc32c %08x\n", crc(body))
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	f := open(t, dir)
	if f.Highest("/v/demo") != 7 || f.Highest("b") != 3 {
		t.Fatalf("marks %v", f.Marks())
	}
	if err := f.Admit(ctx, "/v/demo", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("token 6 after a version-1 mark of 7: %v", err)
	}
	f.Close()
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	if !strings.HasPrefix(string(data), "fencelock filefence v2 gen 1\n") {
		t.Fatalf("not rewritten:\n%s", data)
	}
	g := open(t, dir)
	if g.Highest("/v/demo") != 7 {
		t.Fatalf("after the rewrite: %v", g.Marks())
	}
}

func crc(s string) uint32 {
	return crc32Checksum([]byte(s))
}

// Compaction folds the log into the snapshot; reopening at any point
// gives the same marks, and a log left from before a compaction (a crash
// between the snapshot's rename and the new log's) is not read again.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir, withCompactMin(8))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	for i := 1; i <= 50; i++ {
		name := fmt.Sprintf("r%d", i%20)
		if err := f.Admit(ctx, name, uint64(i), nil); err != nil {
			t.Fatal(err)
		}
		want[name] = uint64(i)
	}
	if f.store.gen < 3 {
		t.Fatalf("generation %d after 50 records: no compaction", f.store.gen)
	}
	oldLog, _ := os.ReadFile(filepath.Join(dir, LogName))
	f.Close()
	check := func(what string) {
		t.Helper()
		g := open(t, dir)
		for name, tok := range want {
			if h := g.Highest(name); h != tok {
				t.Fatalf("%s: %s at %d, want %d", what, name, h, tok)
			}
		}
		if n := len(g.Marks()); n != len(want) {
			t.Fatalf("%s: %d marks, want %d", what, n, len(want))
		}
		g.Close()
	}
	check("reopened")
	// A compaction, then the old log put back as if the new one's rename
	// had not happened: its generation is older, so it is skipped.
	g := open(t, dir)
	if err := g.Admit(ctx, "r1", 100, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.store.compact(); err != nil {
		t.Fatal(err)
	}
	want["r1"] = 100
	g.Close()
	if err := os.WriteFile(filepath.Join(dir, LogName), oldLog, 0o644); err != nil {
		t.Fatal(err)
	}
	check("with a log from before the last compaction")
}

// Marks lists resources with their tokens, keys and times; Reset lowers
// one mark, keeps its binding, and survives a restart; Reset to 0 forgets
// the resource.
func TestMarksAndReset(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	v := &fence.Verification{Verifier: allow{}, BindOnFirstUse: true}
	f, err := Open(dir, WithClock(clk), WithVerification(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(fence.WithKey(ctx, "ledger/a"), "a", 10, nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if err := f.Admit(fence.WithKey(ctx, "ledger/b"), "b", 1<<64-1, nil); err != nil {
		t.Fatal(err)
	}
	got := f.Marks()
	if len(got) != 2 || got[0] != (Mark{"a", 10, 10, "ledger/a", clk.Now().Add(-time.Minute)}) ||
		got[1].Highest != 1<<64-1 || got[1].Key != "ledger/b" || !got[1].Raised.Equal(clk.Now()) {
		t.Fatalf("marks %+v", got)
	}
	listed, err := ReadMarks(dir) // while f has the directory
	if err != nil || len(listed) != 2 || listed[1].Highest != 1<<64-1 || listed[0].Key != "ledger/a" || !listed[0].Raised.Equal(got[0].Raised) {
		t.Fatalf("ReadMarks %+v %v", listed, err)
	}
	clk.Advance(time.Minute)
	before, err := f.Reset(ctx, "b", 12)
	if err != nil || before.Highest != 1<<64-1 {
		t.Fatalf("reset: %+v %v", before, err)
	}
	if err := f.Admit(fence.WithKey(ctx, "ledger/b"), "b", 13, nil); err != nil {
		t.Fatalf("a real token after the reset: %v", err)
	}
	if _, err := f.Reset(ctx, "a", 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g := open(t, dir)
	got = g.Marks()
	if len(got) != 1 || got[0].Resource != "b" || got[0].Highest != 13 || got[0].Key != "ledger/b" {
		t.Fatalf("after restart %+v", got)
	}
	if err := g.Admit(ctx, "a", 3, nil); err != nil {
		t.Fatalf("a forgotten resource takes any token: %v", err)
	}
}

type allow struct{}

func (allow) Verify(ctxArg context.Context, key string, token uint64) error { return nil }
