package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
)

// How the leader changes the membership: it probes a joining node and the
// voters (the strict reconfiguration check) before any change, one change
// at a time. The operations are in service_cluster.go.

// membership serialises the leader's membership changes: each one probes
// the cluster and then changes it, and two at once would count the same
// quorum twice.
type membership struct {
	mu sync.Mutex
}

// probeTimeout bounds each probe of a node; probes run in parallel.
const probeTimeout = 2 * time.Second

// probe asks the node at a client address who it is.
func (s *Server) probe(ctx context.Context, clientAddr string) (api.Identity, error) {
	var id api.Identity
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.scheme()+clientAddr+api.PathIdentity, nil)
	if err != nil {
		return id, err
	}
	resp, err := s.peerHTTP.Do(req)
	if err != nil {
		return id, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return id, err
	}
	if resp.StatusCode != http.StatusOK {
		return id, fmt.Errorf("GET /v1/cluster/identity answered %d (%s)", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &id); err != nil {
		return id, fmt.Errorf("GET /v1/cluster/identity: %w", err)
	}
	return id, nil
}

func (s *Server) probeRaft(ctx context.Context, addr string) error {
	if s.cfg.dialRaft != nil {
		return s.cfg.dialRaft(ctx, addr)
	}
	if s.cfg.Transport != nil {
		return nil // an in-process transport: nothing to dial
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	} = &net.Dialer{}
	if s.tls != nil {
		// A full handshake: the new node's raft port must also hold a
		// certificate this cluster trusts.
		d = &tls.Dialer{Config: s.tls.PeerClient(addr)}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// checkNewNode refuses a node that does not answer at the addresses given
// or that belongs to another cluster. It returns its identity.
func (s *Server) checkNewNode(ctx context.Context, req api.JoinRequest) (api.Identity, *Error) {
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
	if err := s.probeRaft(ctx, req.RaftAddr); err != nil {
		return id, refused(api.CodeNodeUnreachable, "refused, nothing changed: node %s does not accept connections at its raft address %s (%v)", req.ID, req.RaftAddr, err)
	}
	return id, nil
}

// checkQuorum is the strict reconfiguration check: it refuses a change
// after which fewer than a majority of the voters would answer. voters is
// the voter set after the change; known marks those already known to be
// up (this node, a node just probed).
func (s *Server) checkQuorum(ctx context.Context, what string, voters []raft.Server, known map[raft.ServerID]bool) *Error {
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
		if known[v.ID] || v.ID == raft.ServerID(s.cfg.NodeID) {
			mu.Lock()
			up++
			mu.Unlock()
			continue
		}
		m, ok := s.fsm.Member(string(v.ID))
		if !ok || m.ClientAddr == "" {
			mu.Lock()
			down = append(down, string(v.ID)+" (client address unknown)")
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(id raft.ServerID, addr string) {
			defer wg.Done()
			got, err := s.probe(ctx, addr)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				down = append(down, fmt.Sprintf("%s (%v)", id, err))
			case got.Node != string(id):
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
func (s *Server) changeError(what string, err error) *Error {
	if errors.Is(err, raft.ErrNotLeader) {
		return s.notReady()
	}
	return &Error{Code: api.CodeChangeUnknown,
		Message: fmt.Sprintf("%s: %v; it may or may not have been applied: check cluster members", what, err)}
}

// handOver transfers leadership away before this node is removed and
// answers not_leader naming the new leader once it is known.
func (s *Server) handOver(ctx context.Context, id string) *Error {
	if err := s.node.raft.LeadershipTransfer().Error(); err != nil {
		return unavailable(fmt.Sprintf("removing the leader %s: handing leadership over failed (%v); nothing changed", id, err))
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

func (s *Server) raftError(err error) *Error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return s.notReady()
	}
	return unavailable(err.Error())
}

// recordMember records a node's client address in the replicated state.
func (s *Server) recordMember(req api.JoinRequest) *Error {
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
func (s *Server) caughtUp(ctx context.Context, req api.JoinRequest) bool {
	target := s.node.raft.CommitIndex()
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
