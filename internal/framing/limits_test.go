package framing

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// eventually polls cond until it holds; the deadline only keeps a broken
// build from hanging, it decides nothing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("never: %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// rawDial opens a framed connection by hand, for a peer that misbehaves.
func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(Preface)); err != nil {
		t.Fatal(err)
	}
	var p [len(Preface)]byte
	if _, err := io.ReadFull(c, p[:]); err != nil || string(p[:]) != Preface {
		t.Fatalf("preface: %q %v", p, err)
	}
	return c
}

// A peer that sends many requests and never reads its answers: the server
// stops reading it once its pending answers pass the bound, holds no more
// than that plus the few lists already running, and cuts it off when it still
// takes nothing for WriteTimeout (before, it answered everything into an
// unbounded buffer: 5.5 GB from 2,000 list requests).
func TestNonReadingPeerIsBoundedThenCutOff(t *testing.T) {
	const (
		answer     = 32 << 10
		maxIn      = 64
		maxPending = 256 << 10
		requests   = 2000 // 64 MiB of answers
	)
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte{'x'}, answer))
	})
	f := serve(t, big, &Server{MaxInFlight: maxIn, MaxPendingAnswerBytes: maxPending, WriteTimeout: 200 * time.Millisecond,
		Heavy: func(path string) bool { return path == "/v1/locks" }})
	c := rawDial(t, f.addr)
	var frames []byte
	for id := range uint32(requests) {
		frames, _ = appendRequest(frames, id+1, KindRequest, methodGet, "/v1/locks", nil)
	}
	go c.Write(frames) // may block once the server stops reading; the close ends it

	eventually(t, "the non-reading connection is cut off", func() bool {
		st := f.fs.Stats()
		return st.WriteTimeouts == 1 && st.Conns == 0
	})
	st := f.fs.Stats()
	// Past the bound no list starts; at most maxHeavy were running.
	bound := int64(maxPending + maxHeavy*(answerHeader+answer))
	if st.PeakConnPendingAnswerBytes > bound {
		t.Errorf("the connection had %d answer bytes pending; the bound is %d", st.PeakConnPendingAnswerBytes, bound)
	}
	if st.PeakConnPendingAnswerBytes <= maxPending {
		t.Errorf("peak pending %d never passed %d: the test did not fill the connection", st.PeakConnPendingAnswerBytes, maxPending)
	}
	if st.PendingAnswerBytes != 0 || st.InFlight != 0 {
		t.Errorf("after the cut-off: %d answer bytes and %d requests still counted", st.PendingAnswerBytes, st.InFlight)
	}
	// The peer sees the end: what the kernel holds, then EOF or a reset.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection stayed open: %v", err)
	}
}

// A peer that reads, slowly, is not cut off: the write deadline is on
// progress, and backpressure only paces it.
func TestSlowReaderGetsEveryAnswer(t *testing.T) {
	const answer = 16 << 10
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte{'y'}, answer))
	})
	f := serve(t, big, &Server{MaxInFlight: 4, MaxPendingAnswerBytes: 64 << 10})
	c := f.dial()
	for range 50 {
		_, body, err := c.RoundTrip(context.Background(), http.MethodGet, "/v1/locks", nil)
		if err != nil || len(body) != answer {
			t.Fatalf("got %d bytes, %v", len(body), err)
		}
	}
	// The server counts an answer out once its write returns, which may
	// be just after the peer has it.
	eventually(t, "the last answer is counted out", func() bool {
		st := f.fs.Stats()
		return st.PendingAnswerBytes == 0 && st.InFlight == 0
	})
	if st := f.fs.Stats(); st.WriteTimeouts != 0 {
		t.Fatalf("a reading peer was cut off: %+v", st)
	}
}

