package raftport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// The raft port. With TLS the raft transport runs over mutual TLS: a peer
// must present a node certificate of the CA (or of the authority the
// cluster secret derives, internal/clustersecret) that names a member of
// this node's configuration (tlsconfig.CheckNode), or it is refused at
// the handshake, before raft reads a byte; a client certificate never is
// a peer. Without TLS (InsecureRaft) it is raft's network transport over
// plain TCP, on a loopback address unless Config.Insecure says otherwise.
// Either way the port has budgets of its own, apart from the client
// port's (portGate): the connections raft holds, which only a peer that
// completed its handshake takes, and the handshakes in progress, each
// under a timeout. With a cluster secret the dialer sends a proof of it
// before its TLS handshake (PeerProof), which the port reads first, so
// that a member's connection is told apart from the first bytes it
// sends. A handshake is all a process without the credential can hold,
// and it cannot crowd out a member's: with the handshake budget spent, a
// new connection makes room by closing the oldest handshake of the
// address holding the most, never one whose dialer proved the secret,
// so that connections that never complete make way for one that
// completes in milliseconds, even from the members' own address. What is
// closed is counted and summed up in a log line at most every
// refusalLogEvery. The connections raft is handed are streamConns, the
// one place every byte raft reads from a peer goes through.

// Limits bound the raft port.
type Limits struct {
	// MaxConns caps the accepted connections raft holds (each an open
	// file): with TLS, those of peers that completed the handshake.
	// Default DefaultMaxConns.
	MaxConns int
	// MaxHandshakes caps the handshakes in progress; past it the
	// oldest handshake of the address holding the most, among those
	// that have not proved the credential, is closed to make room.
	// Default DefaultMaxHandshakes.
	MaxHandshakes int
	// HandshakeTimeout bounds one peer's handshake, the proof of the
	// secret (proofTimeout at most) and TLS. Default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MessageTimeout bounds the time from a message's first byte to its
	// last, besides a second for every MinRate bytes it streams, and any
	// wait for a byte in its middle (raftframes.go). Default
	// DefaultMessageTimeout.
	MessageTimeout time.Duration
	// MinRate is the least a message's streamed bytes (a snapshot's
	// data) must arrive at, in bytes a second, unless the engine says
	// (Frames.MinRate). Default DefaultMinRate.
	MinRate int64
	// MessageBudget bounds the bytes the port's connections hold of
	// their messages in progress, past the first 256 KiB of each.
	// Default DefaultMessageBudget.
	MessageBudget int64
}

// Defaults of Limits. A 7-node cluster holds about 5 connections
// from each peer (raft's pool of 3, a pipeline, a snapshot).
const (
	DefaultMaxConns         = 128
	DefaultMaxHandshakes    = 32
	DefaultHandshakeTimeout = 5 * time.Second
	// hashicorp/raft's own network transport gives an RPC 10 s.
	DefaultMessageTimeout = 10 * time.Second
	// 2 Mbit/s: ten times the least hashicorp/raft's sender of a
	// snapshot waits for (256 KiB per 10 s), a fiftieth of a 100 Mbit/s
	// link.
	DefaultMinRate = 256 << 10
	// The largest message either engine takes (64 entries of 2 MiB), with
	// room: many connections hold no more than one of them.
	DefaultMessageBudget = 160 << 20
)

// freeHeld is what a connection's message may hold before it draws on
// the port's MessageBudget: more than any message but large appends.
const freeHeld = 256 << 10

func (l Limits) withDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxHandshakes <= 0 {
		l.MaxHandshakes = DefaultMaxHandshakes
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.MessageTimeout <= 0 {
		l.MessageTimeout = DefaultMessageTimeout
	}
	if l.MinRate <= 0 {
		l.MinRate = DefaultMinRate
	}
	if l.MessageBudget <= 0 {
		l.MessageBudget = DefaultMessageBudget
	}
	return l
}

