package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/fencelock/fencelock/internal/fsm"
)

// Replicated mode. One leader serves: a follower answers every write and
// every read with 503 not_leader naming the leader's client address (from
// the members table the leaders keep in the replicated state), and clients
// retry there. Reads on the leader are linearizable: VerifyLeader confirms
// with a quorum that no newer leader exists before the answer.

// leaderClientAddr is the leader's client address, if this node knows it.
// A follower that has not heard from the leader for a heartbeat timeout
// names none: raft keeps naming a dead leader until an election starts,
// and sending clients there only makes them fail faster.
func (s *Server) leaderClientAddr() string {
	_, id := s.node.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	if s.node.raft.State() != raft.Leader && time.Since(s.node.raft.LastContact()) > s.cfg.HeartbeatTimeout {
		return ""
	}
	if m, ok := s.fsm.Member(string(id)); ok {
		return m.ClientAddr
	}
	return ""
}

// notReady is the 503 for a node that cannot serve: not_leader (naming the
// leader when known) unless this node leads and is still catching up.
func (s *Server) notReady() *apiError {
	if s.node.raft.State() == raft.Leader {
		return unavailable("not ready: this leader is catching up or has lost its quorum")
	}
	return s.notLeader(&apiError{Status: http.StatusServiceUnavailable, Code: codeNotLeader})
}

// notLeader completes a not_leader answer with where to go.
func (s *Server) notLeader(e *apiError) *apiError {
	addr := s.leaderClientAddr()
	if addr == s.cfg.ClientAddr {
		addr = "" // this node's view is stale; do not send the client in a loop
	}
	e.Leader = addr
	if addr != "" {
		e.Message = "this node is not the leader; the leader is at " + addr
	} else {
		e.Message = "this node is not the leader and knows no leader yet; retry"
	}
	return e
}

// verifyLeader confirms with a quorum that this node still leads, so a
// read answered now is not a stale leader's.
func (s *Server) verifyLeader() *apiError {
	if err := s.node.raft.VerifyLeader().Error(); err != nil {
		return s.notReady()
	}
	return nil
}

// recordSelf gives a cluster its identity if it has none yet (its first
// leader, or the first leader after an upgrade from a version without
// one), makes the raft configuration carry this node's current raft
// address (a single node restarted with --raft still has its old one) and
// the members table its client address, so followers can send clients
// here. Called by a new leader.
func (s *Server) recordSelf() error {
	if s.fsm.ClusterID() == "" {
		id, err := newClusterID()
		if err != nil {
			return err
		}
		if _, err := s.propose(fsm.Command{Op: fsm.OpClusterID, ClusterID: id}); err != nil {
			return err
		}
		s.log.Info("cluster identity", "cluster_id", s.fsm.ClusterID())
	}
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == s.cfg.NodeID && srv.Address != s.node.addr {
			s.log.Info("updating this node's raft address", "from", srv.Address, "to", s.node.addr)
			if err := s.node.raft.AddVoter(srv.ID, s.node.addr, 0, s.cfg.ApplyTimeout).Error(); err != nil {
				return err
			}
		}
	}
	if s.cfg.ClientAddr == "" {
		return nil
	}
	raftAddr := string(s.node.addr)
	if m, ok := s.fsm.Member(s.cfg.NodeID); ok && m.ClientAddr == s.cfg.ClientAddr && m.RaftAddr == raftAddr {
		return nil
	}
	_, err := s.propose(fsm.Command{Op: fsm.OpMember, NodeID: s.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: s.cfg.ClientAddr})
	return err
}

// newClusterID is 128 random bits in hex.
func newClusterID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("server: choosing a cluster id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Wire shapes of the cluster calls.
type memberJSON struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr,omitempty"`
	Suffrage   string `json:"suffrage"`
	Leader     bool   `json:"leader"`
}

type joinRequest struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
}

type removeRequest struct {
	ID string `json:"id"`
}

