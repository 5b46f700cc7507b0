package hashicorp

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

// Terms from peers (raftport.TermGuard). hashicorp/raft takes a newer term
// from an RPC it is sent (AppendEntries, heartbeats among them, votes,
// pre-votes, InstallSnapshot) and from the answer to a vote or pre-vote
// it asked for. The node wraps its transport so that every one of these
// goes through the guard first (TimeoutNow carries no term in this
// transport: raft adds one to its own): an RPC the guard refuses is answered
// with an error and never reaches raft, and a refused answer is, to
// raft, an RPC that failed. Answers to appends are checked too: raft
// takes no term from them, but steps down for one, and a peer may not
// depose a leader with a term it could not send. The answers of the
// append pipeline are not: raft takes no term from them either.

// guardTransport wraps t so that g sees every term raft would take,
// against term, this node's current term. The optional interfaces raft
// looks for (WithClose, WithPreVote) are kept when t has them.
func guardTransport(t raft.Transport, g *raftport.TermGuard, term func() uint64) raft.Transport {
	gt := &guardedTransport{Transport: t, g: g, term: term, in: make(chan raft.RPC), stop: make(chan struct{})}
	gt.wg.Add(1)
	go gt.filter()
	if _, ok := t.(raft.WithPreVote); ok {
		return &guardedPreVoteTransport{gt}
	}
	return gt
}

type guardedTransport struct {
	raft.Transport
	g    *raftport.TermGuard
	term func() uint64
	in   chan raft.RPC // what raft consumes: the RPCs the guard let through
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// filter hands raft the RPCs the guard lets through and answers the
// others, until the transport is closed.
func (t *guardedTransport) filter() {
	defer t.wg.Done()
	src := t.Transport.Consumer()
	for {
		select {
		case rpc := <-src:
			if err := t.check(rpc.Command); err != nil {
				rpc.Respond(emptyResponse(rpc.Command), err)
				continue
			}
			if req, ok := rpc.Command.(*raft.InstallSnapshotRequest); ok && rpc.Reader != nil {
				rpc.Reader = &checkedSnapshot{r: rpc.Reader, size: req.Size, refused: func(err error) {
					t.g.Refused("InstallSnapshot", string(req.ID), err)
				}}
			}
			select {
			case t.in <- rpc:
			case <-t.stop:
				rpc.Respond(emptyResponse(rpc.Command), raft.ErrTransportShutdown)
				return
			}
		case <-t.stop:
			return
		}
	}
}

// emptyResponse is the answer of cmd's type that goes with an error:
// hashicorp/raft's in-memory pipeline copies an AppendEntries answer
// before it looks at the error, and panics on nil.
func emptyResponse(cmd any) any {
	switch cmd.(type) {
	case *raft.AppendEntriesRequest:
		return &raft.AppendEntriesResponse{}
	case *raft.RequestVoteRequest:
		return &raft.RequestVoteResponse{}
	case *raft.RequestPreVoteRequest:
		return &raft.RequestPreVoteResponse{}
	case *raft.InstallSnapshotRequest:
		return &raft.InstallSnapshotResponse{}
	case *raft.TimeoutNowRequest:
		return &raft.TimeoutNowResponse{}
	}
	return nil
}

// Consumer is the RPCs the guard let through.
func (t *guardedTransport) Consumer() <-chan raft.RPC { return t.in }

// SetHeartbeatHandler hands raft's fast path for heartbeats only those
// the guard lets through.
func (t *guardedTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.Transport.SetHeartbeatHandler(nil)
		return
	}
	t.Transport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if err := t.check(rpc.Command); err != nil {
			rpc.Respond(emptyResponse(rpc.Command), err)
			return
		}
		cb(rpc)
	})
}

