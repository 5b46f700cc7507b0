package service

import (
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// ClusterTime is the cluster clock as this node runs it while it leads;
// false on a node that does not lead (its last applied time is
// FSM().Now()).
func (s *Service) ClusterTime() (locktable.Time, bool) { return s.clock.now() }

// ProposeForTest stamps cmd with cluster time and proposes it as it is,
// past every check of the operations: the tests of the packages built on
// the service plant entries with it (a waiter no request serves, a
// principal with a known secret). Nothing in the product calls it.
func (s *Service) ProposeForTest(cmd fsm.Command) (*fsm.Result, error) { return s.propose(cmd) }

// Waiters returns the holders queued on key, head first, as this node has
// applied them. It only reads; the client's test double (client/clienttest)
// uses it to wait for a request to have queued.
func (s *Service) Waiters(key string) []string { return s.fsm.Waiters(key) }