// identityJSON is GET /v1/cluster/identity: who this node is, which
// cluster it belongs to ("" on a node no cluster has added yet) and how
// far it has applied the log. A leader asks it of a node before adding it
// and of the members before a change (the strict reconfiguration check).
type identityJSON struct {
	Node         string `json:"node"`
	RaftAddr     string `json:"raft_addr"`
	ClientAddr   string `json:"client_addr"`
	ClusterID    string `json:"cluster_id"`
	AppliedIndex uint64 `json:"applied_index"`
	Raft         bool   `json:"raft"` // false: no raft transport (started without --raft)
}

func (s *Server) identity() identityJSON {
	applied := s.node.raft.AppliedIndex()
	if a := s.fsm.AppliedIndex(); a > applied {
		applied = a
	}
	return identityJSON{Node: s.cfg.NodeID, RaftAddr: string(s.node.addr), ClientAddr: s.cfg.ClientAddr,
		ClusterID: s.fsm.ClusterID(), AppliedIndex: applied, Raft: s.hasRaftTransport()}
}

// handleIdentity answers from this node's own state; any node answers.
func (s *Server) handleIdentity(w http.ResponseWriter, r *http.Request) *apiError {
	writeJSON(w, http.StatusOK, s.identity())
	return nil
}

// hasRaftTransport: other nodes can reach this one's raft. A node started
// without --raft runs on an in-memory transport that nobody can dial.
func (s *Server) hasRaftTransport() bool {
	return s.cfg.Transport != nil || s.cfg.RaftAddr != ""
}

// members is this node's view of the configuration.
func (s *Server) members() (map[string]any, *apiError) {
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, unavailable("reading the configuration: " + err.Error())
	}
	_, leader := s.node.raft.LeaderWithID()
	out := []memberJSON{}
	for _, srv := range f.Configuration().Servers {
		m := memberJSON{ID: string(srv.ID), RaftAddr: string(srv.Address), Suffrage: srv.Suffrage.String(),
			Leader: srv.ID == leader}
		if rec, ok := s.fsm.Member(string(srv.ID)); ok {
			m.ClientAddr = rec.ClientAddr
		}
		out = append(out, m)
	}
	// The answering node's own progress: its applied index and the
	// cluster time of its last applied entry (what a new leader resumes
	// from), so an operator can see a node catch up. ready is confirmed
	// with a quorum, so a deposed leader that has not noticed yet (say,
	// resumed after SIGSTOP) does not claim it.
	ready := s.Ready() && s.verifyLeader() == nil
	return map[string]any{
		"leader": string(leader), "leader_addr": s.leaderClientAddr(), "members": out,
		"node": s.cfg.NodeID, "ready": ready, "applied_index": s.fsm.AppliedIndex(),
		"applied_time_ms": int64(s.fsm.Now()) / int64(time.Millisecond), "cluster_id": s.fsm.ClusterID(),
	}, nil
}

// handleMembers answers from this node's view; any node answers.
func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) *apiError {
	m, e := s.members()
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

func checkNodeField(field, v string, limit int) *apiError {
	switch {
	case v == "":
		return invalid(field, "%s is required", field)
	case len(v) > limit:
		return invalid(field, "%s is %d bytes; the limit is %d", field, len(v), limit)
	}
	return nil
}

// The answers of a membership change. A refusal (409, one of the codes
// below) changed nothing. codeChangeUnknown (503) is a change raft took
// but could not confirm: it may or may not be in effect; `cluster
// members` tells. Every other answer is the usual not_leader/unavailable.
const (
	codeNoRaft          = "no_raft_transport" // this node cannot add nodes
	codeNodeUnreachable = "node_unreachable"  // the new node does not answer at its addresses
	codeWrongNode       = "wrong_node"        // it answers as another node or at another raft address
	codeWrongCluster    = "wrong_cluster"     // it belongs to another cluster
	codeNoQuorum        = "no_quorum"         // the new configuration would have no reachable quorum
	codeChangeUnknown   = "change_unknown"
)

func refused(code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusConflict, Code: code, Message: fmt.Sprintf(format, args...)}
}

// membership serialises the leader's membership changes: each one probes
// the cluster and then changes it, and two at once would count the same
// quorum twice.
type membership struct {
	mu sync.Mutex
}

