package server

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/framing"
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
