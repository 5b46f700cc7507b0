package filefence

import (
	"context"
	"errors"
	"github.com/fencelock/fencelock/fence/fencetest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fence"
)

var ctx = context.Background()

func open(t *testing.T, dir string) *Fence {
	t.Helper()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFileFenceRules(t *testing.T) {
	f := open(t, t.TempDir())
	for _, s := range []struct {
		name    string
		token   uint64
		wantErr error
		highest uint64
	}{
		{"missing token is refused", 0, fence.ErrMissingToken, 0},
		{"new resource: first token is accepted", 5, nil, 5},
		{"equal token is accepted", 5, nil, 5},
		{"lower token is refused", 4, fence.ErrStaleToken, 5},
		{"higher token is accepted and raises the mark", 9, nil, 9},
		{"the old token is now stale", 5, fence.ErrStaleToken, 9},
	} {
		ran := false
		err := f.Admit(ctx, "db", s.token, func(context.Context) error { ran = true; return nil })
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
		if ran != (s.wantErr == nil) {
			t.Fatalf("%s: effect ran=%v", s.name, ran)
		}
		if got := f.Highest("db"); got != s.highest {
			t.Fatalf("%s: highest %d, want %d", s.name, got, s.highest)
		}
	}
	var se *fence.StaleTokenError
	if err := f.Admit(ctx, "db", 3, nil); !errors.As(err, &se) || se.Token != 3 || se.Highest != 9 {
		t.Fatalf("err %v: want a StaleTokenError naming 3 and 9", err)
	}
}

func TestEffectErrorKeepsTheMark(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	boom := errors.New("boom")
	if err := f.Admit(ctx, "r", 7, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the effect's", err)
	}
	f.Close()
	g := open(t, dir)
	if err := g.Admit(ctx, "r", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("after restart, token 6 err %v, want stale (7 was admitted)", err)
	}
}

func TestRestartKeepsTheMarks(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	for name, tok := range map[string]uint64{"a": 10, "b": 3, "with \"quotes\"\nand newline": 42} {
		if err := f.Admit(ctx, name, tok, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := open(t, dir)
	if err := g.Admit(ctx, "a", 9, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("restarted fence admitted stale token 9 for a: %v", err)
	}
	if h := g.Highest("with \"quotes\"\nand newline"); h != 42 {
		t.Fatalf("odd resource name: highest %d, want 42", h)
	}
	if err := g.Admit(ctx, "b", 3, nil); err != nil {
		t.Fatalf("equal token after restart: %v", err)
	}
}

func TestDamagedFileIsAnErrorNotAnEmptyFence(t *testing.T) {
	dir := t.TempDir()
	// Compact at every record, so that every mark is in the snapshot.
	f, err := Open(dir, withCompactMin(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []uint64{5, 8} {
		if err := f.Admit(ctx, "a", tok, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Admit(ctx, "b", 2, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	path := filepath.Join(dir, FileName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(good), "8 8 ") {
		t.Fatalf("the snapshot does not hold a's mark:\n%s", good)
	}
	for name, bad := range map[string][]byte{
		"torn write (cut mid-file)": good[:len(good)/2],
		"torn write (last byte)":    good[:len(good)-1],
		"empty file":                {},
		"flipped digit":             []byte(strings.Replace(string(good), "8 8 ", "1 1 ", 1)),
		"garbage":                   []byte("\x00\x00\x00\n"),
	} {
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := Open(dir)
		if err == nil {
			g.Close()
			t.Fatalf("%s: Open succeeded on a damaged file", name)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("%s: err %v, want ErrCorrupt naming %s", name, err, path)
		}
	}
	// A crash before the rename leaves a torn temporary file and the old
	// file intact: Open ignores the former and keeps the latter.
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName+".tmp-123"), good[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	g := open(t, dir)
	if h := g.Highest("a"); h != 8 {
		t.Fatalf("highest %d, want 8", h)
	}
}

// The log: a record that fails its checksum is corruption; a last line
// without its newline is an append cut short by a crash, dropped and cut
// off so that the next record starts a line.
func TestDamagedLog(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	for _, tok := range []uint64{5, 8} {
		if err := f.Admit(ctx, "a", tok, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Admit(ctx, "b", 2, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	path := filepath.Join(dir, LogName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(good), "\n"); n != 4 {
		t.Fatalf("log of %d lines, want a header and 3 records:\n%s", n, good)
	}
	for name, bad := range map[string][]byte{
		"flipped digit":   []byte(strings.Replace(string(good), " 8 8 ", " 1 1 ", 1)),
		"garbage line":    append(append([]byte{}, good...), "\x00\x00\x00\n"...),
		"no header":       {},
		"header cut":      good[:10],
		"a record's tail": []byte(strings.Replace(string(good), "\n", "\nXX", 2)),
	} {
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := Open(dir)
		if err == nil {
			g.Close()
			t.Fatalf("%s: Open succeeded on a damaged log", name)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("%s: err %v, want ErrCorrupt naming %s", name, err, path)
		}
	}
	for _, cut := range []int{1, 10} {
		if err := os.WriteFile(path, good[:len(good)-cut], 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := Open(dir)
		if err != nil {
			t.Fatalf("torn last record (%d bytes cut): %v", cut, err)
		}
		if a, b := g.Highest("a"), g.Highest("b"); a != 8 || b != 0 {
			t.Fatalf("torn last record: a %d b %d, want 8 and b's unfinished record dropped", a, b)
		}
		if err := g.Admit(ctx, "b", 3, nil); err != nil {
			t.Fatal(err)
		}
		g.Close()
		g = open(t, dir)
		if b := g.Highest("b"); b != 3 {
			t.Fatalf("the record after a torn one: b %d, want 3", b)
		}
		g.Close()
	}
}

func TestOneProcessPerDirectory(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	if g, err := Open(dir); err == nil {
		g.Close()
		t.Fatal("a second Open on a locked directory succeeded")
	}
}

func TestUnwritableLogRefusesBeforeTheEffect(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	f.store.log.Close() // every write to it fails now
	ran := false
	err := f.Admit(ctx, "a", 4, func(context.Context) error { ran = true; return nil })
	if err == nil || ran || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("err %v ran %v: want an I/O error and no effect", err, ran)
	}
	if h := f.Highest("a"); h != 0 {
		t.Fatalf("highest %d after a failed write, want 0", h)
	}
	if err := f.Admit(ctx, "a", 4, nil); err == nil {
		t.Fatal("an admit after a failed write that could not be undone succeeded")
	}
}

// Many goroutines race tokens at one resource: the effects that ran saw
// non-decreasing tokens, and the mark on disk is the highest admitted.
func TestConcurrentAdmitsAreOrdered(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	var mu sync.Mutex
	var order []uint64
	var wg sync.WaitGroup
	for i := 1; i <= 40; i++ {
		wg.Add(1)
		go func(tok uint64) {
			defer wg.Done()
			_ = f.Admit(ctx, "x", tok, func(context.Context) error {
				mu.Lock()
				order = append(order, tok)
				mu.Unlock()
				return nil
			})
		}(uint64(i%13 + 1))
	}
	wg.Wait()
	max := uint64(0)
	for i, tok := range order {
		if i > 0 && tok < order[i-1] {
			t.Fatalf("effects ran out of order: %v", order)
		}
		max = tok
	}
	f.Close()
	g := open(t, dir)
	if h := g.Highest("x"); h != max {
		t.Fatalf("restarted highest %d, want %d", h, max)
	}
}

func TestAdmitAfterCloseFails(t *testing.T) {
	f := open(t, t.TempDir())
	if err := f.Admit(ctx, "a", 3, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ran := false
	if err := f.Admit(ctx, "a", 3, func(context.Context) error { ran = true; return nil }); err == nil || ran {
		t.Fatalf("Admit after Close: err %v ran %v", err, ran)
	}
}

// Finding 7 of issue 25: only the in-memory RWGuard knew the read/write
// rule. The file fence keeps it, across a restart after every step.
func TestReadWriteRule(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	fencetest.CheckRW(t, f, func() fence.RWFence {
		f.Close()
		f = open(t, dir)
		return f
	})
	if m := f.Marks(); len(m) != 1 || m[0].Highest != 8 || m[0].LastWrite != 7 {
		t.Fatalf("marks %+v", m)
	}
}
