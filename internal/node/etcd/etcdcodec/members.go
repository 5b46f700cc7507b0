package etcdcodec

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/hashicorp/raft"
	"go.etcd.io/raft/v3/raftpb"
)

// etcd names nodes by uint64, fencelock by string. ID derives one
// from the other the same way on every node (FNV-64a, never 0, which etcd
// reserves for "none"), so no table must be agreed on before two nodes
// can talk; the string and address of each id travel in the membership
// entries and in snapshots (Configuration).
func ID(nodeID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(nodeID))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// Configuration is cs as a raft.Configuration (what the snapshot
// store records and Configuration answers), naming each id from names
// (id → node ID and address). A joint configuration is refused: the
// engine changes one member at a time, so it never makes one.
func Configuration(cs *raftpb.ConfState, names map[uint64]node.Peer) (raft.Configuration, error) {
	if len(cs.GetVotersOutgoing()) > 0 || len(cs.GetLearnersNext()) > 0 {
		return raft.Configuration{}, fmt.Errorf("a joint configuration (%v)", cs)
	}
	var c raft.Configuration
	add := func(id uint64, s raft.ServerSuffrage) error {
		p, ok := names[id]
		if !ok {
			return fmt.Errorf("member %x has no name", id)
		}
		c.Servers = append(c.Servers, raft.Server{Suffrage: s, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		return nil
	}
	for _, id := range cs.GetVoters() {
		if err := add(id, raft.Voter); err != nil {
			return raft.Configuration{}, err
		}
	}
	for _, id := range cs.GetLearners() {
		if err := add(id, raft.Nonvoter); err != nil {
			return raft.Configuration{}, err
		}
	}
	return c, nil
}

// ConfState is the inverse of Configuration, with the names it
// carries.
func ConfState(c raft.Configuration) (*raftpb.ConfState, map[uint64]node.Peer) {
	cs := &raftpb.ConfState{}
	names := make(map[uint64]node.Peer, len(c.Servers))
	for _, s := range c.Servers {
		id := ID(string(s.ID))
		names[id] = node.Peer{ID: string(s.ID), RaftAddr: string(s.Address)}
		if s.Suffrage == raft.Voter {
			cs.Voters = append(cs.Voters, id)
		} else {
			cs.Learners = append(cs.Learners, id)
		}
	}
	return cs, names
}

// InConf says whether id is a voter or learner of cs (either side of a
// joint configuration), and whether cs names nobody.
func InConf(cs *raftpb.ConfState, id uint64) (member, empty bool) {
	empty = true
	for _, ids := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		empty = empty && len(ids) == 0
		member = member || slices.Contains(ids, id)
	}
	return member, empty
}