// check says why cmd, an RPC from a peer, must not reach raft: a term
// the guard refuses, or a term inside it (of an entry, of the sender's
// last entry) above the RPC's own, which no member sends.
func (t *guardedTransport) check(cmd any) error {
	var kind string
	var hdr raft.RPCHeader
	var term uint64
	var inner []uint64 // terms that may not exceed term
	switch c := cmd.(type) {
	case *raft.AppendEntriesRequest:
		kind, hdr, term = "AppendEntries", c.RPCHeader, c.Term
		inner = append(inner, c.PrevLogTerm)
		for _, e := range c.Entries {
			if e != nil {
				inner = append(inner, e.Term)
			}
		}
	case *raft.RequestVoteRequest:
		kind, hdr, term = "RequestVote", c.RPCHeader, c.Term
		inner = append(inner, c.LastLogTerm)
	case *raft.RequestPreVoteRequest:
		kind, hdr, term = "RequestPreVote", c.RPCHeader, c.Term
		inner = append(inner, c.LastLogTerm)
	case *raft.InstallSnapshotRequest:
		kind, hdr, term = "InstallSnapshot", c.RPCHeader, c.Term
		inner = append(inner, c.LastLogTerm)
	default:
		return nil
	}
	err := t.g.Check(term, t.term())
	for _, it := range inner {
		if err == nil && it > term {
			err = fmt.Errorf("%w: a term %d inside a message of term %d", raftport.ErrTerm, it, term)
		}
	}
	if err != nil {
		t.g.Refused(kind, string(hdr.ID), err)
	}
	return err
}

// answered checks the term of an answer raft asked for, from the peer
// id; a refused one is an RPC that failed.
func (t *guardedTransport) answered(kind string, id raft.ServerID, term uint64, err error) error {
	if err != nil {
		return err
	}
	if err := t.g.Check(term, t.term()); err != nil {
		t.g.Refused(kind, string(id), err)
		return err
	}
	return nil
}

func (t *guardedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.Transport.AppendEntries(id, target, args, resp)
	return t.answered("AppendEntries answer", id, resp.Term, err)
}

func (t *guardedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	err := t.Transport.RequestVote(id, target, args, resp)
	return t.answered("RequestVote answer", id, resp.Term, err)
}

func (t *guardedTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	err := t.Transport.InstallSnapshot(id, target, args, resp, data)
	return t.answered("InstallSnapshot answer", id, resp.Term, err)
}

// Close stops the filter, then closes the transport raft was given
// when it can be closed; it may be called again.
func (t *guardedTransport) Close() error {
	t.once.Do(func() {
		close(t.stop)
		t.wg.Wait()
	})
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

type guardedPreVoteTransport struct{ *guardedTransport }

func (t *guardedPreVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	err := t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
	return t.answered("RequestPreVote answer", id, resp.Term, err)
}

// errBadSnap: an InstallSnapshot whose data this node could not restore.
var errBadSnap = errors.New("a snapshot this node could not install")

// checkedSnapshot is an InstallSnapshot's data as raft copies it into
// its snapshot store, checked before raft keeps it (issue 41). raft
// writes the data to the store, then restores it; a snapshot that does
// not restore is refused, but stays in the store, and the node then
// refused to start ("the log ends at index 10, before the snapshot at
// 1099511627776"). So the bytes are kept as they pass and decoded as
// the state machine would before raft is told they ended: a snapshot
// that does not decode ends its copy with an error instead, and raft
// cancels the snapshot it was writing. raft installs one snapshot at a
// time, so one copy at most is held, no larger than the
// InstallSnapshot's declared size (raftport.MaxSnapshot at most, which the
// raft port enforces); restoring it reads as much again.
type checkedSnapshot struct {
	r       io.Reader
	size    int64
	buf     []byte
	err     error
	refused func(error)
}

func (c *checkedSnapshot) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	if c.buf == nil {
		c.buf = make([]byte, 0, min(max(c.size, 0), 4<<20))
	}
	c.buf = append(c.buf, p[:n]...)
	if int64(len(c.buf)) > c.size {
		c.err = fmt.Errorf("%w: more than its declared %d bytes", errBadSnap, c.size)
	} else if err == io.EOF {
		if derr := fsm.New(nil).UnmarshalBinary(c.buf); derr != nil {
			c.err = fmt.Errorf("%w: %w", errBadSnap, derr)
		}
		c.buf = nil
	}
	if c.err != nil {
		c.buf = nil
		c.refused(c.err)
		return 0, c.err
	}
	return n, err
}
