package hashicorp

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Leader loss found on time, and the survivors' elections taken in turn.
//
// hashicorp/raft's follower does not time its leader out HeartbeatTimeout
// after the last contact: it looks at a timer armed afresh, for a random
// HeartbeatTimeout to twice that, each time the last one fired, so a dead
// leader is noticed anywhere from one to three HeartbeatTimeouts after it
// last spoke. And a voter refuses a (pre-)vote while it still has a
// leader, so the first survivor to notice is refused by the others and
// waits its own election timeout: the election is won by whoever notices
// second, or, when two notice together, lost by both to a split vote and
// run again an election timeout later. On a 3-node cluster that cost a
// kill of the leader 0.6–1.5 s before anyone was elected, and past 1.5 s
// after a split: more than a 2 s lease's keep-alive has
// (cmd/fencelock's TestFailoverProcessWorstPhase; docs/RELIABILITY.md).
//
// So each node keeps its own timing in turn. The voters other than the
// leader are ranked (by ID): the one of slot s times the leader out
// HeartbeatTimeout + s×stagger after its last contact, its raft's
// HeartbeatTimeout and ElectionTimeout set to that (ReloadConfig; the
// leader's are HeartbeatTimeout), and the watch below makes raft look the
// moment that time is up instead of at its timer's next firing. The
// survivors then notice one after another, a stagger apart: the first is
// refused (the others still have the leader), the second asks the first,
// which has given the leader up by then, and is elected — one round, at
// HeartbeatTimeout + stagger, with no split vote. A survivor whose log
// is behind the first's is refused by it; the first is elected at its
// own election timeout then, as before.
//
// Nothing here changes what raft decides: a node asks for votes only
// after HeartbeatTimeout without a word from its leader, as before, and
// pre-vote and the voters' leader check still keep a node cut off alone
// from disturbing the others.

// staggerOf is how far apart the slots are: long enough that the first
// survivor has given the leader up when the second's pre-vote arrives,
// though it ran late by a loaded machine's scheduling.
func staggerOf(heartbeat time.Duration) time.Duration { return heartbeat / 5 }

// slotOf is self's place among the voters other than leader, by ID; -1
// when self is not one of them (a non-voter, or the leader).
func slotOf(voters []raft.ServerID, leader, self raft.ServerID) int {
	others := slices.DeleteFunc(slices.Clone(voters), func(id raft.ServerID) bool { return id == leader })
	slices.Sort(others)
	return slices.Index(others, self)
}

// timingFor is a node's heartbeat timeout for slot (the leader's, and a
// non-voter's, is slot 0's).
func timingFor(heartbeat time.Duration, slot int) time.Duration {
	return heartbeat + time.Duration(max(slot, 0))*staggerOf(heartbeat)
}

// lossWatch is the watch's memory between looks.
type lossWatch struct {
	heartbeat time.Duration // the configured HeartbeatTimeout: slot 0's
	election  time.Duration // the configured ElectionTimeout: the least a slot's is
	timeout   time.Duration // the HeartbeatTimeout raft has now
	leader    raft.ServerID // the leader the timeout was set for
	poked     time.Time     // the last contact raft was made to look at
}

// look is one look at raft: what it sets, whether it makes raft look at
// its leader now (the poke), and when to look again.
type look struct {
	state   raft.RaftState
	leader  raft.ServerID
	contact time.Time // raft's last contact with a leader
	now     time.Time
	// slot is self's place for leader (slotOf); asked only when the
	// leader changed.
	slot func(leader raft.ServerID) int
}

// decision is what one look decides.
type decision struct {
	timeout time.Duration // the HeartbeatTimeout raft is to have; 0: leave it
	poke    bool          // make raft look at its leader now
	next    time.Duration // look again after this long
}

// decide is the watch's rule (tested without raft: failover_test.go).
func (w *lossWatch) decide(l look) decision {
	idle := w.heartbeat / 4
	var d decision
	set := func(t time.Duration) {
		if t != w.timeout {
			d.timeout, w.timeout = t, t
		}
	}
	switch {
	case l.state == raft.Leader:
		set(w.heartbeat)
		w.leader = ""
		d.next = idle
		return d
	case l.state != raft.Follower || l.leader == "":
		// No leader known (a first start, or a loss raft has noticed
		// already): raft's own timers run the election.
		d.next = idle
		return d
	}
	if l.leader != w.leader {
		w.leader = l.leader
		set(timingFor(w.heartbeat, l.slot(l.leader)))
	}
	due := l.contact.Add(w.timeout)
	if l.now.Before(due) {
		d.next = due.Sub(l.now)
		return d
	}
	if !l.contact.Equal(w.poked) {
		w.poked = l.contact
		d.poke = true
	}
	d.next = idle
	return d
}

// watchLeaderLoss runs the watch until the node closes.
func (n *Node) watchLeaderLoss() {
	defer n.wg.Done()
	w := &lossWatch{heartbeat: n.cfg.HeartbeatTimeout, election: n.cfg.ElectionTimeout, timeout: n.cfg.HeartbeatTimeout}
	self := raft.ServerID(n.cfg.NodeID)
	slot := func(leader raft.ServerID) int {
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			return -1
		}
		var voters []raft.ServerID
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters = append(voters, s.ID)
			}
		}
		return slotOf(voters, leader, self)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		_, leader := n.raft.LeaderWithID()
		d := w.decide(look{state: n.raft.State(), leader: leader, contact: n.raft.LastContact(), now: time.Now(), slot: slot})
		if d.timeout != 0 {
			n.setTimeout(d.timeout, w.election)
		}
		if d.poke {
			n.poke()
		}
		t.Reset(d.next)
	}
}

// setTimeout gives raft heartbeat as its HeartbeatTimeout, and as its
// ElectionTimeout unless election is longer (raft wants it no shorter).
func (n *Node) setTimeout(heartbeat, election time.Duration) {
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = heartbeat, max(election, heartbeat)
	_ = n.raft.ReloadConfig(rc) // only a config raft's own validation refuses fails; Open validated these
}

// poke makes a follower's raft compare its last contact with its
// HeartbeatTimeout now: raft does so at once whenever its
// HeartbeatTimeout is lowered, so the timeout is raised by a nanosecond
// and lowered back.
func (n *Node) poke() {
	rc := n.raft.ReloadableConfig()
	up := rc
	up.HeartbeatTimeout++
	up.ElectionTimeout = max(up.ElectionTimeout, up.HeartbeatTimeout)
	if n.raft.ReloadConfig(up) == nil {
		_ = n.raft.ReloadConfig(rc)
	}
}