// Stats is the raft port's accounting.
type Stats struct {
	// Open: accepted connections raft holds now; Handshaking: TLS
	// handshakes in progress.
	Open, Handshaking int64
	// RefusedConns: connections closed at MaxConns. Evicted: connections
	// closed with the handshake budget spent: a handshake in progress,
	// to make room for a newer connection, or the newer one when every
	// handshake in progress proved the credential.
	RefusedConns, Evicted int64
	// HandshakesRefused counts handshakes that failed or were refused: no
	// certificate, another CA's or another secret's, a client
	// certificate, a node of no member, a timeout, bytes that are not
	// TLS.
	HandshakesRefused int64
	// MessagesCut counts connections cut in the middle of a message:
	// a declared length above the engine's bounds, a message holding
	// too much, one not sent in time (raftframes.go).
	MessagesCut int64
	// MessagesRefused counts messages read whole and dropped before raft
	// took them: a term past the TermGuard's bounds, a term inside a
	// message above its own, a snapshot this node could not install.
	// The engine fills it in: the port only frames messages.
	MessagesRefused int64
	Limits          Limits
}

// refusalLogEvery spaces the raft port's log lines about refusals: one
// dialer cannot write a line per connection.
const refusalLogEvery = 10 * time.Second

// portGate is the raft port's budgets and accounting.
type portGate struct {
	lim                                      Limits
	log                                      *slog.Logger
	now                                      func() time.Time // spaces the log lines
	open, handshaking                        atomic.Int64
	refusedConns, evicted, refusedHandshakes atomic.Int64
	messagesCut                              atomic.Int64
	held                                     atomic.Int64 // drawn from MessageBudget

	mu       sync.Mutex
	byAddr   map[string][]*pendingConn // handshakes in progress by remote IP, oldest first, proven ones aside
	lastLog  time.Time
	unlogged int // refusals since the last line
}

// pendingConn is a connection whose handshake is in progress.
type pendingConn struct {
	net.Conn
	ip      string
	evicted bool // closed to make room; under portGate.mu
	proven  bool // its dialer proved the credential: not evicted; under portGate.mu
}

func newPortGate(lim Limits, log *slog.Logger) *portGate {
	return &portGate{lim: lim.withDefaults(), log: log, now: time.Now, byAddr: make(map[string][]*pendingConn)}
}

func (g *portGate) stats() Stats {
	return Stats{Open: g.open.Load(), Handshaking: g.handshaking.Load(),
		RefusedConns: g.refusedConns.Load(), Evicted: g.evicted.Load(),
		HandshakesRefused: g.refusedHandshakes.Load(), MessagesCut: g.messagesCut.Load(), Limits: g.lim}
}

// beginHandshake takes a handshake slot for c, from ip. With the budget
// spent it makes room first: it takes the slot of the oldest handshake
// of the address that holds the most, the newcomer's own when its
// address holds as many (skipping those whose first bytes wait to be
// read), and returns that connection for the caller to close. A
// handshake whose dialer proved the credential (prove) is not taken;
// when every one in progress is, there is no room and ok is false. A
// dialer that opens connections faster than it completes handshakes
// thus closes its own first, and a handshake that completes outlives
// any number of connections that do not, unless MaxHandshakes newer ones
// from its address arrive while it runs.
func (g *portGate) beginHandshake(c net.Conn, ip string) (p, victim *pendingConn, ok bool) {
	p = &pendingConn{Conn: c, ip: ip}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handshaking.Load() >= int64(g.lim.MaxHandshakes) {
		heaviest := ip
		for a, q := range g.byAddr {
			if len(q) > len(g.byAddr[heaviest]) {
				heaviest = a
			}
		}
		q := g.byAddr[heaviest]
		if len(q) == 0 {
			return nil, nil, false
		}
		// A connection whose first bytes wait unread is one whose
		// handshake is about to go on (a member's proof, sent as soon
		// as it connected): the oldest silent one goes first.
		victim = q[0]
		for _, v := range q {
			if unread(v.Conn) == 0 {
				victim = v
				break
			}
		}
		victim.evicted = true
		g.drop(victim)
	}
	g.byAddr[ip] = append(g.byAddr[ip], p)
	g.handshaking.Add(1)
	return p, victim, true
}

