package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// The changes: only the leader makes them, one at a time, each after it
// has probed the joining node and the voters (doc.go).

// Join adds a node: it must answer at the addresses given and belong to
// no cluster or this one; it is added as a non-voter, and promoted to
// voter once it has caught up with the log, if the new configuration has
// a reachable quorum. A known node at a new raft address is added again
// there the same way. Only the leader does it.
func (c *Cluster) Join(ctx context.Context, req api.JoinRequest) (api.JoinResponse, *api.Error) {
	return c.join(ctx, req, true)
}

// Announce records the client address of a node that is already in the
// configuration and changes no server: a node started from a static peer
// list announces itself this way, and a removed node cannot re-add
// itself.
func (c *Cluster) Announce(ctx context.Context, req api.JoinRequest) (api.JoinResponse, *api.Error) {
	return c.join(ctx, req, false)
}

func (c *Cluster) join(ctx context.Context, req api.JoinRequest, add bool) (api.JoinResponse, *api.Error) {
	var none api.JoinResponse
	if e := firstErr(checkNodeField("id", req.ID, api.MaxNodeIDLen), checkNodeField("raft_addr", req.RaftAddr, api.MaxAddrLen),
		checkClientAddr(req.ClientAddr)); e != nil {
		return none, e
	}
	if add && !c.node.Dialable() {
		return none, refused(api.CodeNoRaft, "refused, nothing changed: this node has no raft transport (it was started without --raft), so no other node can reach it; restart it with --raft HOST:PORT (same --id and --data) before adding nodes")
	}
	if e := c.svc.Writable(); e != nil {
		return none, e
	}
	c.change <- struct{}{}
	defer func() { <-c.change }()
	servers, err := c.node.Configuration()
	if err != nil {
		return none, c.raftError(err)
	}
	var (
		cur    *replica.Server
		voters []replica.Server // the voters other than this node
	)
	for _, srv := range servers {
		if srv.ID == req.ID {
			cur = &srv
			continue
		}
		if srv.Voter {
			voters = append(voters, srv)
		}
	}
	inPlace := cur != nil && cur.Addr == req.RaftAddr
	if !add {
		if !inPlace {
			return none, newError(api.CodeNotFound, "no member %s at %s", req.ID, req.RaftAddr)
		}
		if e := c.recordMember(req); e != nil {
			return none, e
		}
		return c.answerJoin(ctx, req.ID, "")
	}
	if inPlace && cur.Voter {
		// Already there: a retried join, or a node started with --join
		// confirming it. Record its client address if it changed.
		if e := c.recordMember(req); e != nil {
			return none, e
		}
		return c.answerJoin(ctx, req.ID, "")
	}
	if _, e := c.checkNewNode(ctx, req); e != nil {
		return none, e
	}
	self := req.ID
	after := append(voters, replica.Server{ID: self, Addr: req.RaftAddr, Voter: true})
	what := "adding " + req.ID + " as a voter"
	if e := c.checkQuorum(ctx, what, after, map[string]bool{self: true}); e != nil {
		return none, e
	}
	if !inPlace {
		// A new node, or a known one at a new raft address: as a
		// non-voter first, so that it counts for no quorum until it has
		// the log.
		if err := c.node.AddNonvoter(self, req.RaftAddr, c.cfg.ApplyTimeout); err != nil {
			return none, c.changeError("adding "+req.ID+" as a non-voter", err)
		}
		c.log.Info("added a non-voter", "id", req.ID, "raft", req.RaftAddr, "client", req.ClientAddr)
	}
	if e := c.recordMember(req); e != nil {
		// The node is in the configuration; only its client address and
		// the promotion are missing: the same join sent again finishes.
		return none, newError(api.CodeChangeUnknown, "%s is in the configuration as a non-voter, but recording its client address failed (%s); send the same join again",
			req.ID, e.Message)
	}
	if !c.caughtUp(ctx, req) {
		c.log.Warn("a joining node did not catch up; it stays a non-voter", "id", req.ID, "within", c.cfg.JoinCatchUp)
		return c.answerJoin(ctx, req.ID, fmt.Sprintf("%s joined as a non-voter but did not catch up with the log within %s; it is not promoted: run the same join again to promote it, or remove it",
			req.ID, c.cfg.JoinCatchUp))
	}
	// The quorum may have changed while it caught up.
	if e := c.checkQuorum(ctx, what, after, map[string]bool{self: true}); e != nil {
		e.Message = strings.Replace(e.Message, "refused, nothing changed", "refused to promote "+req.ID+", which stays a non-voter", 1)
		return none, e
	}
	if err := c.node.AddVoter(self, req.RaftAddr, c.cfg.ApplyTimeout); err != nil {
		return none, c.changeError("promoting "+req.ID+" to voter", err)
	}
	c.log.Info("promoted to voter", "id", req.ID)
	return c.answerJoin(ctx, req.ID, "")
}

