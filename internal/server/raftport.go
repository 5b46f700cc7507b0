package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/internal/node/raftport"
)

// raftPortCollectors are the raft port's metrics, read from the node's
// own accounting (raftport.Stats): the port's budgets are its own,
// apart from the client port's connection caps.
func raftPortCollectors(n interface{ RaftPortStats() raftport.Stats }) []prometheus.Collector {
	gauge := func(name, help string, v func(raftport.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(n.RaftPortStats()) })
	}
	refused := func(reason string, v func(raftport.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "fencelock_raft_connections_refused_total",
			Help:        "Raft port connections closed by reason: at the connection cap; with the handshake budget spent (the oldest handshake of the busiest address, to make room); refused at the handshake (no proof of the cluster secret or another's, no certificate or another CA's or secret's, a client certificate, a node of no member, a timeout); or cut in the middle of a message (a declared length above the engine's bounds, a message holding too much, one not sent in time).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(v(n.RaftPortStats())) })
	}
	return []prometheus.Collector{
		gauge("fencelock_raft_connections_open", "Accepted raft port connections raft holds now.",
			func(st raftport.Stats) float64 { return float64(st.Open) }),
		gauge("fencelock_raft_handshakes_in_progress", "Handshakes in progress on the raft port (the proof of the cluster secret, then TLS).",
			func(st raftport.Stats) float64 { return float64(st.Handshaking) }),
		gauge("fencelock_raft_connections_max", "The cap on accepted raft port connections (0: no raft port).",
			func(st raftport.Stats) float64 { return float64(st.Limits.MaxConns) }),
		gauge("fencelock_raft_handshakes_max", "The cap on handshakes in progress on the raft port (0: no raft port).",
			func(st raftport.Stats) float64 { return float64(st.Limits.MaxHandshakes) }),
		refused("connection_cap", func(st raftport.Stats) int64 { return st.RefusedConns }),
		refused("handshake_budget", func(st raftport.Stats) int64 { return st.Evicted }),
		refused("handshake", func(st raftport.Stats) int64 { return st.HandshakesRefused }),
		refused("message", func(st raftport.Stats) int64 { return st.MessagesCut }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencelock_raft_messages_refused_total",
			Help: "Raft messages from peers read whole and dropped before raft took them: a term above 2^62 or more than a bounded step ahead of this node's, a term inside a message above its own, a snapshot this node could not install.",
		}, func() float64 { return float64(n.RaftPortStats().MessagesRefused) }),
	}
}
