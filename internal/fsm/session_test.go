package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

var sessionCommands = []Command{
	{Op: OpSessionOpen, Now: 1, Holder: "svc", TTL: 10 * locktable.Second},
	{Op: OpSessionExtend, Now: 2, Holder: "svc", Session: 7},
	{Op: OpSessionClose, RequestID: "r", Now: 3, Holder: "svc", Session: 1 << 40},
	{Op: OpAcquireKeys, Now: 4, Holder: "svc", TTL: 5, Items: []Item{{Key: "a"}, {Key: "b"}}},
	{Op: OpAcquireKeys, Now: 4, Holder: "svc", Session: 3, LockDelay: locktable.MaxLockDelay, Items: []Item{{Key: "a"}}},
	{Op: OpAcquire, Now: 5, Key: "k", Holder: "h", Session: 2},
	{Op: OpAcquire, Now: 5, Key: "k", Holder: "h", TTL: 9, LockDelay: locktable.Second},
	{Op: OpWait, Now: 6, Key: "k", Holder: "h", TTL: 9, Deadline: 20, Session: 2},
	{Op: OpWait, Now: 6, Key: "k", Holder: "h", TTL: 9, Deadline: 20, MaxWaiters: 5, LockDelay: 3},
}

func TestSessionCommandsRoundTrip(t *testing.T) {
	for _, c := range sessionCommands {
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Op, err)
		}
		got, err := Decode(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%s: round trip %+v %v, want %+v", c.Op, got, err, c)
		}
		// Every truncation is refused, never a panic.
		for i := 1; i < len(b); i++ {
			if _, err := Decode(b[:i]); err == nil && c.Op != OpAcquire && c.Op != OpWait {
				t.Fatalf("%s: truncated to %d decoded", c.Op, i)
			}
		}
	}
	// An acquire without options encodes exactly as before they existed.
	old, _ := Encode(Command{Op: OpAcquire, Now: 5, Key: "k", Holder: "h", TTL: 10})
	if want := []byte{1, 0, 10, 1, 'k', 1, 'h', 20}; !bytes.Equal(old, want) {
		t.Fatalf("plain acquire %v, want %v", old, want)
	}
	for _, c := range []Command{
		{Op: OpRenew, Key: "k", Holder: "h", TTL: 1, Session: 1},
		{Op: OpRelease, Key: "k", Holder: "h", LockDelay: 1},
		{Op: OpAcquire, Key: "k", Holder: "h", TTL: 1, LockDelay: locktable.MaxLockDelay + 1},
		{Op: OpAcquireKeys, Holder: "h", TTL: 1},
		{Op: OpAcquireKeys, Holder: "h", TTL: 1, Items: make([]Item, locktable.MaxMultiKeys+1)},
		{Op: OpSessionClose, Holder: "h", Session: 1, LockDelay: 1},
	} {
		if _, err := Encode(c); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("%+v encoded: %v", c, err)
		}
	}
}