// answerJoin is the members answer plus the joined node's suffrage and,
// when it is not a voter, why.
func (c *Cluster) answerJoin(ctx context.Context, id, note string) (api.JoinResponse, *api.Error) {
	m, e := c.Members(ctx)
	if e != nil {
		return api.JoinResponse{}, e
	}
	out := api.JoinResponse{MembersResponse: m, Joined: api.Joined{ID: id}, Message: note}
	for _, mem := range m.Members {
		if mem.ID == id {
			out.Joined.Suffrage = mem.Suffrage
		}
	}
	return out, nil
}

// Remove takes a node out of the configuration and forgets its client
// address, unless the voters left would have no reachable quorum. Asked
// to remove itself, the leader hands leadership to another voter first
// and answers not_leader naming it: the new leader does the removal when
// the call is sent there (the CLI follows).
func (c *Cluster) Remove(ctx context.Context, req api.RemoveRequest) (api.RemoveResponse, *api.Error) {
	var none api.RemoveResponse
	if e := firstErr(checkNodeField("id", req.ID, api.MaxNodeIDLen), c.svc.Writable()); e != nil {
		return none, e
	}
	c.change <- struct{}{}
	defer func() { <-c.change }()
	servers, err := c.node.Configuration()
	if err != nil {
		return none, c.raftError(err)
	}
	var (
		target *replica.Server
		after  []replica.Server
	)
	for _, srv := range servers {
		switch {
		case srv.ID == req.ID:
			target = &srv
		case srv.Voter:
			after = append(after, srv)
		}
	}
	if target == nil {
		return none, newError(api.CodeNotFound, "no member with id %s", req.ID)
	}
	if target.Voter {
		if e := c.checkQuorum(ctx, "removing "+req.ID, after, nil); e != nil {
			return none, e
		}
	}
	if req.ID == c.cfg.NodeID {
		return none, c.handOver(ctx, req.ID)
	}
	if err := c.node.RemoveServer(req.ID, c.cfg.ApplyTimeout); err != nil {
		return none, c.changeError("removing "+req.ID, err)
	}
	if err := c.svc.Propose(fsm.Command{Op: fsm.OpMember, NodeID: req.ID}); err != nil {
		// The node is out; only its client address is left behind.
		c.log.Warn("forgetting a removed node's client address failed", "id", req.ID, "err", err)
	}
	c.log.Info("removed a node", "id", req.ID, "suffrage", target.Suffrage)
	return api.RemoveResponse{Removed: req.ID}, nil
}

// probeTimeout bounds each probe of a node; probes run in parallel.
const probeTimeout = 2 * time.Second

var errNoPeers = errors.New("this node has no client for other nodes' ports")

// probe asks the node at a client address who it is.
func (c *Cluster) probe(ctx context.Context, clientAddr string) (api.Identity, error) {
	if c.cfg.Peers == nil {
		return api.Identity{}, errNoPeers
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return c.cfg.Peers.Identity(ctx, clientAddr)
}

// checkNewNode refuses a node that does not answer at the addresses given
// or that belongs to another cluster. It returns its identity.
func (c *Cluster) checkNewNode(ctx context.Context, req api.JoinRequest) (api.Identity, *api.Error) {
	id, err := c.probe(ctx, req.ClientAddr)
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
	case id.ClusterID != "" && id.ClusterID != c.fsm.ClusterID():
		return id, refused(api.CodeWrongCluster, "refused, nothing changed: node %s belongs to another cluster (cluster id %s; this is %s): it already has state of its own; stop it, empty its data directory and start it with --join",
			req.ID, id.ClusterID, c.fsm.ClusterID())
	case id.Engine != "" && c.cfg.Engine != "" && id.Engine != c.cfg.Engine:
		// Their raft ports speak different protocols: added, it would
		// never catch up, and the leader would log its refusals.
		return id, refused(api.CodeWrongEngine, "refused, nothing changed: node %s runs the %s replication engine and this cluster runs %s; they speak different raft protocols: restart it with --engine %s (and an empty data directory) and --join",
			req.ID, id.Engine, c.cfg.Engine, c.cfg.Engine)
	}
	if err := c.node.ProbeRaft(ctx, req.ID, req.RaftAddr, probeTimeout); err != nil {
		return id, refused(api.CodeNodeUnreachable, "refused, nothing changed: node %s does not accept connections at its raft address %s (%v)", req.ID, req.RaftAddr, err)
	}
	return id, nil
}

