package service

// Replicated mode. One leader serves: a follower answers every write and
// every read with 503 not_leader naming the leader's client address (from
// the members table the leaders keep in the replicated state), and clients
// retry there. Reads on the leader are linearizable: VerifyLeader confirms
// with a quorum that no newer leader exists before the answer. Where the
// leader is, and what a node that cannot serve answers, membership knows
// (membership.Cluster.LeaderClientAddr, NotReady, Redirect).

// leaderClientAddr is the leader's client address, if this node knows it
// and hears from it.
func (s *Service) leaderClientAddr() string { return s.cluster.LeaderClientAddr() }

// notReady is the 503 for a node that cannot serve: removed, joining,
// not_leader (naming the leader when known), or a leader catching up.
func (s *Service) notReady() *Error { return (*Error)(s.cluster.NotReady()) }

// verifyLeader confirms with a quorum that this node still leads, so a
// read answered now is not a stale leader's.
func (s *Service) verifyLeader() *Error {
	if err := s.node.VerifyLeader(); err != nil {
		return s.notReady()
	}
	return nil
}
