// Package etcdport is the etcd engine's raft-port transport: it carries
// raft's messages between members over the shared raft port
// (raftport.Port), one writer per peer and one reader per incoming
// connection, and hands the engine's core what it reads and learns
// through Core.
package etcdport

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

// Transport carries the etcd engine's raft messages between members
// over the raft port (raftport.Port): the same listener budgets,
// and with TLS the same rule that a peer holds a node certificate of the
// CA naming a member. Each peer has one outgoing connection, written by
// a goroutine of its own from a bounded queue, so raft's goroutine never
// waits on the network: a message that finds the queue full, or a peer
// that cannot be reached, is dropped and reported to raft, which treats
// it as a lost packet. Each connection starts with etcdcodec.Preamble,
// which tells a node of the other engine (or anything else) apart from a
// peer at once, then the dialer's hello: its node ID and raft address,
// from which a node just started to be joined learns where to answer the
// leader before the log has told it. Then come etcdcodec's frames from
// that node only; with TLS the certificate must name it. A newer
// connection from a member replaces its older one, so a peer that
// redials after a partition holds one connection. A member removed from
// the configuration loses its writer and its connections (prune), and
// no writer is started for a node that is not a member. A message read
// reaches raft only once etcdcodec.CheckMsg took it: its terms, and a
// snapshot's data.
type Transport struct {
	st      *raftport.Port
	self    uint64
	greet   []byte // this node's hello, sent after the preamble
	log     *slog.Logger
	core    Core
	timeout time.Duration // a dial's, a flush's: an election timeout, at least minIOTimeout
	hello   time.Duration // a dialer's time to say who it is: the port's handshake timeout
	terms   *raftport.TermGuard

	mu     sync.Mutex
	out    map[uint64]*peerOut
	in     map[uint64]net.Conn // the latest incoming connection of each sender
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
}

// minIOTimeout is the least time a dial or a flush is given: an
// election timeout of tests (tens of milliseconds) is shorter than a TLS
// handshake on a busy machine.
const minIOTimeout = 500 * time.Millisecond

// snapTimeout is a flush's time when it carries a snapshot.
const snapTimeout = time.Minute

// peerQueue bounds the messages waiting for one peer. raft keeps at
// most MaxInflightMsgs appends of MaxSizePerMsg unanswered per follower;
// the rest are heartbeats, votes and their answers.
const peerQueue = 1024

// peerOut is the outgoing side of one peer.
type peerOut struct {
	id   uint64
	q    chan *raftpb.Message
	stop chan struct{} // closed when the peer is no longer a member
	gone chan struct{} // closed when its writer has returned
	// ended is closed once the peer has closed the connection last
	// dialed to it (watchEnd).
	ended atomic.Pointer[chan struct{}]
}

// Core is what the transport asks of the engine's core and tells it.
type Core interface {
	// SetOnConf sets who is told of each configuration applied.
	SetOnConf(func(*raftpb.ConfState))
	// Conf is the configuration applied last.
	Conf() *raftpb.ConfState
	// Term is raft's current term.
	Term() uint64
	// Names gives each member id its node ID and address (read only).
	Names() map[uint64]node.Peer
	// Name is the member id's node ID and address, when known.
	Name(id uint64) (node.Peer, bool)
	// LearnName records where a member listens, as its hello says.
	LearnName(id uint64, p node.Peer)
	// Deliver hands raft a message from a peer; it never blocks.
	Deliver(m *raftpb.Message)
	// ReportUnreachable tells raft a message to peer to was lost.
	ReportUnreachable(to uint64)
	// ReportSnapshot tells raft whether the snapshot sent to to arrived.
	ReportSnapshot(to uint64, done bool)
}

// New starts the transport over st for core.
func New(st *raftport.Port, core Core, self node.Peer, timeout time.Duration, log *slog.Logger) *Transport {
	t := &Transport{st: st, self: etcdcodec.ID(self.ID), greet: etcdcodec.Hello(self), log: log, core: core,
		timeout: max(timeout, minIOTimeout), hello: st.Limits().HandshakeTimeout,
		terms: raftport.NewTermGuard(log, nil),
		out:   map[uint64]*peerOut{}, in: map[uint64]net.Conn{}, done: make(chan struct{})}
	t.wg.Add(1)
	go t.acceptLoop()
	core.SetOnConf(t.prune)
	return t
}

// Send queues msgs for their peers; it never blocks.
func (t *Transport) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		if to == t.self || to == 0 {
			continue
		}
		p, closed := t.peer(to)
		if closed {
			return
		}
		if p == nil {
			t.lostAll([]*raftpb.Message{m})
			continue
		}
		select {
		case p.q <- m:
		default:
			t.lostAll([]*raftpb.Message{m})
		}
	}
}