// Apply drives a session end to end: open, locks under it, a waiter under
// another session, one extend, expiry by the leader's tick, and snapshot
// and restore in the middle that lose nothing.
func TestApplySessionLifecycle(t *testing.T) {
	f := New(nil)
	i := uint64(0)
	apply := func(c Command) *Result {
		i++
		return f.ApplyCommand(i, c)
	}
	sec := locktable.Second
	r := apply(Command{Op: OpSessionOpen, Now: 0, Holder: "svc", TTL: 10 * sec})
	if r.Err != nil || r.Session.ID != 1 {
		t.Fatalf("open: %+v", r)
	}
	id := r.Session.ID
	r = apply(Command{Op: OpAcquireKeys, Now: 1, Holder: "svc", Session: id, Items: []Item{{Key: "a"}, {Key: "b"}, {Key: "c"}}})
	if r.Err != nil || len(r.Leases) != 3 || r.Leases[2].Token != 3 || r.Leases[0].Expiry != locktable.Time(10*sec) {
		t.Fatalf("acquire-keys: %+v", r)
	}
	if r := apply(Command{Op: OpAcquire, Now: 1, Key: "d", Holder: "intruder", Session: id}); !errors.Is(r.Err, locktable.ErrNoSession) {
		t.Fatalf("another holder's session: %v", r.Err)
	}
	r = apply(Command{Op: OpSessionOpen, Now: 1, Holder: "w", TTL: 60 * sec})
	r = apply(Command{Op: OpWait, Now: 1, Key: "b", Holder: "w", Deadline: locktable.NoDeadline, Session: r.Session.ID})
	if r.Err != nil || !r.Queued {
		t.Fatalf("wait under a session: %+v", r)
	}
	if r := apply(Command{Op: OpSessionExtend, Now: 5 * locktable.Time(sec), Holder: "svc", Session: id}); r.Err != nil || r.Session.Expiry != 15*locktable.Time(sec) {
		t.Fatalf("extend: %+v", r)
	}
	snap, _ := f.MarshalBinary()
	g := New(nil)
	if err := g.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.MarshalBinary(); !bytes.Equal(snap, again) {
		t.Fatal("FSM snapshot not stable across restore")
	}
	for _, fs := range []*FSM{f, g} {
		i++
		fs.ApplyCommand(i, Command{Op: OpTick, Now: 15 * locktable.Time(sec)})
		if _, ok := fs.GetSession(id, 15*locktable.Time(sec)); ok || len(fs.SessionKeys(id)) != 0 {
			t.Fatal("session outlived its expiry")
		}
		l, ok := fs.Get("b", 15*locktable.Time(sec))
		if !ok || l.Holder != "w" || l.Token != 4 {
			t.Fatalf("b not handed to the waiter under its session: %+v %v", l, ok)
		}
		if _, ok := fs.Get("a", 15*locktable.Time(sec)); ok {
			t.Fatal("a outlived its session")
		}
	}
}

// FuzzDecodeSessions is FuzzDecode from the session commands.
func FuzzDecodeSessions(f *testing.F) {
	for _, c := range sessionCommands {
		b, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not match ErrBadCommand", err)
			}
			return
		}
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("decoded %+v does not re-encode: %v", c, err)
		}
		if again, err := Decode(b); err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("re-decoding %x: %+v, %v; want %+v", b, again, err, c)
		}
	})
}

// A lock-delay and a delayed waiter survive a snapshot and restore exactly;
// the restored FSM hands the key on at the delay's end, as the original.
func TestApplyLockDelaySnapshot(t *testing.T) {
	f := New(nil)
	sec := locktable.Time(locktable.Second)
	f.ApplyCommand(1, Command{Op: OpAcquire, Now: 0, Key: "k", Holder: "a", TTL: locktable.Second, LockDelay: 5 * locktable.Second})
	if r := f.ApplyCommand(2, Command{Op: OpWait, Now: 0, Key: "k", Holder: "w", TTL: locktable.Second, Deadline: locktable.NoDeadline, LockDelay: 2 * locktable.Second}); !r.Queued {
		t.Fatalf("wait: %+v", r)
	}
	f.ApplyCommand(3, Command{Op: OpTick, Now: 2 * sec})
	if r := f.ApplyCommand(4, Command{Op: OpAcquire, Now: 2 * sec, Key: "k", Holder: "b", TTL: locktable.Second}); !errors.Is(r.Err, locktable.ErrLockDelay) {
		t.Fatalf("acquire in the delay: %v", r.Err)
	}
	snap, _ := f.MarshalBinary()
	g := New(nil)
	if err := g.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.MarshalBinary(); !bytes.Equal(snap, again) {
		t.Fatal("not stable across restore")
	}
	for _, fs := range []*FSM{f, g} {
		if until, ok := fs.LockDelay("k", 2*sec); !ok || until != 6*sec {
			t.Fatalf("delay until %d %v, want 6 s", until, ok)
		}
		fs.ApplyCommand(5, Command{Op: OpTick, Now: 6 * sec})
		if l, ok := fs.Get("k", 6*sec); !ok || l.Holder != "w" {
			t.Fatalf("k at the delay's end: %+v %v", l, ok)
		}
		fs.ApplyCommand(6, Command{Op: OpTick, Now: 7 * sec}) // w's lease expires: its own 2 s delay
		if until, ok := fs.LockDelay("k", 7*sec); !ok || until != 9*sec {
			t.Fatalf("the waiter's own delay: until %d %v", until, ok)
		}
	}
}