// drop forgets p; under g.mu.
func (g *portGate) drop(p *pendingConn) {
	q := g.byAddr[p.ip]
	if i := slices.Index(q, p); i >= 0 {
		q = slices.Delete(q, i, i+1)
		g.handshaking.Add(-1)
	}
	if len(q) == 0 {
		delete(g.byAddr, p.ip)
	} else {
		g.byAddr[p.ip] = q
	}
}

// prove keeps p, whose dialer proved the credential, from being closed
// to make room; false when it was closed meanwhile.
func (g *portGate) prove(p *pendingConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.evicted {
		return false
	}
	g.drop(p)
	p.proven = true
	g.handshaking.Add(1)
	return true
}

// endHandshake gives p's slot back and says whether p was evicted
// meanwhile (then its slot was already taken, and it is closed).
func (g *portGate) endHandshake(p *pendingConn) (evicted bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case p.proven:
		p.proven = false
		g.handshaking.Add(-1)
	case !p.evicted:
		g.drop(p)
	}
	return p.evicted
}

// admit takes a slot of the connections raft holds, if there is one.
func (g *portGate) admit() bool {
	if g.open.Add(1) > int64(g.lim.MaxConns) {
		g.open.Add(-1)
		return false
	}
	return true
}

// refused counts one refusal in c and logs a line, with what was refused
// since the last, unless one was logged within refusalLogEvery.
func (g *portGate) refused(c *atomic.Int64, msg, remote string, err error) {
	c.Add(1)
	g.mu.Lock()
	g.unlogged++
	now := g.now()
	if !g.lastLog.IsZero() && now.Sub(g.lastLog) < refusalLogEvery {
		g.mu.Unlock()
		return
	}
	n := g.unlogged
	g.unlogged, g.lastLog = 0, now
	g.mu.Unlock()
	attrs := []any{"remote", remote, "refused", n, "within", refusalLogEvery.String()}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	st := g.stats()
	attrs = append(attrs, "total_handshakes_refused", st.HandshakesRefused, "total_evicted", st.Evicted, "total_refused_at_cap", st.RefusedConns,
		"total_messages_cut", st.MessagesCut)
	g.log.Warn(msg, attrs...)
}

// Port is a node's raft port, for either engine's transport: TLS when
// tls is set, else plain TCP. Dial connects to a peer; Accept hands the
// engine only the connections the gate admits (and, with TLS, whose peer
// is a node of the configuration), each TLS one handshaken in its own
// goroutine so a silent dialer holds up nobody.
type Port struct {
	ln      net.Listener
	tls     PeerTLS // nil: plain TCP
	members tlsconfig.Members
	gate    *portGate
	frames  Frames // the engine's: how its connections' bytes are followed

	conns  chan net.Conn
	ctx    context.Context // ended by Close: handshakes in progress give up
	cancel context.CancelFunc
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu   sync.Mutex
	open map[*streamConn]struct{} // closed by Close: raft's transport leaves them
}

// streamConn is a connection the stream made or handed to raft,
// forgotten when closed; an accepted one gives its slot back then. Its
// bytes go through the engine's FrameParser as raft reads them, when
// the engine gave one for its side (meter), and each read is under the
// deadline of the message in progress as well as raft's own.
type streamConn struct {
	net.Conn
	st       *Port
	accepted bool
	once     sync.Once

	meter *frameMeter // nil: the bytes are not followed; used by the reader alone
	mu    sync.Mutex
	own   time.Time // the read deadline raft set
	armed time.Time // the one set on Conn
	cut   error     // set once the connection was cut: every read fails with it
}

func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.st.mu.Lock()
		delete(c.st.open, c)
		c.st.mu.Unlock()
		if c.accepted {
			c.st.gate.open.Add(-1)
		}
		if c.meter != nil {
			c.mu.Lock()
			c.meter.release()
			c.mu.Unlock()
		}
	})
	return c.Conn.Close()
}

