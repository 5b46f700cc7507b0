package fence

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRWGuardRules walks the rule through the cases a read/write lock
// produces: readers share, a writer after them supersedes them, a stale
// writer after a reader and a stale reader after a writer are refused.
func TestRWGuardRules(t *testing.T) {
	g := NewRWGuard()
	steps := []struct {
		name       string
		write      bool
		token      uint64
		wantErr    error
		last, high uint64
	}{
		{"missing token on a read", false, 0, ErrMissingToken, 0, 0},
		{"missing token on a write", true, 0, ErrMissingToken, 0, 0},
		{"writer 3 writes", true, 3, nil, 3, 3},
		{"writer 3 writes again", true, 3, nil, 3, 3},
		{"writer 3 reads its own write", false, 3, nil, 3, 3},
		{"reader 5 reads", false, 5, nil, 3, 5},
		{"reader 4, granted with 5, reads after it", false, 4, nil, 3, 5},
		{"a stale writer (3) after reader 5 is refused", true, 3, ErrStaleToken, 3, 5},
		{"a stale reader (2) from before writer 3 is refused", false, 2, ErrStaleToken, 3, 5},
		{"writer 7 after the readers", true, 7, nil, 7, 7},
		{"a stale reader (5) after writer 7 is refused", false, 5, ErrStaleToken, 7, 7},
		{"a stale writer (6) after writer 7 is refused", true, 6, ErrStaleToken, 7, 7},
		{"reader 8 after writer 7", false, 8, nil, 7, 8},
	}
	for _, s := range steps {
		ran := false
		effect := func(context.Context) error { ran = true; return nil }
		var err error
		if s.write {
			err = g.AdmitWrite(ctx, "doc", s.token, effect)
		} else {
			err = g.AdmitRead(ctx, "doc", s.token, effect)
		}
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
		if ran != (s.wantErr == nil) {
			t.Fatalf("%s: effect ran=%v", s.name, ran)
		}
		if last, high := g.Marks("doc"); last != s.last || high != s.high {
			t.Fatalf("%s: marks %d %d, want %d %d", s.name, last, high, s.last, s.high)
		}
	}
	var se *StaleTokenError
	if err := g.AdmitRead(ctx, "doc", 6, nil); !errors.As(err, &se) || se.Highest != 7 || se.Token != 6 {
		t.Fatalf("a stale read names the write that made it stale: %v", err)
	}
	if err := g.Admit(ctx, "doc", 7, nil); !errors.As(err, &se) || se.Highest != 8 {
		t.Fatalf("Admit is a write: %v", err)
	}
}

func TestRWGuardRestoreNeverLowers(t *testing.T) {
	g := NewRWGuard()
	g.Restore("r", 5, 9)
	g.Restore("r", 2, 3)
	if last, high := g.Marks("r"); last != 5 || high != 9 {
		t.Fatalf("marks %d %d", last, high)
	}
	if err := g.AdmitWrite(ctx, "r", 8, nil); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("a write below the restored high mark: %v", err)
	}
	if err := g.AdmitRead(ctx, "r", 5, nil); err != nil {
		t.Fatalf("a read at the restored write mark: %v", err)
	}
}

// TestRWGuardHolds: reads run together; a write runs alone; a waiting
// write holds back a read that arrives after it. Nothing is decided by
// time: a read that must not start is tried with a context already done.
func TestRWGuardHolds(t *testing.T) {
	g := NewRWGuard()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	// Two reads inside each other: the second runs while the first holds.
	inner := false
	err := g.AdmitRead(ctx, "x", 1, func(context.Context) error {
		return g.AdmitRead(cancelled, "x", 1, func(context.Context) error { inner = true; return nil })
	})
	if err != nil || !inner {
		t.Fatalf("reads must share: %v %v", err, inner)
	}

	// A read while a write holds does not start.
	err = g.AdmitWrite(ctx, "x", 2, func(context.Context) error {
		if err := g.AdmitRead(cancelled, "x", 2, func(context.Context) error { return errors.New("ran") }); !errors.Is(err, context.Canceled) {
			t.Errorf("a read during a write: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A writer waits for a reader; a reader arriving meanwhile does not
	// overtake it; once the first reader leaves, the writer runs.
	release := make(chan struct{})
	holding := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		readDone <- g.AdmitRead(ctx, "x", 3, func(context.Context) error { close(holding); <-release; return nil })
	}()
	<-holding
	wrote := make(chan error, 1)
	go func() { wrote <- g.AdmitWrite(ctx, "x", 4, nil) }()
	r := g.get("x")
	for {
		r.mu.Lock()
		n := r.waiting
		ch := r.changed
		r.mu.Unlock()
		if n == 1 {
			break
		}
		<-ch // the writer's registration closes it
	}
	if err := g.AdmitRead(cancelled, "x", 3, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read behind a waiting write: %v", err)
	}
	close(release)
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if last, _ := g.Marks("x"); last != 4 {
		t.Fatalf("last write %d", last)
	}
}

// TestPermitSlotsFenceLikeLocks: permits on different slots do not stale
// each other; a later holder of the same slot stales the earlier one.
func TestPermitSlotsFenceLikeLocks(t *testing.T) {
	g := NewGuard()
	if err := g.Do(ctx, PermitResource("pool", 1), 5, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, PermitResource("pool", 2), 4, nil); err != nil {
		t.Fatalf("slot 2 under an older token than slot 1's: %v", err)
	}
	if err := g.Do(ctx, PermitResource("pool", 1), 9, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, PermitResource("pool", 1), 5, nil); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("slot 1's old holder after its new one: %v", err)
	}
}

func TestRWMiddleware(t *testing.T) {
	g := NewRWGuard()
	h := RWMiddleware(g, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	do := func(method string, token string) int {
		req := httptest.NewRequest(method, "/doc", nil)
		if token != "" {
			req.Header.Set(Header, token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, s := range []struct {
		method, token string
		want          int
	}{
		{"POST", "5", 204}, // writer 5
		{"GET", "4", 409},  // a reader from before writer 5
		{"GET", "6", 204},  // reader 6
		{"GET", "", 409},   // no token
		{"POST", "5", 409}, // stale writer 5 after reader 6
		{"PUT", "7", 204},  // writer 7
		{"HEAD", "6", 409}, // stale reader 6 after writer 7
	} {
		if got := do(s.method, s.token); got != s.want {
			t.Fatalf("%s with token %q: %d, want %d", s.method, s.token, got, s.want)
		}
	}
}
