package locktable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// A dead session ends whole when any call touches one of its locks, before
// a Tick: every lock goes, each key is handed to its head waiter.
func TestSessionEndsWholeOnFirstTouch(t *testing.T) {
	tb := New()
	s, err := tb.OpenSession("svc", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := tb.AcquireWith(k, "svc", 0, 0, Options{Session: s.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, granted, err := tb.Wait("b", "w", 1, 5, NoDeadline); err != nil || granted {
		t.Fatalf("wait: %v %v", granted, err)
	}
	if _, err := tb.ExtendSession(s.ID, "svc", 5); err != nil { // now alive until 15
		t.Fatal(err)
	}
	if !tb.Check("a", 1, 14) || tb.Check("a", 1, 15) {
		t.Fatal("a session lock is alive exactly while its session is")
	}
	l, err := tb.Acquire("a", "other", 15, 5)
	if err != nil || l.Token != 5 {
		t.Fatalf("acquire after the session's end: %+v %v", l, err)
	}
	if tb.IsValidToken("c", 3) || tb.SessionCount() != 0 {
		t.Fatal("the session's other locks outlived it")
	}
	if g, ok := tb.Get("b", 15); !ok || g.Holder != "w" || g.Token != 4 {
		t.Fatalf("b was not handed to its waiter: %+v %v", g, ok)
	}
	if _, err := tb.ExtendSession(s.ID, "svc", 15); !errors.Is(err, ErrNoSession) {
		t.Fatalf("extend of an ended session: %v", err)
	}
}

func TestSessionRefusals(t *testing.T) {
	tb := New()
	s, _ := tb.OpenSession("svc", 0, 10)
	if _, err := tb.AcquireWith("k", "intruder", 0, 0, Options{Session: s.ID}); !errors.Is(err, ErrNoSession) {
		t.Fatalf("another holder's session: %v", err)
	}
	if _, err := tb.ExtendSession(s.ID, "intruder", 1); !errors.Is(err, ErrNoSession) {
		t.Fatalf("another holder extends: %v", err)
	}
	if _, err := tb.CloseSession(s.ID, "intruder", 1); !errors.Is(err, ErrNoSession) {
		t.Fatalf("another holder closes: %v", err)
	}
	l, _ := tb.AcquireWith("k", "svc", 0, 0, Options{Session: s.ID})
	if _, err := tb.Extend("k", "svc", l.Token, 1, 5); !errors.Is(err, ErrSessionLock) {
		t.Fatalf("extend of a session lock: %v", err)
	}
	if _, err := tb.AcquireAll([]string{"x", "x"}, "svc", 0, 5, Options{}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("duplicate keys: %v", err)
	}
	if _, err := tb.AcquireWith("y", "svc", 0, 5, Options{LockDelay: MaxLockDelay + 1}); err == nil {
		t.Fatal("a lock-delay over the limit was accepted")
	}
	for i := 1; i < MaxSessionsPerHolder; i++ {
		if _, err := tb.OpenSession("svc", 0, 10); err != nil {
			t.Fatal(err)
		}
	}
	var lim *SessionLimitError
	if _, err := tb.OpenSession("svc", 0, 10); !errors.As(err, &lim) || lim.Scope != "holder" {
		t.Fatalf("over the per-holder limit: %v", err)
	}
}

// Multi-key acquire is all or nothing: one held key refuses the lot and
// grants nothing.
func TestAcquireAllOrNothing(t *testing.T) {
	tb := New()
	if _, err := tb.Acquire("b", "other", 0, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AcquireAll([]string{"a", "b", "c"}, "me", 1, 10, Options{}); !errors.Is(err, ErrHeld) {
		t.Fatalf("want held, got %v", err)
	}
	if tb.Len() != 1 || tb.LastToken() != 1 {
		t.Fatalf("a refused multi-acquire changed the table: %d keys, last %d", tb.Len(), tb.LastToken())
	}
	ls, err := tb.AcquireAll([]string{"c", "a"}, "me", 1, 10, Options{})
	if err != nil || ls[0].Token != 2 || ls[1].Token != 3 || ls[0].Key != "c" {
		t.Fatalf("%+v %v", ls, err)
	}
}

// Lock-delay: after an expiry (not a release) nobody, waiters included,
// gets the key until the lease's end plus the delay.
func TestLockDelay(t *testing.T) {
	tb := New()
	if _, err := tb.AcquireWith("k", "a", 0, 10, Options{LockDelay: 5}); err != nil {
		t.Fatal(err)
	}
	if _, granted, _ := tb.Wait("k", "w", 1, 10, NoDeadline); granted {
		t.Fatal("granted a held key")
	}
	tb.Tick(12) // expired at 10: delay until 15
	var de *LockDelayError
	if _, err := tb.Acquire("k", "b", 12, 10); !errors.As(err, &de) || de.Until != 15 {
		t.Fatalf("acquire in the delay: %v", err)
	}
	if _, err := tb.Acquire("k", "a", 14, 10); !errors.Is(err, ErrLockDelay) {
		t.Fatalf("the old holder in the delay: %v", err)
	}
	if at, ok := tb.NextDeadline(); !ok || at != 15 {
		t.Fatalf("next deadline %d %v, want 15", at, ok)
	}
	tb.Tick(15)
	if l, ok := tb.Get("k", 15); !ok || l.Holder != "w" {
		t.Fatalf("the waiter was not granted at the delay's end: %+v %v", l, ok)
	}
	// A release starts no delay.
	if _, err := tb.ReleaseToken("k", "w", 2, 16); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AcquireWith("j", "a", 16, 10, Options{LockDelay: 5}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := tb.Release("j", "a", 17); !ok {
		t.Fatal("release")
	}
	if _, err := tb.Acquire("j", "b", 17, 10); err != nil {
		t.Fatalf("a released key was delayed: %v", err)
	}
}

// A table that never had a session or a lock-delay encodes as version 2,
// byte for byte as before; one that had a session keeps its id counter
// through a restore even with no session open.
func TestSessionSnapshotSections(t *testing.T) {
	plain := New()
	plain.Acquire("a", "h", 0, 10)
	plain.Wait("a", "w", 0, 10, NoDeadline)
	b, _ := plain.MarshalBinary()
	if string(b[:4]) != snapshot.MagicV2 {
		t.Fatalf("magic %q", b[:4])
	}
	tb := New()
	s, _ := tb.OpenSession("svc", 0, 10)
	tb.CloseSession(s.ID, "svc", 1)
	b, _ = tb.MarshalBinary()
	back := New()
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if s2, _ := back.OpenSession("svc", 2, 10); s2.ID != 2 {
		t.Fatalf("session id %d after restore, want 2", s2.ID)
	}
	// With locks, queue places and delays under sessions: exact round trip.
	tb = New()
	s, _ = tb.OpenSession("svc", 0, 10)
	tb.AcquireAll([]string{"x", "y"}, "svc", 0, 0, Options{Session: s.ID, LockDelay: 3})
	tb.Acquire("z", "other", 0, 5)
	tb.WaitWith("z", "svc", 1, 0, NoDeadline, WaitLimits{}, Options{Session: s.ID, LockDelay: 2})
	b, _ = tb.MarshalBinary()
	back = New()
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if b2, _ := back.MarshalBinary(); !bytes.Equal(b, b2) {
		t.Fatal("not stable across a restore")
	}
	back.Tick(5) // z passes to svc under the session
	if got := back.SessionKeys(s.ID); len(got) != 3 {
		t.Fatalf("session keys after hand-off: %v", got)
	}
	back.Tick(10)
	if _, ok := back.LockDelay("z", 11); !ok || back.Len() != 0 {
		t.Fatalf("session expiry: len %d", back.Len())
	}
}

// sessionFuzzTable is a table with sessions, session locks and waiters, and
// lock-delays, for fuzz seeds.
func sessionFuzzTable(seed uint64) *Table {
	tb := New()
	s, _ := tb.OpenSession("svc", 0, 10)
	s2, _ := tb.OpenSession("w", 0, 20)
	tb.AcquireAll([]string{"a", "b", "c"}, "svc", 1, 0, Options{Session: s.ID, LockDelay: Duration(seed + 1)})
	tb.AcquireWith("d", "x", 1, 5, Options{LockDelay: 3})
	tb.WaitWith("a", "w", 2, 0, NoDeadline, WaitLimits{}, Options{Session: s2.ID})
	tb.WaitWith("d", "y", 2, 4, 30, WaitLimits{}, Options{LockDelay: 2})
	tb.Tick(Time(6 + seed))
	return tb
}

// FuzzUnmarshalSessions is FuzzUnmarshal from seeds with session and
// lock-delay sections.
func FuzzUnmarshalSessions(f *testing.F) {
	for seed := uint64(0); seed < 4; seed++ {
		b, _ := sessionFuzzTable(seed).MarshalBinary()
		f.Add(b, false)
		f.Add(b[:len(b)-4], true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC {
			data = binary.LittleEndian.AppendUint32(bytes.Clone(data), crc32.ChecksumIEEE(data))
		}
		tb := New()
		if err := tb.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		once, _ := tb.MarshalBinary()
		again := New()
		if err := again.UnmarshalBinary(once); err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if twice, _ := again.MarshalBinary(); !bytes.Equal(once, twice) {
			t.Fatal("encoding is not canonical after one round")
		}
		tb.Tick(tb.MaxNow())
		_, _ = tb.Acquire("a", "h", tb.MaxNow(), Second)
		tb.Tick(maxTime - 1)
	})
}

// TestLeaseNamesItsSession: a lock held under a session says which one in
// Get, List and Holders, so get and list can show it; others say 0.
func TestLeaseNamesItsSession(t *testing.T) {
	tb := New()
	ss, err := tb.OpenSession("a", 0, 10*Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AcquireWith("in", "a", 1, Second, Options{Session: ss.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Acquire("out", "a", 1, Second); err != nil {
		t.Fatal(err)
	}
	if l, _ := tb.Get("in", 2); l.Session != ss.ID || ss.ID == 0 {
		t.Fatalf("get of a session's lock: session %d, want %d", l.Session, ss.ID)
	}
	if hs := tb.Holders("in", 2); len(hs) != 1 || hs[0].Session != ss.ID {
		t.Fatalf("holders: %+v", hs)
	}
	ls := tb.List("", 2, 0)
	if len(ls) != 2 || ls[0].Key != "in" || ls[0].Session != ss.ID || ls[1].Session != 0 {
		t.Fatalf("list: %+v", ls)
	}
	// A waiter under a session says so too; one on its own ttl says 0.
	sb, err := tb.OpenSession("b", 2, 10*Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.WaitWith("out", "b", 2, Second, 100, WaitLimits{}, Options{Session: sb.ID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.WaitWithin("out", "c", 2, Second, 100, WaitLimits{}); err != nil {
		t.Fatal(err)
	}
	if q, n := tb.QueueOf("out", 0); n != 2 || q[0].Session != sb.ID || q[1].Session != 0 {
		t.Fatalf("queue of out: %+v", q)
	}
}
