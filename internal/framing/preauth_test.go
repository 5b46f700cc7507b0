package framing

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Nothing large before authentication (issue 24, item 2).

// serverClosed reports whether the server closed c: a read ends with EOF
// or a reset, not at the deadline, which is only a failsafe.
func serverClosed(t *testing.T, c interface {
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
}) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// frameHeader is the length field of a frame of n bytes.
func frameHeader(n int) []byte {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(n))
	return hdr[:]
}

// A request frame longer than any request can be (the API's largest
// body and target) is refused at its length: the fill attack (a 4 MiB
// frame sent but for its last byte, on many connections) held 4 MiB a
// connection until the read timeout.
func TestOversizedRequestFrameIsRefusedAtItsLength(t *testing.T) {
	f := serve(t, echo, &Server{})
	c := rawDial(t, f.addr)
	if _, err := c.Write(frameHeader(MaxFrame)); err != nil {
		t.Fatal(err)
	}
	if !serverClosed(t, c) {
		t.Fatal("a 4 MiB request frame was waited for")
	}
}

// only "Bearer good" authenticates.
func goodToken(cred string, _ *tls.ConnectionState) bool { return cred == "Bearer good" }

func send(t *testing.T, c net.Conn, id uint32, kind, method byte, target string, body []byte) {
	t.Helper()
	frame, err := appendRequest(nil, id, kind, method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
}

func answerTo(t *testing.T, c net.Conn) answer {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	a, err := readAnswer(c)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return a
}

// Before its auth frame a connection may send a few KiB a frame; after
// a credential that authenticates, a request's worth; after one that
// does not, still a few KiB.
func TestUnauthenticatedFramesAreSmall(t *testing.T) {
	f := serve(t, echo, &Server{Authenticated: goodToken})
	big := bytes.Repeat([]byte("b"), DefaultMaxUnauthenticatedFrame)

	c := rawDial(t, f.addr)
	send(t, c, 1, KindRequest, methodPost, "/small", []byte("{}"))
	if a := answerTo(t, c); a.status != 200 || !strings.HasPrefix(string(a.body), "POST /small") {
		t.Fatalf("a small request before authenticating: %d %q", a.status, a.body)
	}
	send(t, c, 2, KindRequest, methodPost, "/big", big)
	if !serverClosed(t, c) {
		t.Fatal("an unauthenticated connection's 8 KiB frame was read")
	}
	eventually(t, "the refusal counted", func() bool { return f.fs.Stats().FramesTooLarge == 1 })

	c = rawDial(t, f.addr)
	send(t, c, 0, KindAuth, 0, "", []byte("Bearer bad"))
	send(t, c, 1, KindRequest, methodPost, "/big", big)
	if !serverClosed(t, c) {
		t.Fatal("a frame after an auth frame that does not authenticate was read")
	}

	c = rawDial(t, f.addr)
	send(t, c, 0, KindAuth, 0, "", []byte("Bearer good"))
	body := bytes.Repeat([]byte("b"), 60<<10)
	send(t, c, 1, KindRequest, methodPost, "/big", body)
	if a := answerTo(t, c); a.status != 200 || len(a.body) < len(body) {
		t.Fatalf("a 60 KiB request after authenticating: %d, %d bytes", a.status, len(a.body))
	}
}

// A TLS client certificate the server takes authenticates the
// connection from its first frame (Authenticated sees the state).
func TestAuthenticatedHookSeesTheConnection(t *testing.T) {
	var saw atomic.Int32
	f := serve(t, echo, &Server{Authenticated: func(cred string, cs *tls.ConnectionState) bool {
		saw.Add(1)
		return cred == "" // stands for a certificate: authenticated before any auth frame
	}})
	c := rawDial(t, f.addr)
	send(t, c, 1, KindRequest, methodPost, "/big", bytes.Repeat([]byte("b"), 60<<10))
	if a := answerTo(t, c); a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	send(t, c, 2, KindRequest, methodPost, "/big", []byte("{}"))
	answerTo(t, c)
	if n := saw.Load(); n != 1 {
		t.Errorf("Authenticated asked %d times, want once: an authenticated connection is not asked again", n)
	}
}

// A connection that is not authenticated and sends nothing is closed
// after the short unauthenticated idle timeout, not the 5 minutes of an
// authenticated one.
func TestUnauthenticatedIdleIsShort(t *testing.T) {
	f := serve(t, echo, &Server{Authenticated: goodToken, UnauthenticatedIdleTimeout: 50 * time.Millisecond, IdleTimeout: time.Hour})
	c := rawDial(t, f.addr)
	if !serverClosed(t, c) {
		t.Fatal("a silent unauthenticated connection stayed open")
	}
	eventually(t, "the close counted", func() bool { return f.fs.Stats().UnauthenticatedIdle == 1 })
}

// A frame whose bytes stop arriving is cut after the stall timeout, not
// the read timeout of the whole frame.
func TestStalledFrameIsCutAfterTheStallTimeout(t *testing.T) {
	f := serve(t, echo, &Server{StallTimeout: 50 * time.Millisecond, ReadTimeout: time.Hour})
	c := rawDial(t, f.addr)
	c.Write(append(frameHeader(100), 1, 2, 3))
	if !serverClosed(t, c) {
		t.Fatal("a stalled frame was waited for")
	}
	eventually(t, "the stall counted", func() bool { return f.fs.Stats().Stalls == 1 })
	if st := f.fs.Stats(); st.ReadTimeouts != 0 || st.BufferedBytes != 0 {
		t.Errorf("stats %+v: want the stall counted as a stall and its bytes given back", st)
	}
}

// The frames being read on all the connections of one address share one
// budget: a frame that would go past it closes its connection, and the
// bytes come back when a frame completes.
func TestFramesBeingReadShareTheAddressBudget(t *testing.T) {
	const frame = 60 << 10
	f := serve(t, echo, &Server{MaxBufferedPerAddr: 100 << 10})
	first := rawDial(t, f.addr)
	req, err := appendRequest(nil, 1, KindRequest, methodPost, "/a", bytes.Repeat([]byte("a"), frame))
	if err != nil {
		t.Fatal(err)
	}
	first.Write(req[:100])
	eventually(t, "the first frame reserved", func() bool { return f.fs.Stats().BufferedBytes == int64(len(req)-4) })
	second := rawDial(t, f.addr)
	second.Write(req[:100])
	if !serverClosed(t, second) {
		t.Fatal("a frame past the address's budget was read")
	}
	if st := f.fs.Stats(); st.AddrBufferCloses != 1 {
		t.Fatalf("stats %+v", st)
	}
	first.Write(req[100:])
	if a := answerTo(t, first); a.status != 200 {
		t.Fatalf("the first frame: %d", a.status)
	}
	eventually(t, "the bytes given back", func() bool { return f.fs.Stats().BufferedBytes == 0 })
	third := rawDial(t, f.addr)
	third.Write(req)
	if a := answerTo(t, third); a.status != 200 {
		t.Fatalf("a frame once the budget was back: %d", a.status)
	}
}

// An unauthenticated connection reads through a small buffer; the bytes
// it holds when the connection authenticates (an auth frame and the
// requests written with it) are kept when the buffer grows.
func TestReaderGrowsOnAuthenticationKeepingWhatItHolds(t *testing.T) {
	f := serve(t, echo, &Server{Authenticated: goodToken})
	c := rawDial(t, f.addr)
	var frames []byte
	frames, _ = appendRequest(frames, 0, KindAuth, 0, "", []byte("Bearer good"))
	for id := range uint32(50) {
		frames, _ = appendRequest(frames, id+1, KindRequest, methodPost, "/p", bytes.Repeat([]byte{'a' + byte(id%26)}, 1000))
	}
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for range 50 {
		a := answerTo(t, c)
		if a.status != 200 || len(a.body) != len("POST /p  ")+1000 || a.body[len(a.body)-1] != 'a'+byte((a.id-1)%26) {
			t.Fatalf("answer %d: %d %q", a.id, a.status, a.body[:min(len(a.body), 40)])
		}
		seen[a.id] = true
	}
	if len(seen) != 50 {
		t.Fatalf("%d distinct answers", len(seen))
	}
}