// peer is the outgoing side of id, started on first use; nil for a node
// that is not a member of a configuration that names somebody (raft
// answering a removed node's vote, say), whose message is lost.
func (t *Transport) peer(id uint64) (p *peerOut, closed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, true
	}
	p, ok := t.out[id]
	if !ok {
		if member, empty := etcdcodec.InConf(t.core.Conf(), id); !member && !empty {
			return nil, false
		}
		p = &peerOut{id: id, q: make(chan *raftpb.Message, peerQueue), stop: make(chan struct{}), gone: make(chan struct{})}
		t.out[id] = p
		t.wg.Add(1)
		go t.writeLoop(p)
	}
	return p, false
}

// prune stops the writer and closes the connections of every peer cs
// no longer names. A configuration that names nobody (a node not yet
// joined) prunes nothing.
func (t *Transport) prune(cs *raftpb.ConfState) {
	if _, empty := etcdcodec.InConf(cs, 0); empty {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, p := range t.out {
		if member, _ := etcdcodec.InConf(cs, id); !member {
			delete(t.out, id)
			close(p.stop)
		}
	}
	for id, c := range t.in {
		if member, _ := etcdcodec.InConf(cs, id); !member {
			c.Close() // its readLoop forgets it
		}
	}
}

// writeLoop writes p's messages: each batch the queue holds is one
// flush. A connection that fails is closed and the batch is lost; the
// next message dials again, at most once per backoff, and messages in
// between are dropped as lost.
func (t *Transport) writeLoop(p *peerOut) {
	defer t.wg.Done()
	defer close(p.gone)
	var (
		conn    net.Conn
		w       *bufio.Writer
		backoff time.Duration
		retryAt time.Time
	)
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		var m *raftpb.Message
		select {
		case m = <-p.q:
		case <-p.stop:
			// What raft sent before the peer left the configuration
			// still goes out: among it, the commit of the peer's own
			// removal, without which it never learns it was removed.
			select {
			case m = <-p.q:
			default:
				return
			}
		case <-t.done:
			return
		}
		batch := []*raftpb.Message{m}
	drain:
		for len(batch) < peerQueue {
			select {
			case m = <-p.q:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if conn != nil && p.peerClosed() {
			// The peer closed it (it restarted, say): a write would
			// still succeed into the socket's buffer and the batch be
			// lost, the first answer of an election among them.
			conn.Close()
			conn = nil
		}
		if conn == nil {
			if time.Now().Before(retryAt) {
				t.lostAll(batch)
				continue
			}
			c, err := t.dial(p.id)
			if err != nil {
				backoff = min(max(2*backoff, 20*time.Millisecond), time.Second)
				retryAt = time.Now().Add(backoff)
				t.lostAll(batch)
				continue
			}
			conn, w, backoff = c, bufio.NewWriterSize(c, 64<<10), 0
			p.watchEnd(t, c)
		}
		if err := t.write(conn, w, batch); err != nil {
			conn.Close()
			conn = nil
			t.lostAll(batch)
			continue
		}
		for _, m := range batch {
			if m.GetType() == raftpb.MsgSnap {
				t.core.ReportSnapshot(p.id, true)
			}
		}
	}
}

// watchEnd reads p's new outgoing connection c, on which a peer sends
// nothing, until the peer closes it (or it is closed here): peerClosed
// says so from then on.
func (p *peerOut) watchEnd(t *Transport, c net.Conn) {
	ended := make(chan struct{})
	p.ended.Store(&ended)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(ended)
		_, _ = io.Copy(io.Discard, c)
	}()
}

// peerClosed reports whether the last connection dialed to p has ended.
func (p *peerOut) peerClosed() bool {
	ended := p.ended.Load()
	if ended == nil {
		return false
	}
	select {
	case <-*ended:
		return true
	default:
		return false
	}
}

// lostAll tells raft that batch, messages to one peer, did not reach it:
// a snapshot among them failed, and the peer is unreachable.
func (t *Transport) lostAll(batch []*raftpb.Message) {
	for _, m := range batch {
		if m.GetType() == raftpb.MsgSnap {
			t.core.ReportSnapshot(m.GetTo(), false)
		}
	}
	t.core.ReportUnreachable(batch[0].GetTo())
}

func (t *Transport) write(conn net.Conn, w *bufio.Writer, batch []*raftpb.Message) error {
	timeout := t.timeout
	for _, m := range batch {
		if m.GetType() == raftpb.MsgSnap {
			timeout = max(timeout, snapTimeout)
		}
	}
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	for _, m := range batch {
		if err := etcdcodec.WriteMsg(w, m); err != nil {
			return err
		}
	}
	return w.Flush()
}

// dial connects to member id at the address the configuration gives it,
// over TLS when the port runs it, where the answering node's certificate
// must name id itself.
func (t *Transport) dial(id uint64) (net.Conn, error) {
	p, ok := t.core.Name(id)
	if !ok || p.RaftAddr == "" {
		return nil, fmt.Errorf("no raft address known for member %x", id)
	}
	c, err := t.st.DialPeer(p.ID, p.RaftAddr, t.timeout)
	if err != nil {
		return nil, err
	}
	if err = c.SetWriteDeadline(time.Now().Add(t.timeout)); err == nil {
		if _, err = c.Write(append(append([]byte{}, etcdcodec.Preamble...), t.greet...)); err == nil {
			return c, nil
		}
	}
	c.Close()
	return nil, err
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.st.Accept()
		if err != nil {
			return
		}
		t.wg.Add(1)
		go t.readLoop(c)
	}
}

