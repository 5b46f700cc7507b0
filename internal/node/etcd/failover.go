package etcd

import (
	"slices"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// A lost leader replaced in one round, at a fixed point of the election
// timeout.
//
// etcd raft's follower campaigns once it has heard nothing from its
// leader for a random one to two election timeouts, and with CheckQuorum
// a voter ignores pre-votes for one election timeout after it last heard
// the leader. The survivors of a dead leader therefore wait 1–2 election
// timeouts; the first to campaign is often ignored by a voter whose ticks
// run a little behind its own, and two that campaign within a message's
// round trip split the vote and wait again: a kill of the leader cost up
// to 1.4 s before anyone was elected on a 3-node cluster, more than a 2 s
// lease's keep-alive has (cmd/fencelock's TestFailoverProcessWorstPhase).
//
// So, counted in ticks since the last message from a leader: at 0.6 of
// an election timeout a follower forgets its leader (raft's ForgetLeader:
// a leaderless follower grants a pre-vote at once, and takes its leader
// back at its next message), and the voters other than the lost leader
// campaign in turn, ranked by member id, slot s at campaignTick +
// s×campaignStagger ticks. Slot 0 campaigns at 0.8 of an election
// timeout and finds the others leaderless: elected in one round. If its
// log is behind another survivor's, or its messages are lost, that one
// campaigns next (at one election timeout, as early as raft's own timer
// could) and is elected. Raft's own randomized campaigns remain the
// fallback.
//
// A follower that is only cut off from the leader is no threat: the
// voters that still hear the leader have not forgotten it and ignore its
// pre-votes (CheckQuorum's lease), as before.

const (
	forgetTick      = etcdElectionTick * 6 / 10
	campaignTick    = etcdElectionTick * 8 / 10
	campaignStagger = etcdElectionTick / 5
)

// failoverSlot is self's place among voters other than lost, by member
// id; -1 when self is not one of them.
func failoverSlot(voters []uint64, lost, self uint64) int {
	others := slices.DeleteFunc(slices.Clone(voters), func(id uint64) bool { return id == lost })
	slices.Sort(others)
	return slices.Index(others, self)
}

// failoverStep is what a follower does at the tick that makes quiet
// ticks without a word from a leader, in slot (failoverSlot; -1: none),
// while it still has a leader (led) or not: forget it, or campaign.
func failoverStep(quiet int, led bool, slot int) (forget, campaign bool) {
	switch {
	case quiet == forgetTick:
		return led, false
	case led || slot < 0:
		return false, false
	}
	return false, quiet == campaignTick+slot*campaignStagger
}

// tickRaft advances raft's clock by one tick, then forgets a silent
// leader or campaigns in turn (above). Only run, or a stepped node's
// driver (Stepped.Tick), calls it.
func (c *core) tickRaft() {
	c.rn.Tick()
	st := etcdraft.StateType(c.state.Load())
	if st == etcdraft.StateLeader {
		c.quiet = 0
		return
	}
	if st == etcdraft.StateFollower && c.leadID.Load() == 0 && etcdAlone(c.conf.Load(), c.self) {
		// The only voter has no leader to wait for: it stands at once,
		// not after raft's randomized election timeout (0.5–1 s here),
		// which a restart's replay waited for (the log's commit index on
		// disk lags: the replay runs once this node commits as leader).
		_ = c.rn.Campaign()
		return
	}
	c.quiet++
	if c.quiet < forgetTick {
		return
	}
	slot := -1
	if cs := c.conf.Load(); cs != nil {
		slot = failoverSlot(cs.GetVoters(), c.lastLead.Load(), c.self)
	}
	forget, campaign := failoverStep(c.quiet, c.leadID.Load() != 0, slot)
	if forget {
		_ = c.rn.ForgetLeader() // refused only under ReadOnlyLeaseBased, which this core does not use
	}
	if campaign {
		_ = c.rn.Campaign() // an error is a campaign raft declines: its own timer tries later
	}
}

// etcdAlone reports whether self is the only voter of cs.
func etcdAlone(cs *raftpb.ConfState, self uint64) bool {
	v := cs.GetVoters()
	return len(v) == 1 && v[0] == self && len(cs.GetVotersOutgoing()) == 0
}

// heardLeader notes a message of a leader of this term or a later one.
func (c *core) heardLeader(term uint64) {
	if term >= c.term.Load() {
		c.quiet = 0
	}
}
