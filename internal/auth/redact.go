package auth

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/service/servicemetrics"
)

// Redaction: what an answer that spans many keys shows a caller who may
// read only some of them. The rule is least information: such a caller
// is shown no more than it could have read key by key. An item about one
// key (a lease of a list or an overview, a session's key, a watch event)
// is kept only if the caller may read that key; a figure that sums keys
// (a series counted by key prefix, the table's last token, queue length
// and counters) only if it may read every key the figure sums, else it
// is left out or zeroed, never cut down to the part the caller may read
// (a figure with a deny under it would tell what the deny hides). A call
// with no principal (ACLs off, an open route, an in-process caller) is
// shown everything.
//
// The route checked the caller's verb on the prefix before the call ran;
// these rules only narrow what a prefix the caller may read can still
// hold (keys under a longer deny), judged against the tables as they are
// when the answer is made.

// RedactList is l as ctx's caller may see it: only the leases on keys it
// may read.
func RedactList(ctx context.Context, l api.ListResponse) api.ListResponse {
	if vis := visible(ctx); vis != nil {
		l.Locks = readable(vis, l.Locks, func(x api.Lease) string { return x.Key })
	}
	return l
}

// RedactOverview is o as ctx's caller may see it: the leases on keys it
// may read, the sessions they are held under with only those keys (and
// counting only them), and the whole table's figures (last token, queued,
// sessions open, counters and histograms) only if it may read every key; else those are
// zeros and StatsHidden is set.
func RedactOverview(ctx context.Context, o api.Overview) api.Overview {
	if vis := visible(ctx); vis != nil {
		o.Locks = readable(vis, o.Locks, func(l api.LockOverview) string { return l.Key })
		o.Delayed = readable(vis, o.Delayed, func(d api.DelayedKey) string { return d.Key })
		o.Sessions = readableSessions(vis, o.Locks, o.Sessions)
	}
	if reads := readsAll(ctx); reads != nil && !reads("") {
		hideTableFigures(&o)
	}
	return o
}

// RedactMetrics is the gatherer whose series ctx's caller may see, and
// whether it differs from g: a series counted by key prefix only if the
// caller may read every key under that prefix, the "other" series (the
// prefixes past the counted ones, which it cannot know) only if it may
// read every key; the figures that sum the whole table (keyFree says
// which count no keys) only if it may read every key, as an overview's;
// the series that count no keys are shown to every principal. Without a
// principal, or without g, it is g, unredacted.
func RedactMetrics(ctx context.Context, g prometheus.Gatherer) (prometheus.Gatherer, bool) {
	reads := readsAll(ctx)
	if reads == nil || g == nil {
		return g, false
	}
	all := reads("")
	return metricsFilter{g: g,
		family: func(name string) bool { return all || keyFree(name) },
		prefix: func(prefix string) bool {
			if prefix == servicemetrics.OtherPrefix {
				return all
			}
			return reads(prefix)
		}}, true
}

// keyFree reports whether the metric family name counts no keys: the
// node's own health (raft, peers, connections, frames, header bytes, the
// Go runtime and the process), quotas, watches and ACL calls, and the
// series by prefix, which are judged one by one. Every other fencelock
// family sums the table's keys or its lock calls (the last token, leases,
// sessions, queued waiters, grants, releases, expiries, waits, extends,
// refusals, their histograms, proposals and applies, requests by route),
// and a family added later is hidden until it is listed here.
func keyFree(name string) bool {
	if !strings.HasPrefix(name, "fencelock_") {
		return true // go_*, process_*: the runtime's
	}
	for _, p := range keyFreePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return keyFreeNames[name]
}

var keyFreePrefixes = []string{"fencelock_connections_", "fencelock_framed_", "fencelock_raft_", "fencelock_peer_",
	"fencelock_http_header_", "fencelock_quota_", "fencelock_acl_"}

var keyFreeNames = map[string]bool{
	"fencelock_build_info": true, "fencelock_is_leader": true, "fencelock_watchers": true,
	"fencelock_leases_by_prefix": true,
}

// WatchScope is the scope of ctx's caller's watch: whom it counts
// against (its principal, else remoteHost, the host the call came from)
// and, with a principal, the keys whose events it is shown; a stream's
// filter follows a change of the rules from the first event after it.
func WatchScope(ctx context.Context, remoteHost string) service.WatchScope {
	sc := service.WatchScope{Caller: remoteHost, Visible: visible(ctx)}
	if p := Principal(ctx); p != "" {
		sc.Caller = "principal " + p
	}
	return sc
}

// visible is what ctx's caller may read: nil (everything) when the call
// has no principal, else a test of one key under the tables as they are
// when it is asked.
func visible(ctx context.Context) func(key string) bool {
	c := callerFrom(ctx)
	if c == nil {
		return nil
	}
	return func(key string) bool {
		v := c.current()
		return v.ok && v.st.Allowed(v.p, acl.Read, key)
	}
}

// readsAll is what ctx's caller may be told about whole prefixes: nil
// (everything) when the call has no principal, else a test of whether it
// may read every key under a prefix (acl.State.ReadsAll).
func readsAll(ctx context.Context) func(prefix string) bool {
	c := callerFrom(ctx)
	if c == nil {
		return nil
	}
	return func(prefix string) bool {
		v := c.current()
		return v.ok && v.st.ReadsAll(v.p, prefix)
	}
}

// hideTableFigures zeroes the figures of an overview that count the whole
// table, keeping the histograms' bounds (the dashboard draws them).
func hideTableFigures(o *api.Overview) {
	o.LastToken, o.Queued, o.SessionsOpen, o.StatsHidden = 0, 0, 0, true
	zero := func(h api.Histogram) api.Histogram {
		return api.Histogram{BoundsMs: h.BoundsMs, Counts: make([]uint64, len(h.Counts))}
	}
	o.Stats = api.Stats{Hold: zero(o.Stats.Hold), Wait: zero(o.Stats.Wait)}
}

// readableSessions keeps the sessions of the readable locks, each with
// only the keys the caller may read, and counts only those.
func readableSessions(visible func(string) bool, locks []api.LockOverview, sessions []api.SessionOverview) []api.SessionOverview {
	held := map[uint64]bool{}
	for _, l := range locks {
		held[l.Session] = true
	}
	kept := sessions[:0]
	for _, ss := range sessions {
		if !held[ss.ID] {
			continue
		}
		ss.Keys = readable(visible, ss.Keys, func(k string) string { return k })
		ss.Locks, ss.Waiting = len(ss.Keys), 0
		kept = append(kept, ss)
	}
	return kept
}

// readable keeps the items of a page whose keys the caller may read.
func readable[T any](visible func(string) bool, items []T, key func(T) string) []T {
	kept := items[:0]
	for _, x := range items {
		if visible(key(x)) {
			kept = append(kept, x)
		}
	}
	return kept
}

// metricsFilter leaves out the families family refuses, and the series
// whose prefix label prefix refuses.
type metricsFilter struct {
	g      prometheus.Gatherer
	family func(name string) bool
	prefix func(prefix string) bool
}

func (f metricsFilter) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := f.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if !f.family(mf.GetName()) {
			continue
		}
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if f.allowed(m) {
				kept = append(kept, m)
			}
		}
		mf.Metric = kept
		if len(kept) > 0 {
			out = append(out, mf)
		}
	}
	return out, err
}

func (f metricsFilter) allowed(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == servicemetrics.PrefixLabel {
			return f.prefix(l.GetValue())
		}
	}
	return true
}
