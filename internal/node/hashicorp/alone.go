package hashicorp

import "github.com/hashicorp/raft"

// A lone voter stands for election at once. hashicorp/raft starts every
// node as a follower that waits a randomized heartbeat timeout (0.5–1 s
// by default) for a leader before it stands, even when its configuration
// names no other voter it could hear from; and it applies its log only
// as a leader, so a restart's replay, and with it the node's first
// write, waited for that timeout too (docs/BENCHMARKS.md, issue 45 item
// 5). A node that finds itself the only voter of its configuration when
// raft starts makes raft look for its leader at once (poke): there is
// none, so it stands. Its timeouts are left as configured, so every later
// election, once peers have joined, waits them as before. A node with
// peers, or with no configuration yet (one to be joined), waits as raft
// always did: its peers may have a leader it has yet to hear from.

// aloneVoter reports whether id is the only voter of c.
func aloneVoter(c raft.Configuration, id raft.ServerID) bool {
	voters, self := 0, false
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			voters++
			self = self || s.ID == id
		}
	}
	return voters == 1 && self
}

// standAlone pokes raft when this node is the only voter of its
// configuration, and reports whether it did. An error reading the
// configuration leaves raft to its timer, as before.
func (n *Node) standAlone() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil || !aloneVoter(f.Configuration(), raft.ServerID(n.cfg.NodeID)) {
		return false
	}
	n.poke()
	return true
}