// probeTimeout bounds each probe of a node; probes run in parallel.
const probeTimeout = 2 * time.Second

var probeClient = &http.Client{Timeout: probeTimeout}

// probe asks the node at a client address who it is.
func probe(ctx context.Context, clientAddr string) (identityJSON, error) {
	var id identityJSON
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+clientAddr+"/v1/cluster/identity", nil)
	if err != nil {
		return id, err
	}
	resp, err := probeClient.Do(req)
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
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// checkNewNode refuses a node that does not answer at the addresses given
// or that belongs to another cluster. It returns its identity.
func (s *Server) checkNewNode(ctx context.Context, req joinRequest) (identityJSON, *apiError) {
	id, err := probe(ctx, req.ClientAddr)
	if err != nil {
		return id, refused(codeNodeUnreachable, "refused, nothing changed: node %s does not answer at its client address %s (%v); start it first (fencelock server --join) and give the addresses it serves",
			req.ID, req.ClientAddr, err)
	}
	switch {
	case id.Node != req.ID:
		return id, refused(codeWrongNode, "refused, nothing changed: the server at %s is node %q, not %q", req.ClientAddr, id.Node, req.ID)
	case id.RaftAddr != req.RaftAddr:
		return id, refused(codeWrongNode, "refused, nothing changed: node %s has the raft address %s, not %s", req.ID, id.RaftAddr, req.RaftAddr)
	case !id.Raft:
		return id, refused(codeNoRaft, "refused, nothing changed: node %s has no raft transport; restart it with --raft %s and --join", req.ID, req.RaftAddr)
	case id.ClusterID != "" && id.ClusterID != s.fsm.ClusterID():
		return id, refused(codeWrongCluster, "refused, nothing changed: node %s belongs to another cluster (cluster id %s; this is %s): it already has state of its own; stop it, empty its data directory and start it with --join",
			req.ID, id.ClusterID, s.fsm.ClusterID())
	}
	if err := s.probeRaft(ctx, req.RaftAddr); err != nil {
		return id, refused(codeNodeUnreachable, "refused, nothing changed: node %s does not accept connections at its raft address %s (%v)", req.ID, req.RaftAddr, err)
	}
	return id, nil
}

// checkQuorum is the strict reconfiguration check: it refuses a change
// after which fewer than a majority of the voters would answer. voters is
// the voter set after the change; known marks those already known to be
// up (this node, a node just probed).
func (s *Server) checkQuorum(ctx context.Context, what string, voters []raft.Server, known map[raft.ServerID]bool) *apiError {
	if len(voters) == 0 {
		return refused(codeNoQuorum, "refused, nothing changed: %s would leave no voter", what)
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
			got, err := probe(ctx, addr)
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
		return refused(codeNoQuorum, "refused, nothing changed: after %s, %d of the %d voters would answer and a quorum is %d; not answering: %s",
			what, up, len(voters), need, strings.Join(down, ", "))
	}
	return nil
}

// changeError maps a failed configuration change: a node that was not
// leading changed nothing; any other failure may have taken effect.
func (s *Server) changeError(what string, err error) *apiError {
	if errors.Is(err, raft.ErrNotLeader) {
		return s.notReady()
	}
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeChangeUnknown,
		Message: fmt.Sprintf("%s: %v; it may or may not have been applied: check cluster members", what, err)}
}

// handleJoin adds a node: it must answer at the addresses given and
// belong to no cluster or this one; it is added as a non-voter, and
// promoted to voter once it has caught up with the log, if the new
// configuration has a reachable quorum. Only the leader does it.
func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) *apiError {
	return s.join(w, r, true)
}

// handleAnnounce records the client address of a node that is already in
// the configuration and changes no server: a node started from a static
// peer list announces itself this way, and a removed node cannot re-add
// itself.
func (s *Server) handleAnnounce(w http.ResponseWriter, r *http.Request) *apiError {
	return s.join(w, r, false)
}

