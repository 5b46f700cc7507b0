package service

import (
	"context"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
)

// The cluster calls. Membership (internal/membership) owns their logic:
// the probes, the quorum check, one change at a time, removed nodes. The
// service answers them as typed methods like its other operations, with
// its one error type.

// Identity answers who this node is, which cluster it belongs to ("" on
// a node no cluster has added yet) and how far it has applied the log.
func (s *Service) Identity(ctx context.Context) api.Identity { return s.cluster.Identity() }

// Members is this node's view of the configuration and of its own
// progress, with every member's health as the leader sees it.
func (s *Service) Members(ctx context.Context) (api.MembersResponse, error) {
	r, e := s.cluster.Members(ctx)
	return r, s.fail((*Error)(e))
}

// Join adds a node as a non-voter, checked first, and promotes it once it
// has caught up (membership.Cluster.Join). Only the leader does it.
func (s *Service) Join(ctx context.Context, req api.JoinRequest) (api.JoinResponse, error) {
	r, e := s.cluster.Join(ctx, req)
	return r, s.fail((*Error)(e))
}

// Announce records the client address of a node already in the
// configuration and changes no server.
func (s *Service) Announce(ctx context.Context, req api.JoinRequest) (api.JoinResponse, error) {
	r, e := s.cluster.Announce(ctx, req)
	return r, s.fail((*Error)(e))
}

// Remove takes a node out of the configuration, unless the voters left
// would have no reachable quorum; the leader asked to remove itself
// hands leadership over first and answers not_leader naming the new one.
func (s *Service) Remove(ctx context.Context, req api.RemoveRequest) (api.RemoveResponse, error) {
	r, e := s.cluster.Remove(ctx, req)
	return r, s.fail((*Error)(e))
}

// Removed reports whether this node has been removed from the cluster.
func (s *Service) Removed() bool { return s.cluster.Removed() }

// clusterSide is what membership asks of the service (membership.Service).
type clusterSide struct{ s *Service }

func (c clusterSide) Ready() bool                        { return c.s.Ready() }
func (c clusterSide) Writable() *api.Error               { return c.s.writable().Wire() }
func (c clusterSide) ProposalError(err error) *api.Error { return proposalError(err).Wire() }

func (c clusterSide) Propose(cmd fsm.Command) error {
	_, err := c.s.propose(cmd)
	return err
}