// A session open or close re-sent under its request id (its answer was
// lost, or the client moved to a new leader) is answered with the first
// one's result and changes nothing: one session, not two; a close that
// worked is not refused as no_session. The memory survives a snapshot. A
// re-sent open whose session has since ended opens a new one, as an
// unremembered open would.
func TestSessionOpenAndCloseAreIdempotent(t *testing.T) {
	f := New(nil)
	i := uint64(0)
	apply := func(c Command) *Result {
		i++
		return f.ApplyCommand(i, c)
	}
	sec := locktable.Second
	first := apply(Command{Op: OpSessionOpen, RequestID: "o1", Now: 0, Holder: "svc", TTL: 10 * sec})
	again := apply(Command{Op: OpSessionOpen, RequestID: "o1", Now: 1, Holder: "svc", TTL: 10 * sec})
	if first.Err != nil || again.Err != nil || again.Session.ID != first.Session.ID || !again.Duplicate {
		t.Fatalf("re-sent open: %+v, then %+v; want the same session", first, again)
	}
	if other := apply(Command{Op: OpSessionOpen, RequestID: "o1", Now: 1, Holder: "other", TTL: 10 * sec}); other.Session.ID == first.Session.ID {
		t.Fatalf("another holder's open under the same id got session %d", other.Session.ID)
	}
	if n, _ := f.SessionStats(); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	if r := apply(Command{Op: OpAcquireKeys, Now: 1, Holder: "svc", Session: first.Session.ID, Items: []Item{{Key: "a"}, {Key: "b"}, {Key: "c"}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	snap, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.MarshalBinary(); !bytes.Equal(snap, again) {
		t.Fatal("snapshot not stable across restore")
	}
	for _, fs := range []*FSM{f, g} {
		j := i
		do := func(c Command) *Result { j++; return fs.ApplyCommand(j, c) }
		if r := do(Command{Op: OpSessionOpen, RequestID: "o1", Now: 2, Holder: "svc", TTL: 10 * sec}); r.Session.ID != first.Session.ID {
			t.Fatalf("re-sent open after restore: session %d, want %d", r.Session.ID, first.Session.ID)
		}
		c1 := do(Command{Op: OpSessionClose, RequestID: "c1", Now: 3, Holder: "svc", Session: first.Session.ID})
		c2 := do(Command{Op: OpSessionClose, RequestID: "c1", Now: 4, Holder: "svc", Session: first.Session.ID})
		if c1.Err != nil || c2.Err != nil || !c2.Duplicate || c1.Session.Locks != 3 || c2.Session.Locks != 3 {
			t.Fatalf("re-sent close: %+v, then %+v; want both to succeed, releasing 3", c1, c2)
		}
		// Its memory survives a snapshot too.
		snap, _ := fs.MarshalBinary()
		h := New(nil)
		if err := h.UnmarshalBinary(snap); err != nil {
			t.Fatal(err)
		}
		if c := h.ApplyCommand(j+1, Command{Op: OpSessionClose, RequestID: "c1", Now: 4, Holder: "svc", Session: first.Session.ID}); c.Err != nil || c.Session.Locks != 3 {
			t.Fatalf("re-sent close after restore: %+v", c)
		}
		if c3 := do(Command{Op: OpSessionClose, RequestID: "c2", Now: 4, Holder: "svc", Session: first.Session.ID}); !errors.Is(c3.Err, locktable.ErrNoSession) {
			t.Fatalf("a new close of a closed session: %v, want no session", c3.Err)
		}
		// The session is gone: a re-sent open of it opens a new one.
		if r := do(Command{Op: OpSessionOpen, RequestID: "o1", Now: 5, Holder: "svc", TTL: 10 * sec}); r.Err != nil || r.Duplicate || r.Session.ID == first.Session.ID {
			t.Fatalf("re-sent open of an ended session: %+v", r)
		}
	}
}
