package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// The raft port. With TLS the raft transport runs over mutual TLS: a peer
// without a certificate signed by the CA is refused at the handshake,
// before raft reads a byte. Without TLS it is raft's TCP transport, on a
// loopback address unless Config.Insecure says otherwise.

// handshakeTimeout bounds one raft peer's TLS handshake.
const handshakeTimeout = 10 * time.Second

// tlsStream is a raft StreamLayer over TLS. Dial presents this node's
// certificate and verifies the peer's; Accept hands raft only connections
// whose peer presented a certificate signed by the CA, handshaken in
// their own goroutine so a silent dialer holds up nobody.
type tlsStream struct {
	ln  net.Listener
	tls *tlsconfig.Reloader
	log *slog.Logger

	conns  chan net.Conn
	ctx    context.Context // ended by Close: handshakes in progress give up
	cancel context.CancelFunc
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu   sync.Mutex
	open map[*streamConn]struct{} // closed by Close: raft's transport leaves them
}

// streamConn is a connection the stream handed to raft, forgotten when
// closed.
type streamConn struct {
	net.Conn
	st   *tlsStream
	once sync.Once
}

func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.st.mu.Lock()
		delete(c.st.open, c)
		c.st.mu.Unlock()
	})
	return c.Conn.Close()
}

// track registers c, or closes it when the stream is closed.
func (st *tlsStream) track(c net.Conn) (net.Conn, bool) {
	sc := &streamConn{Conn: c, st: st}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.open == nil {
		c.Close()
		return nil, false
	}
	st.open[sc] = struct{}{}
	return sc, true
}

func newTLSStream(ln net.Listener, r *tlsconfig.Reloader, log *slog.Logger) *tlsStream {
	st := &tlsStream{ln: ln, tls: r, log: log, conns: make(chan net.Conn), closed: make(chan struct{}),
		open: make(map[*streamConn]struct{})}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	st.wg.Add(1)
	go st.acceptLoop()
	return st
}

func (st *tlsStream) acceptLoop() {
	defer st.wg.Done()
	var delay time.Duration
	for {
		c, err := st.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
				continue
			case <-st.closed:
				return
			}
		}
		delay = 0
		st.wg.Add(1)
		go st.handshake(c)
	}
}

func (st *tlsStream) handshake(c net.Conn) {
	defer st.wg.Done()
	tc := tls.Server(c, st.tls.PeerServer())
	ctx, cancel := context.WithTimeout(st.ctx, handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		st.log.Warn("raft peer refused at the TLS handshake", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	sc, ok := st.track(tc)
	if !ok {
		return
	}
	select {
	case st.conns <- sc:
	case <-st.closed:
		sc.Close()
	}
}

// Accept returns the next authenticated peer connection.
func (st *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-st.conns:
		return c, nil
	case <-st.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, waits for handshakes in progress to end and
// closes every connection made, in and out: raft's transport closes
// neither its accepted connections nor its pool when it closes.
func (st *tlsStream) Close() error {
	var err error
	st.once.Do(func() {
		close(st.closed)
		st.cancel()
		err = st.ln.Close()
		st.wg.Wait()
		st.mu.Lock()
		open := st.open
		st.open = nil
		st.mu.Unlock()
		for c := range open {
			c.Conn.Close()
		}
	})
	return err
}

// Addr is the listening address.
func (st *tlsStream) Addr() net.Addr { return st.ln.Addr() }

// Dial connects to a peer over TLS.
func (st *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return st.dial(ctx, string(addr))
}

func (st *tlsStream) dial(ctx context.Context, addr string) (net.Conn, error) {
	d := &tls.Dialer{Config: st.tls.PeerClient(addr)}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	sc, ok := st.track(c)
	if !ok {
		return nil, net.ErrClosed
	}
	return sc, nil
}

// newRaftTLSTransport listens on cfg.RaftAddr (or uses cfg.Listener)
// and runs raft's network transport over TLS.
func newRaftTLSTransport(cfg Config, rlog hclog.Logger) (*raft.NetworkTransport, error) {
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return nil, err
		}
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		ln.Close()
		return nil, errors.New("the raft address must be one peers can dial, not " + a.String())
	}
	st := newTLSStream(ln, cfg.TLS, cfg.Logger.With("component", "raft-tls"))
	t := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  st,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  rlog,
	})
	return t, nil
}

// CheckLoopback refuses to serve what (the "client" or "raft" port) on
// addr without TLS, unless it is a loopback address or insecure is set:
// without TLS nobody on the network is authenticated. Callers with TLS on
// do not call it.
func CheckLoopback(insecure bool, what string, addr net.Addr) error {
	if insecure {
		return nil
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		return nil
	}
	harm := "owns every lock"
	if what == "raft" {
		harm = "can forge the cluster's log"
	}
	return fmt.Errorf("server: refusing to serve the %s port on %s without TLS: anyone who reaches it %s; bind a loopback address, configure TLS, or pass --insecure", what, addr, harm)
}