// A frame's declared length is not allocated before its bytes arrive: a
// header declaring 4 MiB followed by ten bytes and the end costs about
// 64 KiB (it cost 4 MiB a frame).
func TestDeclaredFrameIsNotAllocatedUpFront(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrame)
	frame := append(hdr[:], make([]byte, 10)...)
	const runs = 32
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := readRequest(bytes.NewReader(frame)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("readRequest = %v, want unexpected EOF", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 256<<10 {
		t.Fatalf("a 4 MiB header with 10 bytes allocated %d bytes", per)
	}
}

// A frame that does arrive is read whole, however it is split (an
// answer: requests are at most MaxRequestFrame).
func TestLargeFrameGrowsToItsLength(t *testing.T) {
	body := bytes.Repeat([]byte("z"), 3<<20+17)
	frame := appendAnswer(nil, 7, 200, body)
	a, err := readAnswer(iotestHalfReader{bytes.NewReader(frame)})
	if err != nil || a.id != 7 || !bytes.Equal(a.body, body) {
		t.Fatalf("read id %d, %d body bytes, %v", a.id, len(a.body), err)
	}
}

// iotestHalfReader returns at most half of what it is asked for.
type iotestHalfReader struct{ r io.Reader }

func (h iotestHalfReader) Read(p []byte) (int, error) { return h.r.Read(p[:(len(p)+1)/2]) }

// A connection with nothing in flight that sends nothing is closed after
// IdleTimeout (before, never); the requests it had out were answered.
func TestIdleConnectionIsClosed(t *testing.T) {
	b := newBlocker()
	f := serve(t, b, &Server{IdleTimeout: 50 * time.Millisecond})
	c := f.dial()
	slow := make(chan error, 1)
	go func() {
		_, _, err := c.RoundTrip(context.Background(), http.MethodGet, "/slow?a", nil)
		slow <- err
	}()
	<-b.entered
	close(b.release)
	if err := <-slow; err != nil {
		t.Fatalf("the request in flight failed: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("an idle connection stayed open")
	}
	eventually(t, "the idle close is counted", func() bool { return f.fs.Stats().IdleTimeouts == 1 })
}

// A request in flight is not idleness, however long it runs: the idle
// deadlines that pass meanwhile are moved, not obeyed, and the
// connection answers another request and then the long one.
func TestLongRequestIsNotIdleness(t *testing.T) {
	b := newBlocker()
	const idle = 20 * time.Millisecond
	f := serve(t, b, &Server{IdleTimeout: idle})
	c := f.dial()
	slow := make(chan error, 1)
	go func() {
		_, body, err := c.RoundTrip(context.Background(), http.MethodGet, "/slow?a", nil)
		if err == nil && string(body) != "released a" {
			err = fmt.Errorf("answer %q", body)
		}
		slow <- err
	}()
	<-b.entered
	// Let several idle limits pass with the request in flight (time
	// passing, not an event awaited: the server may run late, never
	// early).
	time.Sleep(10 * idle)
	select {
	case <-c.Done():
		t.Fatalf("a connection with a request in flight was closed: %v", c.Err())
	default:
	}
	if _, body, err := c.RoundTrip(context.Background(), http.MethodGet, "/next", nil); err != nil || !strings.HasPrefix(string(body), "GET /next") {
		t.Fatalf("the next request: %q %v", body, err)
	}
	close(b.release)
	if err := <-slow; err != nil {
		t.Fatalf("the long request: %v", err)
	}
	if n := f.fs.Stats().IdleTimeouts; n != 0 {
		t.Fatalf("%d idle closes counted", n)
	}
}

// A peer that starts a frame and stalls is cut off after ReadTimeout.
func TestStalledFrameIsCutOff(t *testing.T) {
	f := serve(t, echo, &Server{ReadTimeout: 50 * time.Millisecond})
	c := rawDial(t, f.addr)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 100)
	c.Write(append(hdr[:], 1, 2, 3))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a stalled frame: %v; want the server to close", err)
	}
	eventually(t, "the stall is counted", func() bool { return f.fs.Stats().ReadTimeouts == 1 })
}

// Extends and releases have their own budget: with the window full of
// requests that wait, an extend is still read and answered (before, it
// queued behind them on the server: a lost lease).
func TestExtendIsAnsweredWithTheWindowFull(t *testing.T) {
	b := newBlocker()
	f := serve(t, b, &Server{MaxInFlight: 2})
	c := f.dial()
	for _, q := range []string{"1", "2"} {
		go c.RoundTrip(context.Background(), http.MethodGet, "/slow?"+q, nil)
	}
	<-b.entered
	<-b.entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, path := range []string{"/v1/extend", "/v1/extend-batch", "/v1/release"} {
		_, body, err := c.RoundTrip(ctx, http.MethodPost, path, []byte("{}"))
		if err != nil || !strings.HasPrefix(string(body), "POST "+path) {
			t.Fatalf("%s with the window full: %q %v", path, body, err)
		}
	}
	close(b.release)
}

// The client's window stops at the server's default budget, so a client
// never makes the server stop reading its connection.
func TestClientWindowMatchesTheServerBudget(t *testing.T) {
	c := &Conn{window: make(chan struct{}, DefaultMaxInFlight), priority: make(chan struct{}, DefaultMaxPriorityInFlight)}
	if !c.Room("/v1/acquire") || !c.Room("/v1/extend") {
		t.Fatal("an empty connection has no room")
	}
	for range DefaultMaxInFlight {
		c.window <- struct{}{}
	}
	if c.Room("/v1/acquire") || !c.Room("/v1/extend?x=1") {
		t.Fatal("a full window must refuse acquires and still take extends")
	}
}