// Read reads under the earlier of raft's deadline and the message's,
// and hands what it read to the meter; a connection whose message
// breaks its bounds is cut, counted and logged.
func (c *streamConn) Read(p []byte) (int, error) {
	if c.meter == nil {
		return c.Conn.Read(p)
	}
	c.mu.Lock()
	if c.cut != nil {
		c.mu.Unlock()
		return 0, c.cut
	}
	msg := c.meter.deadline(time.Now())
	if err := c.arm(msg); err != nil {
		c.mu.Unlock()
		return 0, err
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > 0 {
		if ferr := c.meter.feed(p[:n], time.Now()); ferr != nil {
			c.cutFor(ferr)
			return 0, ferr
		}
	}
	if err != nil && !msg.IsZero() && isTimeout(err) && (c.own.IsZero() || msg.Before(c.own)) {
		err = fmt.Errorf("%w: a message not sent within %v (and a second per %d bytes it streams): %w", ErrMessage,
			c.meter.timeout, c.meter.minRate, err)
		c.cutFor(err)
	}
	return n, err
}

// arm sets on Conn the earlier of raft's read deadline and msg; under
// c.mu.
func (c *streamConn) arm(msg time.Time) error {
	d := c.own
	if !msg.IsZero() && (d.IsZero() || msg.Before(d)) {
		d = msg
	}
	if d.Equal(c.armed) {
		return nil
	}
	c.armed = d
	return c.Conn.SetReadDeadline(d)
}

// cutFor counts, logs and closes a connection whose message broke its
// bounds; under c.mu.
func (c *streamConn) cutFor(err error) {
	if c.cut != nil {
		return
	}
	c.cut = err
	c.st.gate.refused(&c.st.gate.messagesCut, "raft port: connections cut in the middle of a message (above the engine's bounds, or not sent in time)",
		c.RemoteAddr().String(), err)
	// The connection under TLS, at once: TLS's close would wait to say
	// goodbye to a peer that may not read. raft closes c once it sees
	// the error.
	if tc, ok := c.Conn.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	c.Conn.Close()
}

// SetReadDeadline is raft's read deadline, kept with the message's.
func (c *streamConn) SetReadDeadline(t time.Time) error {
	if c.meter == nil {
		return c.Conn.SetReadDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.own = t
	return c.arm(c.meter.deadline(time.Now()))
}

// SetDeadline sets raft's read and write deadlines.
func (c *streamConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// track registers c, or closes it when the stream is closed.
func (st *Port) track(c net.Conn, accepted bool) (net.Conn, bool) {
	sc := &streamConn{Conn: c, st: st, accepted: accepted}
	newParser := st.frames.Dialed
	if accepted {
		newParser = st.frames.Accepted
	}
	if newParser != nil {
		lim := st.gate.lim
		rate := st.frames.MinRate
		if rate <= 0 {
			rate = lim.MinRate
		}
		sc.meter = &frameMeter{p: newParser(), maxHeld: max(st.frames.MaxHeld, 1), free: freeHeld,
			timeout: lim.MessageTimeout, minRate: rate, budget: &st.gate.held, limit: lim.MessageBudget}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.open == nil {
		c.Close()
		if accepted {
			st.gate.open.Add(-1)
		}
		return nil, false
	}
	st.open[sc] = struct{}{}
	return sc, true
}

// ErrNoCredential: a raft port was asked for with neither TLS nor
// InsecureRaft.
var ErrNoCredential = errors.New("a raft port needs a credential (a cluster secret, or peer TLS): without one, any process that reaches it can forge the cluster's log")

// Listen listens on cfg.Addr (or takes cfg.Listener) with cfg.Limits;
// with cfg.TLS a peer must hold a node certificate that members takes.
// Without TLS it needs cfg.InsecureRaft. frames is how the engine frames
// its messages, for the port to hold each to its bounds.
func Listen(cfg Config, members tlsconfig.Members, frames Frames) (*Port, error) {
	if cfg.TLS == nil && !cfg.InsecureRaft {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, ErrNoCredential
	}
	ln, err := listenRaft(cfg)
	if err != nil {
		return nil, err
	}
	return newStream(ln, cfg.TLS, members, newPortGate(cfg.Limits, cfg.Logger.With("component", "raft-port")), frames), nil
}

// Stats is the port's accounting.
func (st *Port) Stats() Stats { return st.gate.stats() }

// Limits are the port's budgets, defaults filled in.
func (st *Port) Limits() Limits { return st.gate.lim }

// RefusedPeer counts a connection the engine's transport refused after
// the port admitted it (bytes of another protocol, a node that is no
// member) with the handshakes refused, and logs msg, summed up as the
// port's own refusals are.
func (st *Port) RefusedPeer(msg, remote string, err error) {
	st.gate.refused(&st.gate.refusedHandshakes, msg, remote, err)
}

func newStream(ln net.Listener, r PeerTLS, members tlsconfig.Members, gate *portGate, frames Frames) *Port {
	st := &Port{ln: ln, tls: r, members: members, gate: gate, frames: frames, conns: make(chan net.Conn), closed: make(chan struct{}),
		open: make(map[*streamConn]struct{})}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	st.wg.Add(1)
	go st.acceptLoop()
	return st
}

func remoteIP(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

func (st *Port) acceptLoop() {
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
		if st.tls == nil {
			st.admit(c)
			continue
		}
		p, victim, ok := st.gate.beginHandshake(c, remoteIP(c))
		if victim != nil || !ok {
			if !ok {
				victim = &pendingConn{Conn: c}
			}
			// Counted before the close, so that the count is there once
			// the dialer sees the end.
			st.gate.refused(&st.gate.evicted, "raft port: connections closed with the handshake budget spent (the oldest handshake of the address holding the most, to make room)", victim.RemoteAddr().String(), nil)
			victim.Close()
		}
		if !ok {
			continue
		}
		st.wg.Add(1)
		go st.handshake(p)
	}
}

// admit hands c to raft if the gate has room for it.
func (st *Port) admit(c net.Conn) {
	if !st.gate.admit() {
		st.gate.refused(&st.gate.refusedConns, "raft port: connections closed at accept, at the connection cap", c.RemoteAddr().String(), nil)
		c.Close()
		return
	}
	sc, ok := st.track(c, true)
	if !ok {
		return
	}
	select {
	case st.conns <- sc:
	case <-st.closed:
		sc.Close()
	}
}

// proofTimeout bounds the wait for a dialer's proof of the credential
// (PeerProof): it sends it as soon as it is connected.
const proofTimeout = time.Second

func (st *Port) handshake(p *pendingConn) {
	defer st.wg.Done()
	ctx, cancel := context.WithTimeout(st.ctx, st.gate.lim.HandshakeTimeout)
	defer cancel()
	if pr, ok := st.tls.(PeerProof); ok {
		err := st.readProof(ctx, p, pr)
		if err == nil && !st.gate.prove(p) {
			p.Close() // evicted: counted then
			return
		}
		if err != nil {
			if !st.gate.endHandshake(p) {
				st.gate.refused(&st.gate.refusedHandshakes, "raft peer refused: no proof of the cluster secret", p.RemoteAddr().String(), err)
			}
			p.Close()
			return
		}
	}
	tc := tls.Server(p.Conn, st.tls.PeerServer(st.members))
	err := tc.HandshakeContext(ctx)
	if st.gate.endHandshake(p) {
		p.Close() // evicted: counted then
		return
	}
	if err != nil {
		st.gate.refused(&st.gate.refusedHandshakes, "raft peer refused at the TLS handshake", p.RemoteAddr().String(), err)
		p.Close()
		return
	}
	st.admit(tc)
}

// readProof reads and checks the dialer's proof of the credential,
// within proofTimeout or ctx.
func (st *Port) readProof(ctx context.Context, p *pendingConn, pr PeerProof) error {
	stop := context.AfterFunc(ctx, func() { p.SetReadDeadline(time.Now()) })
	defer stop()
	if err := p.SetReadDeadline(time.Now().Add(min(proofTimeout, st.gate.lim.HandshakeTimeout))); err != nil {
		return err
	}
	b := make([]byte, pr.ProofLen())
	if _, err := io.ReadFull(p, b); err != nil {
		return err
	}
	if !pr.CheckProof(b) {
		return errors.New("its first bytes are no proof of this cluster's secret (another secret, or none)")
	}
	return p.SetReadDeadline(time.Time{})
}

// Accept returns the next admitted peer connection.
func (st *Port) Accept() (net.Conn, error) {
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
func (st *Port) Close() error {
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
			c.Close()
		}
	})
	return err
}

// Addr is the listening address.
func (st *Port) Addr() net.Addr { return st.ln.Addr() }

// Dial connects to a peer, over TLS when the port runs it; the node
// answering must be a member.
func (st *Port) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	return st.dial(addr, st.members, timeout)
}

// DialPeer connects to the member id at addr; with TLS the answering
// node's certificate must name id.
func (st *Port) DialPeer(id, addr string, timeout time.Duration) (net.Conn, error) {
	return st.dial(addr, func(name string) bool { return name == id }, timeout)
}

func (st *Port) dial(addr string, members tlsconfig.Members, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := dialPeer(ctx, st.tls, addr, members)
	if err != nil {
		return nil, err
	}
	sc, ok := st.track(c, false)
	if !ok {
		return nil, net.ErrClosed
	}
	return sc, nil
}

// dialPeer connects to the raft port at addr: over TLS with peer unless
// it is nil, the proof of the credential first when it has one.
func dialPeer(ctx context.Context, peer PeerTLS, addr string, members tlsconfig.Members) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || peer == nil {
		return c, err
	}
	if pr, ok := peer.(PeerProof); ok {
		b, err := pr.Proof()
		if err == nil {
			if dl, ok := ctx.Deadline(); ok {
				c.SetWriteDeadline(dl)
			}
			_, err = c.Write(b)
			c.SetWriteDeadline(time.Time{})
		}
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	tc := tls.Client(c, peer.PeerClient(addr, members))
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// listenRaft is the raft port's listener: cfg.Listener, or one on
// cfg.Addr, which must be an address peers can dial and, without
// TLS, a loopback one unless cfg.Insecure.
func listenRaft(cfg Config) (net.Listener, error) {
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, err
		}
	}
	if cfg.TLS == nil {
		if err := CheckLoopback(cfg.Insecure, "raft", ln.Addr()); err != nil {
			ln.Close()
			return nil, err
		}
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		ln.Close()
		return nil, errors.New("the raft address must be one peers can dial, not " + a.String())
	}
	return ln, nil
}

