package testguard

import (
	"net"
	"os"
	"testing"
	"time"
)

type fakeM struct{ run func() int }

func (f *fakeM) Run() int { return f.run() }

func TestWrapFailsARunThatReachedADefault(t *testing.T) {
	for _, k := range Env {
		t.Setenv(k, os.Getenv(k)) // restored after the test
	}
	var tw *Tripwire
	m := &fakeM{run: func() int {
		c, err := net.Dial("tcp", os.Getenv("FENCELOCK_ADDR"))
		if err != nil {
			t.Errorf("dialing FENCELOCK_ADDR: %v", err)
			return 0
		}
		c.Close()
		return 0
	}}
	if code := Wrap(m, func(w *Tripwire) { tw = w }).Run(); code != 1 {
		t.Fatalf("a run that reached the tripwire exited %d, want 1", code)
	}
	if os.Getenv("FENCELOCK_LISTEN") != tw.Addr() {
		t.Errorf("FENCELOCK_LISTEN = %q, want the tripwire %s", os.Getenv("FENCELOCK_LISTEN"), tw.Addr())
	}
}

func TestWrapPassesACleanRunAndKeepsAFailure(t *testing.T) {
	for _, k := range Env {
		t.Setenv(k, os.Getenv(k))
	}
	if code := Wrap(&fakeM{run: func() int { return 0 }}, nil).Run(); code != 0 {
		t.Errorf("clean run exited %d", code)
	}
	if code := Wrap(&fakeM{run: func() int { return 3 }}, nil).Run(); code != 3 {
		t.Errorf("failing run exited %d, want its own 3", code)
	}
}

func TestTakeForgetsHits(t *testing.T) {
	tw, err := NewTripwire()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", tw.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The accept loop records the hit asynchronously: poll, bounded.
	var got []string
	for deadline := time.Now().Add(5 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		got = tw.Take()
	}
	if len(got) != 1 || got[0] != c.LocalAddr().String() {
		t.Fatalf("Take = %v, want the one hit from %s", got, c.LocalAddr())
	}
	if rest := tw.Close(); len(rest) != 0 {
		t.Errorf("Close after Take = %v, want none", rest)
	}
}
