package membership

import (
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/replica"
)

// A node taken out of the configuration keeps running: raft on it stops
// campaigning (it is in no configuration it knows) and says nothing more.
// Membership notices it in the configuration it has applied, says so in
// the log once, and the node answers every call removed (not not_leader,
// which sends clients on to a leader that will not have this node back).

// removedError is the answer of a node that is no longer a member.
func removedError() *api.Error {
	return &api.Error{Code: api.CodeRemoved, Message: "this node was removed from the cluster and serves nothing: send the call to another node " +
		"(an operator stops it, or empties its data directory and starts it with --join to add it again)"}
}

// membershipLoop checks, every announce period (a second without one),
// whether this node is still in the configuration.
func (c *Cluster) membershipLoop() {
	defer c.wg.Done()
	every := c.cfg.AnnounceEvery
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		c.checkMembership()
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// checkMembership marks this node removed once a configuration it has
// seen itself in no longer has it. A node that was never a member in this
// process (one started to join, or catching up through configurations
// older than the one that added it) is not removed: it is not in yet.
func (c *Cluster) checkMembership() {
	servers, err := c.node.Configuration()
	if err != nil || len(servers) == 0 {
		return
	}
	in := false
	for _, srv := range servers {
		in = in || srv.ID == c.cfg.NodeID
	}
	switch {
	case in:
		c.member.Store(true)
		if c.removed.CompareAndSwap(true, false) {
			c.log.Info("this node is a member of the cluster again", "id", c.cfg.NodeID)
		}
	case c.member.Load() && c.removed.CompareAndSwap(false, true):
		c.log.Error("this node was removed from the cluster: it serves nothing and answers every call 'removed'; stop it, or empty its data directory and start it with --join to add it again",
			"id", c.cfg.NodeID, "members", memberIDs(servers))
	}
}

func memberIDs(servers []replica.Server) []string {
	out := make([]string, len(servers))
	for i, srv := range servers {
		out[i] = srv.ID
	}
	return out
}

// Removed reports whether this node has been removed from the cluster.
func (c *Cluster) Removed() bool { return c.removed.Load() }
