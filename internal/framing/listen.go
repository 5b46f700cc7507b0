package framing

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// Listen shares ln between HTTP and framed connections. It accepts from ln,
// reads each connection's first byte (in the connection's own goroutine, so
// a silent client holds up nobody), serves framed ones with s, and returns
// the others from the returned listener's Accept with that byte put back,
// for an http.Server. Closing the returned listener closes ln; framed
// connections are ended by s.Shutdown or s.Close.
func Listen(ln net.Listener, s *Server) net.Listener {
	l := &sortingListener{
		Listener: ln,
		s:        s,
		http:     make(chan net.Conn),
		closed:   make(chan struct{}),
	}
	go l.acceptLoop()
	return l
}

// sortBuffer is the read buffer of a connection being sorted, and of a
// framed one until it has authenticated.
const sortBuffer = 4 << 10

type sortingListener struct {
	net.Listener
	s      *Server
	http   chan net.Conn
	closed chan struct{}
	once   sync.Once

	mu  sync.Mutex
	err error // why the accept loop ended
}

func (l *sortingListener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				// Out of file descriptors, say: back off as net/http
				// does, and go on.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.closed:
				}
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		delay = 0
		go l.sort(c)
	}
}

func (l *sortingListener) sort(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(l.s.prefaceTimeout()))
	// A small buffer: an HTTP connection gets net/http's own, and a
	// framed one gets a larger one only once it has authenticated
	// (serverConn.growReader).
	br := bufio.NewReaderSize(c, sortBuffer)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	if first[0] != Preface[0] {
		c.SetReadDeadline(time.Time{})
		select {
		case l.http <- &peekedConn{Conn: c, r: br}:
		case <-l.closed:
			c.Close()
		}
		return
	}
	_ = l.s.serve(c, br)
}

func (l *sortingListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.http:
		return c, nil
	case <-l.closed:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *sortingListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.Listener.Close()
	})
	return err
}

// peekedConn is an HTTP connection whose first bytes were read ahead.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TLSState is the TLS state of a connection this package's listener handed
// out (or of a *tls.Conn), nil for a plain one. An http.Server serving
// Listen's HTTP connections sees them wrapped and leaves Request.TLS nil;
// its ConnContext can take the state from here.
func TLSState(c net.Conn) *tls.ConnectionState {
	if pc, ok := c.(*peekedConn); ok {
		c = pc.Conn
	}
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	return &st
}
