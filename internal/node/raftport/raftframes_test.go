package raftport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// What a peer's message may hold on the raft port (issue 41): the
// engine's parser sees every byte as it is read; a declared length past
// its bounds cuts the connection before a byte of it is read, and a
// message must end within its time.

// lenFrames is a framing for these tests: a u32 length and that many
// bytes, streamed (not held) when the length's top bit is set; a length
// above 16 MiB is refused.
type lenFrames struct {
	hdr  [4]byte
	have int
	left int
	str  bool
}

func (p *lenFrames) Parse(b []byte) (took, streamed int, end bool, err error) {
	for took < len(b) {
		if p.left > 0 {
			k := min(p.left, len(b)-took)
			p.left -= k
			took += k
			if p.str {
				streamed += k
			}
			if p.left == 0 {
				return took, streamed, true, nil
			}
			continue
		}
		k := copy(p.hdr[p.have:], b[took:])
		p.have += k
		took += k
		if p.have < 4 {
			continue
		}
		p.have = 0
		h := binary.BigEndian.Uint32(p.hdr[:])
		p.left, p.str = int(h&^(1<<31)), h&(1<<31) != 0
		if p.left > 16<<20 {
			return 0, 0, false, fmt.Errorf("a frame of %d bytes", p.left)
		}
		if p.left == 0 {
			return took, streamed, true, nil
		}
	}
	return took, streamed, false, nil
}

func frame(n int, streamed bool) []byte {
	h := uint32(n)
	if streamed {
		h |= 1 << 31
	}
	return append(binary.BigEndian.AppendUint32(nil, h), make([]byte, n)...)
}

// framedStream is a raft port whose engine frames as lenFrames and
// holds maxHeld bytes of a message at most.
func framedStream(t *testing.T, lim Limits, maxHeld int64) *testStream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	frames := Frames{Accepted: func() FrameParser { return &lenFrames{} }, MaxHeld: maxHeld}
	ts := &testStream{Port: newStream(ln, nil, func(string) bool { return true }, newPortGate(lim, slog.New(&countingHandler{})), frames)}
	t.Cleanup(func() { ts.Close() })
	return ts
}

// pair dials ts and accepts: the dialer's end, and raft's.
func (ts *testStream) pair(t *testing.T) (dialer, raft net.Conn) {
	t.Helper()
	dialer = ts.dial(t)
	raft, err := ts.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raft.Close() })
	return dialer, raft
}

// readAll reads from c, as an engine would, until an error.
func readAll(c net.Conn) error {
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		err = io.EOF
	}
	return err
}

func TestRaftPortCutsMessagesPastTheirBounds(t *testing.T) {
	lim := Limits{MessageTimeout: time.Hour, MinRate: 1 << 40}

	// Declared past the framing's bound: cut at the declaration, before
	// a byte of it is read, and counted.
	ts := framedStream(t, lim, 32<<20)
	d, r := ts.pair(t)
	d.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	if err := readAll(r); !errors.Is(err, ErrMessage) {
		t.Fatalf("a frame declaring 1 GiB: the reader got %v, want ErrMessage", err)
	}
	if !closedByServer(t, d) {
		t.Fatal("the connection of a frame declaring 1 GiB was kept")
	}
	if got := ts.Stats().MessagesCut; got != 1 {
		t.Fatalf("messages cut: %d, want 1", got)
	}

	// Within the framing's bound, past what the engine holds: cut once
	// the bytes held pass it. Streamed bytes are not held.
	ts = framedStream(t, lim, 64<<10)
	d, r = ts.pair(t)
	go d.Write(append(frame(200<<10, true), frame(100<<10, false)...))
	buf := make([]byte, 1<<20)
	var got int
	var err error
	for err == nil {
		var n int
		n, err = r.Read(buf)
		got += n
	}
	if !errors.Is(err, ErrMessage) || got > 300<<10 {
		t.Fatalf("a streamed frame of 200 KiB, then a held one of 100 KiB past 64 KiB: read %d bytes, then %v", got, err)
	}
}

// A message begun and not finished is cut MessageTimeout after its first
// byte (a second more per MinRate bytes it streams), or once a read in
// it waits that long for a byte; a connection idle between messages is
// not, however long raft waits on it, and raft's own read deadline
// still applies.
func TestRaftPortCutsAHalfSentMessage(t *testing.T) {
	// Streamed bytes at 1 byte/s may take days; a wait of 50 ms for the
	// next one may not.
	ts := framedStream(t, Limits{MessageTimeout: 50 * time.Millisecond, MinRate: 1}, 1<<20)
	d, r := ts.pair(t)
	d.Write(frame(1<<20, true)[:100<<10])
	if err := readAll(r); !errors.Is(err, ErrMessage) || !isTimeout(err) {
		t.Fatalf("a streamed message stalled: %v, want a cut for its time", err)
	}

	ts = framedStream(t, Limits{MessageTimeout: 50 * time.Millisecond, MinRate: 1 << 40}, 1<<20)
	d, r = ts.pair(t)
	// A whole message, then silence: raft's deadline ends its wait, a
	// plain timeout; the connection is not cut.
	d.Write(frame(10, false))
	if _, err := io.ReadFull(r, make([]byte, 14)); err != nil {
		t.Fatal(err)
	}
	r.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.Read(make([]byte, 1)); !isTimeout(err) || errors.Is(err, ErrMessage) {
		t.Fatalf("idle between messages: %v, want raft's own timeout", err)
	}
	r.SetReadDeadline(time.Time{})
	if ts.Stats().MessagesCut != 0 {
		t.Fatal("an idle connection was cut")
	}
	// Half a message, then silence: cut.
	d.Write(frame(100, false)[:50])
	if err := readAll(r); !errors.Is(err, ErrMessage) || !isTimeout(err) {
		t.Fatalf("a half-sent message: %v, want a cut for its time", err)
	}
	if !closedByServer(t, d) {
		t.Fatal("the connection of a half-sent message was kept")
	}
	if got := ts.Stats().MessagesCut; got != 1 {
		t.Fatalf("messages cut: %d, want 1", got)
	}
}

// The port's connections share MessageBudget for what their messages
// hold past freeHeld each: two half-sent messages holding freeHeld and
// 512 KiB fit a budget of 1 MiB, a third does not; a connection closed
// gives back what its message drew.
func TestRaftPortMessageBudget(t *testing.T) {
	ts := framedStream(t, Limits{MessageTimeout: time.Hour, MinRate: 1 << 40, MessageBudget: 1 << 20}, 8<<20)
	half := frame(2<<20, false)[:freeHeld+512<<10]
	var readers []net.Conn
	for range 2 {
		d, r := ts.pair(t)
		d.Write(half)
		if _, err := io.ReadFull(r, make([]byte, len(half))); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	if got := ts.gate.held.Load(); got != 1<<20 {
		t.Fatalf("drawn from the budget: %d, want 1 MiB", got)
	}
	d, r := ts.pair(t)
	go d.Write(half)
	if err := readAll(r); !errors.Is(err, ErrMessage) {
		t.Fatalf("a third message past the budget: %v, want a cut", err)
	}
	readers[0].Close()
	if got := ts.gate.held.Load(); got != 512<<10 {
		t.Fatalf("drawn after one closed: %d, want 512 KiB", got)
	}
}