func (s *Server) join(w http.ResponseWriter, r *http.Request, add bool) *apiError {
	var req joinRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	if e := firstErr(checkNodeField("id", req.ID, fsm.MaxNodeIDLen), checkNodeField("raft_addr", req.RaftAddr, fsm.MaxAddrLen),
		checkNodeField("client_addr", req.ClientAddr, fsm.MaxAddrLen)); e != nil {
		return e
	}
	if add && !s.hasRaftTransport() {
		return refused(codeNoRaft, "refused, nothing changed: this node has no raft transport (it was started without --raft), so no other node can reach it; restart it with --raft HOST:PORT (same --id and --data) before adding nodes")
	}
	if e := s.writable(); e != nil {
		return e
	}
	s.change.mu.Lock()
	defer s.change.mu.Unlock()
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return s.raftError(err)
	}
	var (
		cur    *raft.Server
		voters []raft.Server // the voters other than this node
	)
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == req.ID {
			cur = &srv
			continue
		}
		if srv.Suffrage == raft.Voter {
			voters = append(voters, srv)
		}
	}
	inPlace := cur != nil && string(cur.Address) == req.RaftAddr
	if !add {
		if !inPlace {
			return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no member " + req.ID + " at " + req.RaftAddr}
		}
		if e := s.recordMember(req); e != nil {
			return e
		}
		return s.answerJoin(w, req.ID, "")
	}
	if inPlace && cur.Suffrage == raft.Voter {
		// Already there: a retried join, or a node started with --join
		// confirming it. Record its client address if it changed.
		if e := s.recordMember(req); e != nil {
			return e
		}
		return s.answerJoin(w, req.ID, "")
	}
	ctx := r.Context()
	if _, e := s.checkNewNode(ctx, req); e != nil {
		return e
	}
	self := raft.ServerID(req.ID)
	after := append(voters, raft.Server{ID: self, Address: raft.ServerAddress(req.RaftAddr), Suffrage: raft.Voter})
	what := "adding " + req.ID + " as a voter"
	if e := s.checkQuorum(ctx, what, after, map[raft.ServerID]bool{self: true}); e != nil {
		return e
	}
	if !inPlace {
		// A new node, or a known one at a new raft address: as a
		// non-voter first, so that it counts for no quorum until it has
		// the log.
		if err := s.node.raft.AddNonvoter(self, raft.ServerAddress(req.RaftAddr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
			return s.changeError("adding "+req.ID+" as a non-voter", err)
		}
		s.log.Info("added a non-voter", "id", req.ID, "raft", req.RaftAddr, "client", req.ClientAddr)
	}
	if e := s.recordMember(req); e != nil {
		// The node is in the configuration; only its client address and
		// the promotion are missing: the same join sent again finishes.
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeChangeUnknown,
			Message: fmt.Sprintf("%s is in the configuration as a non-voter, but recording its client address failed (%s); send the same join again", req.ID, e.Message)}
	}
	if !s.caughtUp(ctx, req) {
		s.log.Warn("a joining node did not catch up; it stays a non-voter", "id", req.ID, "within", s.cfg.JoinCatchUp)
		return s.answerJoin(w, req.ID, fmt.Sprintf("%s joined as a non-voter but did not catch up with the log within %s; it is not promoted: run the same join again to promote it, or remove it",
			req.ID, s.cfg.JoinCatchUp))
	}
	// The quorum may have changed while it caught up.
	if e := s.checkQuorum(ctx, what, after, map[raft.ServerID]bool{self: true}); e != nil {
		e.Message = strings.Replace(e.Message, "refused, nothing changed", "refused to promote "+req.ID+", which stays a non-voter", 1)
		return e
	}
	if err := s.node.raft.AddVoter(self, raft.ServerAddress(req.RaftAddr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return s.changeError("promoting "+req.ID+" to voter", err)
	}
	s.log.Info("promoted to voter", "id", req.ID)
	return s.answerJoin(w, req.ID, "")
}

// recordMember records a node's client address in the replicated state.
func (s *Server) recordMember(req joinRequest) *apiError {
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
func (s *Server) caughtUp(ctx context.Context, req joinRequest) bool {
	target := s.node.raft.CommitIndex()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.JoinCatchUp)
	defer cancel()
	for {
		if id, err := probe(ctx, req.ClientAddr); err == nil && id.Node == req.ID && id.AppliedIndex >= target {
			return true
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return false
		}
	}
}

