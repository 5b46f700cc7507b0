package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
)

// Validate reports what is wrong with c, naming the field; zero fields
// take their defaults (DefaultConfig) first. New calls it.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("server: config: "+format, args...))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
		{"SnapshotInterval", c.SnapshotInterval},
		{"ApplyTimeout", c.ApplyTimeout},
		{"MinTickInterval", c.MinTickInterval},
		{"JoinCatchUp", c.JoinCatchUp},
		{"ClockCheckpoint", c.ClockCheckpoint},
		{"FramedWriteTimeout", c.FramedWriteTimeout},
		{"FramedReadTimeout", c.FramedReadTimeout},
		{"FramedIdleTimeout", c.FramedIdleTimeout},
	} {
		if d.v < 0 {
			bad("%s is %v; it must not be negative (0 is the default)", d.name, d.v)
		}
	}
	if c.MaxConnections < 0 {
		bad("MaxConnections is %d; it must not be negative (0 is no cap)", c.MaxConnections)
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"MaxConnectionsPerAddr", int64(c.MaxConnectionsPerAddr)},
		{"FramedMaxInFlight", int64(c.FramedMaxInFlight)},
		{"FramedMaxPriorityInFlight", int64(c.FramedMaxPriorityInFlight)},
		{"FramedMaxPendingAnswerBytes", c.FramedMaxPendingAnswerBytes},
	} {
		if n.v < 0 {
			bad("%s is %d; it must not be negative (0 is the default)", n.name, n.v)
		}
	}
	for _, w := range []struct {
		name string
		v    int
	}{{"MaxWaitersPerKey", c.MaxWaitersPerKey}, {"MaxWaiters", c.MaxWaiters}} {
		if w.v < -1 || w.v > fsm.MaxWaitLimit {
			bad("%s is %d; it must be between 1 and %d (0 is the default, -1 no cap)", w.name, w.v, fsm.MaxWaitLimit)
		}
	}
	errs = append(errs, checkWatchConfig(c)...)
	if c.WALSegmentSize < 0 {
		bad("WALSegmentSize is %d; it must not be negative (0 is the default)", c.WALSegmentSize)
	}
	if c.TLS.Enabled() {
		if err := c.TLS.Check(); err != nil {
			bad("TLS: %v", err)
		}
		if c.RaftAddr != "" && c.Transport == nil && c.TLS.CAFile == "" {
			bad("TLS.CAFile is empty; raft over TLS needs the CA that signs the peers' certificates")
		}
	}
	d := c.withDefaults()
	if d.LeaderLeaseTimeout > d.HeartbeatTimeout {
		bad("LeaderLeaseTimeout (%v) is longer than HeartbeatTimeout (%v); raft needs it no longer", d.LeaderLeaseTimeout, d.HeartbeatTimeout)
	}
	if len(d.NodeID) > api.MaxNodeIDLen {
		bad("NodeID is %d bytes; the limit is %d", len(d.NodeID), api.MaxNodeIDLen)
	}
	if len(c.ClientAddr) > api.MaxAddrLen {
		bad("ClientAddr is %d bytes; the limit is %d", len(c.ClientAddr), api.MaxAddrLen)
	}
	if c.Join && len(c.Peers) > 0 {
		bad("Join and Peers are both set; a node either bootstraps with the peer list or waits to be joined")
	}
	if len(c.Peers) > 0 {
		self := false
		ids := map[string]bool{}
		for i, p := range c.Peers {
			switch {
			case p.ID == "":
				bad("Peers[%d] has no ID", i)
			case p.RaftAddr == "":
				bad("Peers[%d] (%s) has no RaftAddr", i, p.ID)
			case ids[p.ID]:
				bad("Peers names %s twice", p.ID)
			}
			ids[p.ID] = true
			self = self || p.ID == d.NodeID
		}
		if !self {
			bad("Peers does not name this node (NodeID %s)", d.NodeID)
		}
	}
	return errors.Join(errs...)
}