// checkQuorum is the strict reconfiguration check: it refuses a change
// after which fewer than a majority of the voters would answer. voters is
// the voter set after the change; known marks those already known to be
// up (this node, a node just probed).
func (c *Cluster) checkQuorum(ctx context.Context, what string, voters []replica.Server, known map[string]bool) *api.Error {
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
		if known[v.ID] || v.ID == c.cfg.NodeID {
			mu.Lock()
			up++
			mu.Unlock()
			continue
		}
		m, ok := c.fsm.Member(v.ID)
		if !ok || m.ClientAddr == "" {
			mu.Lock()
			down = append(down, v.ID+" (client address unknown)")
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(id, addr string) {
			defer wg.Done()
			got, err := c.probe(ctx, addr)
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
func (c *Cluster) changeError(what string, err error) *api.Error {
	if errors.Is(err, replica.ErrNotLeader) {
		return c.NotReady()
	}
	return &api.Error{Code: api.CodeChangeUnknown,
		Message: fmt.Sprintf("%s: %v; it may or may not have been applied: check cluster members", what, err)}
}

// handOver transfers leadership away before this node is removed and
// answers not_leader naming the new leader once it is known.
func (c *Cluster) handOver(ctx context.Context, id string) *api.Error {
	if err := c.node.TransferLeadership(); err != nil {
		return unavailable(fmt.Sprintf("removing the leader %s: handing leadership over failed (%v); nothing changed", id, err))
	}
	c.log.Info("handed leadership over before being removed", "id", id)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for c.LeaderClientAddr() == "" || c.LeaderClientAddr() == c.cfg.ClientAddr {
		if !sleepCtx(ctx, 20*time.Millisecond) {
			break
		}
	}
	e := c.notLeader(&api.Error{Code: api.CodeNotLeader})
	e.Message = "leadership handed over before removing " + id + "; send the removal to the new leader"
	if e.Leader != "" {
		e.Message += " at " + e.Leader
	}
	return e
}

func (c *Cluster) raftError(err error) *api.Error {
	if errors.Is(err, replica.ErrNotLeader) {
		return c.NotReady()
	}
	return unavailable(err.Error())
}

// recordMember records a node's client address in the replicated state.
func (c *Cluster) recordMember(req api.JoinRequest) *api.Error {
	if m, ok := c.fsm.Member(req.ID); ok && m.RaftAddr == req.RaftAddr && m.ClientAddr == req.ClientAddr {
		return nil
	}
	if err := c.svc.Propose(fsm.Command{Op: fsm.OpMember, NodeID: req.ID, RaftAddr: req.RaftAddr, ClientAddr: req.ClientAddr}); err != nil {
		return c.svc.ProposalError(err)
	}
	c.log.Info("recorded a member's client address", "id", req.ID, "client", req.ClientAddr)
	return nil
}

// caughtUp waits, bounded by JoinCatchUp, until the node has applied the
// log up to this leader's commit index as it is now.
func (c *Cluster) caughtUp(ctx context.Context, req api.JoinRequest) bool {
	target := c.node.CommitIndex()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JoinCatchUp)
	defer cancel()
	for {
		if id, err := c.probe(ctx, req.ClientAddr); err == nil && id.Node == req.ID && id.AppliedIndex >= target {
			return true
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return false
		}
	}
}

func checkNodeField(field, v string, limit int) *api.Error {
	switch {
	case v == "":
		return invalid(field, "%s is required", field)
	case len(v) > limit:
		return invalid(field, "%s is %d bytes; the limit is %d", field, len(v), limit)
	}
	return nil
}

// checkClientAddr refuses a client address that is not host:port: a
// name or an IP address and a port from 1 to 65535. The members table
// hands it to clients and to the dashboard as a link to the leader, so
// it must not be any string a caller chose.
func checkClientAddr(addr string) *api.Error {
	if e := checkNodeField("client_addr", addr, api.MaxAddrLen); e != nil {
		return e
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return invalid("client_addr", "client_addr %q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return invalid("client_addr", "client_addr %q: the port must be a number from 1 to 65535", addr)
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if host == "" {
		return invalid("client_addr", "client_addr %q has no host", addr)
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for i := 0; ok && i < len(label); i++ {
			b := label[i]
			ok = b == '-' || b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
		}
		if !ok {
			return invalid("client_addr", "client_addr %q: the host must be an IP address or a DNS name", addr)
		}
	}
	return nil
}

func firstErr(errs ...*api.Error) *api.Error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