// answerJoin is the members answer plus the joined node's suffrage and,
// when it is not a voter, why.
func (s *Server) answerJoin(w http.ResponseWriter, id, note string) *apiError {
	m, e := s.members()
	if e != nil {
		return e
	}
	suffrage := ""
	for _, mem := range m["members"].([]memberJSON) {
		if mem.ID == id {
			suffrage = mem.Suffrage
		}
	}
	m["joined"] = map[string]string{"id": id, "suffrage": suffrage}
	if note != "" {
		m["message"] = note
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

// handleRemove takes a node out of the configuration and forgets its
// client address, unless the voters left would have no reachable quorum.
// Asked to remove itself, the leader hands leadership to another voter
// first and answers not_leader naming it: the new leader does the removal
// when the call is sent there (the CLI follows).
func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) *apiError {
	var req removeRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	if e := firstErr(checkNodeField("id", req.ID, fsm.MaxNodeIDLen), s.writable()); e != nil {
		return e
	}
	s.change.mu.Lock()
	defer s.change.mu.Unlock()
	f := s.node.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return s.raftError(err)
	}
	var (
		target *raft.Server
		after  []raft.Server
	)
	for _, srv := range f.Configuration().Servers {
		switch {
		case string(srv.ID) == req.ID:
			target = &srv
		case srv.Suffrage == raft.Voter:
			after = append(after, srv)
		}
	}
	if target == nil {
		return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no member with id " + req.ID}
	}
	ctx := r.Context()
	if target.Suffrage == raft.Voter {
		if e := s.checkQuorum(ctx, "removing "+req.ID, after, nil); e != nil {
			return e
		}
	}
	if req.ID == s.cfg.NodeID {
		return s.handOver(ctx, req.ID)
	}
	if err := s.node.raft.RemoveServer(raft.ServerID(req.ID), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return s.changeError("removing "+req.ID, err)
	}
	if _, err := s.propose(fsm.Command{Op: fsm.OpMember, NodeID: req.ID}); err != nil {
		// The node is out; only its client address is left behind.
		s.log.Warn("forgetting a removed node's client address failed", "id", req.ID, "err", err)
	}
	s.log.Info("removed a node", "id", req.ID, "suffrage", target.Suffrage.String())
	writeJSON(w, http.StatusOK, map[string]any{"removed": req.ID})
	return nil
}

// handOver transfers leadership away before this node is removed and
// answers not_leader naming the new leader once it is known.
func (s *Server) handOver(ctx context.Context, id string) *apiError {
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
	e := s.notLeader(&apiError{Status: http.StatusServiceUnavailable, Code: codeNotLeader})
	e.Message = "leadership handed over before removing " + id + "; send the removal to the new leader"
	if e.Leader != "" {
		e.Message += " at " + e.Leader
	}
	return e
}

func (s *Server) raftError(err error) *apiError {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return s.notReady()
	}
	return unavailable(err.Error())
}

// announceLoop runs on every node with a client address: while this node
// follows and the members table lacks its current client address, it asks
// the leader to record it, so every node's address is known however the
// cluster was formed.
func (s *Server) announceLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	t := time.NewTicker(s.cfg.HeartbeatTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.node.raft.State() != raft.Follower {
			continue
		}
		raftAddr := string(s.node.addr)
		if m, ok := s.fsm.Member(s.cfg.NodeID); ok && m.ClientAddr == s.cfg.ClientAddr && m.RaftAddr == raftAddr {
			continue
		}
		leader := s.leaderClientAddr()
		if leader == "" {
			continue
		}
		body, _ := json.Marshal(joinRequest{ID: s.cfg.NodeID, RaftAddr: raftAddr, ClientAddr: s.cfg.ClientAddr})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+leader+"/v1/cluster/announce", bytes.NewReader(body))
		if err != nil {
			continue
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		// Whatever the answer, the next tick looks at the members table.
	}
}