// CertNames says whether the peer of c, a connection of a Port,
// holds a TLS certificate that names the node id; always true without
// TLS, where nobody is authenticated.
func CertNames(c net.Conn, id string) bool {
	sc, ok := c.(*streamConn)
	if !ok {
		return true
	}
	tc, ok := sc.Conn.(*tls.Conn)
	if !ok {
		return true
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return false
	}
	return slices.Contains(tlsconfig.NodeNames(certs[0]), id)
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
	if what == "raft" {
		// Only a raft port without a credential (--insecure-raft) is
		// checked: what it lacks is the cluster's secret.
		return fmt.Errorf("refusing to serve the raft port on %s without a credential (--insecure-raft): anyone who reaches it can forge the cluster's log; give every node the same --cluster-secret-file FILE ('fencelock cluster secret' makes one) or peer TLS, bind a loopback address, or pass --insecure as well", addr)
	}
	return fmt.Errorf("refusing to serve the %s port on %s without TLS: anyone who reaches it owns every lock; bind a loopback address, configure TLS, or pass --insecure", what, addr)
}

// Probe runs cfg.Dial when set, else dials addr: over TLS when cfg.TLS
// is set, where the node must hold a node certificate of the CA that
// names id.
func Probe(ctx context.Context, cfg Config, id, addr string, timeout time.Duration) error {
	if cfg.Dial != nil {
		return cfg.Dial(ctx, addr)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := dialPeer(ctx, cfg.TLS, addr, func(name string) bool { return name == id })
	if err != nil {
		return err
	}
	return c.Close()
}
