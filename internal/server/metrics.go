package server

import (
	"math"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/replica"
)

// framedCollectors are the framed connections' metrics, read from the
// framing server's own accounting.
func framedCollectors(fs *framing.Server) []prometheus.Collector {
	gauge := func(name, help string, v func(framing.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(fs.Stats()) })
	}
	closed := func(reason string, v func(framing.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencelock_framed_connections_closed_total", Help: "Framed connections the server closed for a limit, by reason.",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(v(fs.Stats())) })
	}
	return []prometheus.Collector{
		gauge("fencelock_framed_connections", "Framed client connections being served.",
			func(st framing.Stats) float64 { return float64(st.Conns) }),
		gauge("fencelock_framed_in_flight", "Framed requests read whose answers are not yet written.",
			func(st framing.Stats) float64 { return float64(st.InFlight) }),
		gauge("fencelock_framed_pending_answer_bytes", "Bytes of framed answers ready but not yet written, over all connections.",
			func(st framing.Stats) float64 { return float64(st.PendingAnswerBytes) }),
		gauge("fencelock_framed_peak_connection_pending_answer_bytes", "The most answer bytes any one framed connection has had pending.",
			func(st framing.Stats) float64 { return float64(st.PeakConnPendingAnswerBytes) }),
		closed("write_timeout", func(st framing.Stats) int64 { return st.WriteTimeouts }),
		closed("read_timeout", func(st framing.Stats) int64 { return st.ReadTimeouts }),
		closed("idle", func(st framing.Stats) int64 { return st.IdleTimeouts }),
		closed("stalled", func(st framing.Stats) int64 { return st.Stalls }),
		closed("frame_too_large", func(st framing.Stats) int64 { return st.FramesTooLarge }),
		closed("address_buffer_cap", func(st framing.Stats) int64 { return st.AddrBufferCloses }),
		closed("unauthenticated_idle", func(st framing.Stats) int64 { return st.UnauthenticatedIdle }),
		gauge("fencelock_framed_buffered_bytes", "Bytes of framed requests being read (declared, not yet complete), over all connections.",
			func(st framing.Stats) float64 { return float64(st.BufferedBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencelock_framed_binary_calls_total",
			Help: "Hot calls (acquire, extend, release, check) answered in the binary encoding on framed connections rather than as JSON.",
		}, func() float64 { return float64(fs.Stats().BinaryCalls) }),
	}
}

// buildInfo is fencelock_build_info{version,commit,goversion} 1.
func buildInfo(version, commit string) prometheus.Collector {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" {
			version = bi.Main.Version
		}
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" && commit == "" {
				commit = st.Value
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencelock_build_info", Help: "1, labelled with the version, commit and Go version the binary was built from.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// peerCollector is the leader's view of every other member, by peer:
// fencelock_peer_last_contact_seconds (+Inf for a peer it has never heard
// from) and fencelock_peer_lag_entries. A node that does not lead has no
// series: only the leader hears from every peer.
type peerCollector struct {
	peers        func() ([]replica.PeerStatus, bool)
	contact, lag *prometheus.Desc
	unreachable  *prometheus.Desc
}

func newPeerCollector(n replica.Membership) *peerCollector {
	return &peerCollector{
		peers: n.Peers,
		contact: prometheus.NewDesc("fencelock_peer_last_contact_seconds",
			"On the leader: seconds since each peer last answered it (+Inf: never since it started).", []string{"peer"}, nil),
		lag: prometheus.NewDesc("fencelock_peer_lag_entries",
			"On the leader: log entries each peer was behind the leader's last when it last answered.", []string{"peer"}, nil),
		unreachable: prometheus.NewDesc("fencelock_peer_unreachable",
			"On the leader: 1 for a peer it has not heard from for longer than twice the heartbeat timeout, else 0.", []string{"peer"}, nil),
	}
}

func (c *peerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.contact
	ch <- c.lag
	ch <- c.unreachable
}

func (c *peerCollector) Collect(ch chan<- prometheus.Metric) {
	peers, ok := c.peers()
	if !ok {
		return
	}
	for _, p := range peers {
		last := math.Inf(1)
		if p.Contacted {
			last = p.LastContact.Seconds()
		}
		if p.LagKnown {
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(p.Lag), p.ID)
		}
		ch <- prometheus.MustNewConstMetric(c.contact, prometheus.GaugeValue, last, p.ID)
		down := 0.0
		if p.State == replica.PeerUnreachable {
			down = 1
		}
		ch <- prometheus.MustNewConstMetric(c.unreachable, prometheus.GaugeValue, down, p.ID)
	}
}

// guardCollectors count the calls the ACLs are watched for.
func guardCollectors(g *auth.Guard) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_acl_calls_running", Help: "Calls with a principal running now on this node (waits, watches and streams among them), checked again whenever the ACLs change.",
		}, func() float64 { return float64(g.Live()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencelock_acl_revoked_calls_total", Help: "Running calls ended because a change of the ACLs revoked their token or their permission.",
		}, func() float64 { return float64(g.Revoked()) }),
	}
}