// readLoop hands raft the messages of one incoming connection.
func (t *Transport) readLoop(c net.Conn) {
	defer t.wg.Done()
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	pre := make([]byte, len(etcdcodec.Preamble))
	if err := c.SetReadDeadline(time.Now().Add(t.hello)); err != nil {
		return
	}
	if _, err := io.ReadFull(r, pre); err != nil || !bytes.Equal(pre, etcdcodec.Preamble) {
		if err == nil {
			t.st.RefusedPeer(
				"raft port: a connection that does not speak the etcd engine's raft protocol (a node of the other engine?)",
				c.RemoteAddr().String(), nil)
		}
		return
	}
	p, err := etcdcodec.ReadHello(r)
	if err != nil {
		t.log.Warn("raft port: a peer's hello", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	from := etcdcodec.ID(p.ID)
	if from == t.self {
		return
	}
	if !raftport.CertNames(c, p.ID) {
		t.log.Warn("raft port: a peer whose certificate does not name the node it says it is",
			"remote", c.RemoteAddr().String(), "node", p.ID)
		return
	}
	if member, empty := etcdcodec.InConf(t.core.Conf(), from); !member && !empty {
		// A removed member, or one not added yet: the rule TLS keeps
		// at the handshake (the etcd Node's isMember), kept without it too.
		t.st.RefusedPeer("raft port: a node that is not a member of the configuration",
			c.RemoteAddr().String(), fmt.Errorf("node %q", p.ID))
		return
	}
	if p.RaftAddr != "" {
		t.core.LearnName(from, p)
	}
	// No deadline from here on: a connection between two followers is
	// silent until an election, and TCP's keep-alive (on by default)
	// ends one whose peer is gone.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	t.replaceIn(from, c)
	defer t.forgetIn(from, c)
	for {
		m, err := etcdcodec.ReadMsg(r, from)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) && !errors.Is(err, raftport.ErrMessage) {
				t.log.Warn("raft port: closing a peer's connection", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		if err := etcdcodec.CheckMsg(t.terms, m, t.core.Term(), t.core.Names()); err != nil {
			t.terms.Refused(m.GetType().String(), p.ID, err)
			continue
		}
		t.core.Deliver(m)
	}
}

// replaceIn makes c the incoming connection of from, closing the one
// before it.
func (t *Transport) replaceIn(from uint64, c net.Conn) {
	t.mu.Lock()
	old := t.in[from]
	t.in[from] = c
	t.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

func (t *Transport) forgetIn(from uint64, c net.Conn) {
	t.mu.Lock()
	if t.in[from] == c {
		delete(t.in, from)
	}
	t.mu.Unlock()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Close stops the writers and closes every connection, in and out.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	close(t.done)
	err := t.st.Close()
	t.wg.Wait()
	return err
}

// Refused counts the messages refused since the transport started
// (Status's MessagesRefused).
func (t *Transport) Refused() int64 { return t.terms.Count() }

// Writer is the channel closed when the writer to peer id returns; nil
// when there is none (tests).
func (t *Transport) Writer(id uint64) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.out[id]; p != nil {
		return p.gone
	}
	return nil
}

// PeerClosed reports whether there is a writer to peer id and the peer
// closed the connection it last dialed (tests).
func (t *Transport) PeerClosed(id uint64) bool {
	t.mu.Lock()
	p := t.out[id]
	t.mu.Unlock()
	return p != nil && p.peerClosed()
}

// Incoming is the latest incoming connection from peer id, nil when
// there is none (tests).
func (t *Transport) Incoming(id uint64) net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.in[id]
}
