package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// How the leader changes the membership: it probes a joining node and the
// voters (the strict reconfiguration check) before any change, one change
// at a time (Join, Remove).

// probeTimeout bounds each probe of a node; probes run in parallel.
const probeTimeout = 2 * time.Second

var errNoPeers = errors.New("this node has no client for other nodes' ports")

// probe asks the node at a client address who it is.
func (s *Service) probe(ctx context.Context, clientAddr string) (api.Identity, error) {
	if s.cfg.Peers == nil {
		return api.Identity{}, errNoPeers
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return s.cfg.Peers.Identity(ctx, clientAddr)
}

// checkNewNode refuses a node that does not answer at the addresses given
// or that belongs to another cluster. It returns its identity.
func (s *Service) checkNewNode(ctx context.Context, req api.JoinRequest) (api.Identity, *Error) {
	id, err := s.probe(ctx, req.ClientAddr)
	if err != nil {
		return id, refused(api.CodeNodeUnreachable, "refused, nothing changed: node %s does not answer at its client address %s (%v); start it first (fencelock server --join) and give the addresses it serves",
			req.ID, req.ClientAddr, err)
	}
	switch {
	case id.Node != req.ID:
		return id, refused(api.CodeWrongNode, "refused, nothing changed: the server at %s is node %q, not %q", req.ClientAddr, id.Node, req.ID)
	case id.RaftAddr != req.RaftAddr:
		return id, refused(api.CodeWrongNode, "refused, nothing changed: node %s has the raft address %s, not %s", req.ID, id.RaftAddr, req.RaftAddr)
	case !id.Raft:
		return id, refused(api.CodeNoRaft, "refused, nothing changed: node %s has no raft transport; restart it with --raft %s and --join", req.ID, req.RaftAddr)
	case id.ClusterID != "" && id.ClusterID != s.fsm.ClusterID():
		return id, refused(api.CodeWrongCluster, "refused, nothing changed: node %s belongs to another cluster (cluster id %s; this is %s): it already has state of its own; stop it, empty its data directory and start it with --join",
			req.ID, id.ClusterID, s.fsm.ClusterID())
	}
	if err := s.node.ProbeRaft(ctx, req.ID, req.RaftAddr, probeTimeout); err != nil {
		return id, refused(api.CodeNodeUnreachable, "refused, nothing changed: node %s does not accept connections at its raft address %s (%v)", req.ID, req.RaftAddr, err)
	}
	return id, nil
}

// checkQuorum is the strict reconfiguration check: it refuses a change
// after which fewer than a majority of the voters would answer. voters is
// the voter set after the change; known marks those already known to be
// up (this node, a node just probed).
func (s *Service) checkQuorum(ctx context.Context, what string, voters []replica.Server, known map[string]bool) *Error {
	if len(voters) == 0 {
		return refused(api.CodeNoQuorum, "refused, nothing changed: %s would leave no voter", what)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		up   int
		down []string
	)
	for _, v := range voters {
		if known[v.ID] || v.ID == s.cfg.NodeID {
			mu.Lock()
			up++
			mu.Unlock()
			continue
		}
		m, ok := s.fsm.Member(v.ID)
		if !ok || m.ClientAddr == "" {
			mu.Lock()
			down = append(down, v.ID+" (client address unknown)")
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(id, addr string) {
			defer wg.Done()
			got, err := s.probe(ctx, addr)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				down = append(down, fmt.Sprintf("%s (%v)", id, err))
			case got.Node != id:
				down = append(down, fmt.Sprintf("%s (%s answers as %q)", id, addr, got.Node))
			default:
				up++
			}
		}(v.ID, m.ClientAddr)
	}
	wg.Wait()
	if need := len(voters)/2 + 1; up < need {
		sort.Strings(down)
		return refused(api.CodeNoQuorum, "refused, nothing changed: after %s, %d of the %d voters would answer and a quorum is %d; not answering: %s",
			what, up, len(voters), need, strings.Join(down, ", "))
	}
	return nil
}

// changeError maps a failed configuration change: a node that was not
// leading changed nothing; any other failure may have taken effect.
func (s *Service) changeError(what string, err error) *Error {
	if errors.Is(err, replica.ErrNotLeader) {
		return s.notReady()
	}
	return &Error{Code: api.CodeChangeUnknown,
		Message: fmt.Sprintf("%s: %v; it may or may not have been applied: check cluster members", what, err)}
}

// handOver transfers leadership away before this node is removed and
// answers not_leader naming the new leader once it is known.
func (s *Service) handOver(ctx context.Context, id string) *Error {
	if err := s.node.TransferLeadership(); err != nil {
		return Unavailable(fmt.Sprintf("removing the leader %s: handing leadership over failed (%v); nothing changed", id, err))
	}
	s.log.Info("handed leadership over before being removed", "id", id)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for s.leaderClientAddr() == "" || s.leaderClientAddr() == s.cfg.ClientAddr {
		if !sleepCtx(ctx, 20*time.Millisecond) {
			break
		}
	}
	e := s.notLeader(&Error{Code: api.CodeNotLeader})
	e.Message = "leadership handed over before removing " + id + "; send the removal to the new leader"
	if e.Leader != "" {
		e.Message += " at " + e.Leader
	}
	return e
}

func (s *Service) raftError(err error) *Error {
	if errors.Is(err, replica.ErrNotLeader) {
		return s.notReady()
	}
	return Unavailable(err.Error())
}

// recordMember records a node's client address in the replicated state.
func (s *Service) recordMember(req api.JoinRequest) *Error {
	if m, ok := s.fsm.Member(req.ID); ok && m.RaftAddr == req.RaftAddr && m.ClientAddr == req.ClientAddr {
		return nil
	}
	if _, err := s.propose(fsm.Command{Op: fsm.OpMember, NodeID: req.ID, RaftAddr: req.RaftAddr, ClientAddr: req.ClientAddr}); err != nil {
		return proposalError(err)
	}
	s.log.Info("recorded a member's client address", "id", req.ID, "client", req.ClientAddr)
	return nil
}

// caughtUp waits, bounded by JoinCatchUp, until the node has applied the
// log up to this leader's commit index as it is now.
func (s *Service) caughtUp(ctx context.Context, req api.JoinRequest) bool {
	target := s.node.CommitIndex()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.JoinCatchUp)
	defer cancel()
	for {
		if id, err := s.probe(ctx, req.ClientAddr); err == nil && id.Node == req.ID && id.AppliedIndex >= target {
			return true
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return false
		}
	}
}
