// Package servicemetrics owns the service's Prometheus series: leases
// granted, refused and ended, waits, proposals' commit times, the leader
// gauge, quota refusals, and the leases held by key prefix; and the
// overview's reading of them (Stats). The service counts into a Set; the
// server registers its Collectors in a registry of its own, so that two
// servers in one process (tests) do not collide.
package servicemetrics

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Sources are what the gauges read from the service's replicated table
// at each scrape, and collectors of its own (the quotas' limits) to
// register beside the Set's.
type Sources struct {
	QueuedCount   func() int
	LastToken     func() uint64
	SessionStats  func() (sessions, locks int)
	EachLiveLease func(fn func(key string))
	Extra         []prometheus.Collector
}

// Set is the service's series. The exported ones are counted by the
// service directly; the others through Commit and Observe.
type Set struct {
	all       []prometheus.Collector
	grants    *prometheus.CounterVec   // waited: "false" | "true"
	Refusals  *prometheus.CounterVec   // op
	leaseEnds *prometheus.CounterVec   // reason: released | expired
	Extends   *prometheus.CounterVec   // result: ok | not_held
	WaitEnds  *prometheus.CounterVec   // outcome: granted | elapsed | cancelled
	Waiters   prometheus.Gauge         // requests waiting on this node
	hold      *prometheus.HistogramVec // reason
	wait      *prometheus.HistogramVec // outcome
	commit    *prometheus.HistogramVec // op
	Leader    prometheus.Gauge
	Retries   prometheus.Counter
	QueueFull *prometheus.CounterVec // scope: key | total
	Watchers  prometheus.Gauge
	// quotaRefused counts calls refused at a principal's quota.
	QuotaRefused *prometheus.CounterVec // quota

	// The series counted per proposal and per table event, each looked
	// up once (series): a lookup by labels hashes and checks them every
	// time, and the events are counted while the state machine applies.
	commitBy                   sync.Map // fsm.Op → prometheus.Observer
	grantedWaited, grantedNow  series[prometheus.Counter]
	waitGranted, waitElapsed   series[prometheus.Counter]
	waitGrantedS, waitElapsedS series[prometheus.Observer]
	released, expired          series[prometheus.Counter]
	heldReleased, heldExpired  series[prometheus.Observer]
}

// series is one series of a metric vector, looked up on its first use,
// so that it shows in /metrics only once counted, as a lookup by labels
// at each count would.
type series[T any] struct {
	once sync.Once
	v    T
}

func (s *series[T]) get(lookup func() T) T {
	s.once.Do(func() { s.v = lookup() })
	return s.v
}

// Commit is the commit histogram's series of op.
func (m *Set) Commit(op fsm.Op) prometheus.Observer {
	if o, ok := m.commitBy.Load(op); ok {
		return o.(prometheus.Observer)
	}
	o, _ := m.commitBy.LoadOrStore(op, m.commit.WithLabelValues(op.String()))
	return o.(prometheus.Observer)
}

// leaseSeconds are the buckets of the hold and wait histograms.
var leaseSeconds = prometheus.ExponentialBuckets(0.001, 4, 10) // 1ms .. ~4.4 min

func New(src Sources) *Set {
	seconds := leaseSeconds
	m := &Set{
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_grants_total", Help: "Leases granted (each with a new token); waited=true for grants from a queue.",
		}, []string{"waited"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_refusals_total", Help: "Requests answered no: acquire/wait held by another, renew/extend not held.",
		}, []string{"op"}),
		leaseEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_lease_ends_total", Help: "Leases that ended, by reason: released by the holder or expired.",
		}, []string{"reason"}),
		Extends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_extends_total", Help: "Extend calls (single and batch items) by result.",
		}, []string{"result"}),
		WaitEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_waits_total", Help: "Queued waits that ended, by outcome: granted, elapsed, cancelled.",
		}, []string{"outcome"}),
		Waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencelock_waiters", Help: "Acquire requests currently waiting in a queue on this node.",
		}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fencelock_hold_seconds", Help: "Cluster time from grant to release or expiry.", Buckets: seconds,
		}, []string{"reason"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fencelock_wait_seconds", Help: "Cluster time a waiter spent queued, by outcome.", Buckets: seconds,
		}, []string{"outcome"}),
		commit: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fencelock_commit_seconds", Help: "Time from proposal to committed and applied, by command.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100µs .. ~3.3s
		}, []string{"op"}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_retried_requests_total", Help: "Writes whose request_id repeated an earlier one: answered from memory, not applied.",
		}),
		QueueFull: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_wait_queue_full_total", Help: "Waits refused (429 too_many_waiters) because the key's queue (scope=key) or all queues (scope=total) were at their limit.",
		}, []string{"scope"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencelock_is_leader", Help: "1 while this node is the leader and serving writes.",
		}),
		Watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencelock_watchers", Help: "Watches open on this node (long-polls waiting and event streams).",
		}),
		QuotaRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencelock_quota_refusals_total", Help: "Calls refused 429 because the caller's principal was at a quota: sessions, locks, waiters, watches.",
		}, []string{"quota"}),
	}
	m.all = []prometheus.Collector{m.grants, m.Refusals, m.leaseEnds, m.Extends, m.WaitEnds, m.Waiters,
		m.hold, m.wait, m.commit, m.Leader, m.Retries, m.QueueFull, m.Watchers, m.QuotaRefused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_queued_waiters", Help: "Waiters in all wait queues of the replicated table (every node's view of the same queues).",
		}, func() float64 { return float64(src.QueuedCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_last_token", Help: "The last fencing token issued.",
		}, func() float64 { return float64(src.LastToken()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_sessions", Help: "Sessions not yet ended, in this node's replicated table.",
		}, func() float64 { n, _ := src.SessionStats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_session_locks", Help: "Locks held under sessions, in this node's replicated table.",
		}, func() float64 { _, n := src.SessionStats(); return float64(n) }),
		newLeaseCollector(src.EachLiveLease),
	}
	m.all = append(m.all, src.Extra...)
	return m
}

func dur(d locktable.Duration) float64 { return time.Duration(d).Seconds() }

// Observe counts one table event. Events are counted only while this node
// leads, so a log replayed at start-up is not counted twice.
func (m *Set) Observe(ev locktable.Event) {
	switch ev.Kind {
	case locktable.EventGranted:
		if ev.Since < ev.At {
			m.grantedWaited.get(func() prometheus.Counter { return m.grants.WithLabelValues("true") }).Inc()
			m.waitGranted.get(func() prometheus.Counter { return m.WaitEnds.WithLabelValues("granted") }).Inc()
			m.waitGrantedS.get(func() prometheus.Observer { return m.wait.WithLabelValues("granted") }).
				Observe(dur(locktable.Duration(ev.At - ev.Since)))
		} else {
			m.grantedNow.get(func() prometheus.Counter { return m.grants.WithLabelValues("false") }).Inc()
		}
	case locktable.EventReleased:
		m.released.get(func() prometheus.Counter { return m.leaseEnds.WithLabelValues("released") }).Inc()
		m.heldReleased.get(func() prometheus.Observer { return m.hold.WithLabelValues("released") }).
			Observe(dur(locktable.Duration(ev.At - ev.Since)))
	case locktable.EventExpired:
		m.expired.get(func() prometheus.Counter { return m.leaseEnds.WithLabelValues("expired") }).Inc()
		m.heldExpired.get(func() prometheus.Observer { return m.hold.WithLabelValues("expired") }).
			Observe(dur(locktable.Duration(ev.Expiry - ev.Since)))
	case locktable.EventWaitDropped:
		m.waitElapsed.get(func() prometheus.Counter { return m.WaitEnds.WithLabelValues("elapsed") }).Inc()
		m.waitElapsedS.get(func() prometheus.Observer { return m.wait.WithLabelValues("elapsed") }).
			Observe(dur(locktable.Duration(ev.At - ev.Since)))
	}
}

// PrefixLabel labels the series that count keys by their top-level
// prefix; OtherPrefix is its value for the keys past the first
// maxLeasePrefixes prefixes. A transport that shows metrics to callers
// who may not read every key leaves out the series of prefixes they may
// not read.
const (
	PrefixLabel = "prefix"
	OtherPrefix = "other"
)

// maxLeasePrefixes bounds fencelock_leases_by_prefix: the first this many
// top-level prefixes (in key order) get a series each, the rest are summed
// under prefix="other".
const maxLeasePrefixes = 20

// leaseCollector reports the leases held now, in total and by top-level
// key prefix (the key up to and including its first "/"; a key without
// one is its own prefix), from one walk of the table per scrape.
type leaseCollector struct {
	each            func(func(key string))
	total, byPrefix *prometheus.Desc
}

func newLeaseCollector(each func(func(key string))) *leaseCollector {
	return &leaseCollector{
		each:  each,
		total: prometheus.NewDesc("fencelock_leases", "Leases held now, in this node's replicated table.", nil, nil),
		byPrefix: prometheus.NewDesc("fencelock_leases_by_prefix",
			"Leases held now by top-level key prefix (up to the first /); past the first 20 prefixes in key order, prefix=\"other\".",
			[]string{PrefixLabel}, nil),
	}
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.total
	ch <- c.byPrefix
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	var pc prefixCounter
	c.each(func(key string) { pc.add(key, maxLeasePrefixes) })
	ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(pc.total))
	for _, pc := range pc.counts() {
		ch <- prometheus.MustNewConstMetric(c.byPrefix, prometheus.GaugeValue, float64(pc.n), pc.prefix)
	}
}

type prefixCount struct {
	prefix string
	n      int
}

// prefixCounter counts keys, fed in key order, by top-level prefix: the
// first max prefixes, then "other" for the rest.
type prefixCounter struct {
	total int
	out   []prefixCount
	other int
}

func (c *prefixCounter) add(key string, max int) {
	c.total++
	p := key
	if i := strings.IndexByte(p, '/'); i >= 0 {
		p = p[:i+1]
	}
	switch {
	case len(c.out) > 0 && c.out[len(c.out)-1].prefix == p:
		c.out[len(c.out)-1].n++
	case len(c.out) < max:
		c.out = append(c.out, prefixCount{p, 1})
	default:
		c.other++
	}
}

func (c *prefixCounter) counts() []prefixCount {
	if c.other > 0 {
		return append(c.out, prefixCount{OtherPrefix, c.other})
	}
	return c.out
}

// Collectors are the Set's series and the Sources' extra collectors, for
// the server's registry.
func (m *Set) Collectors() []prometheus.Collector { return m.all }

// stats reads the lease counters and histograms without adding series
// that were never observed.
func (m *Set) Stats() api.Stats {
	var st api.Stats
	each(m.grants, func(d *dto.Metric) {
		n := uint64(d.GetCounter().GetValue())
		st.Grants += n
		if label(d, "waited") == "true" {
			st.Handoffs += n
		}
	})
	each(m.leaseEnds, func(d *dto.Metric) {
		n := uint64(d.GetCounter().GetValue())
		switch label(d, "reason") {
		case "released":
			st.Releases += n
		case "expired":
			st.Expiries += n
		}
	})
	st.Hold = histogram(m.hold, nil)
	st.Wait = histogram(m.wait, func(d *dto.Metric) bool { return label(d, "outcome") == "granted" })
	return st
}

// each calls fn with every series c has.
func each(c prometheus.Collector, fn func(*dto.Metric)) {
	ch := make(chan prometheus.Metric, 8)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			fn(&d)
		}
	}
}

func label(d *dto.Metric, name string) string {
	for _, l := range d.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// histogram sums the series of h that keep accepts (all when nil) into
// one, with per-bucket (not cumulative) counts in milliseconds.
func histogram(h *prometheus.HistogramVec, keep func(*dto.Metric) bool) api.Histogram {
	out := api.Histogram{BoundsMs: make([]float64, len(leaseSeconds))}
	for i, b := range leaseSeconds {
		out.BoundsMs[i] = math.Round(b*1e6) / 1e3
	}
	cum := make([]uint64, len(leaseSeconds))
	each(h, func(d *dto.Metric) {
		if keep != nil && !keep(d) {
			return
		}
		hd := d.GetHistogram()
		for i, b := range hd.GetBucket() {
			if i < len(cum) && !math.IsInf(b.GetUpperBound(), 1) {
				cum[i] += b.GetCumulativeCount()
			}
		}
		out.Count += hd.GetSampleCount()
		out.SumMs += hd.GetSampleSum() * 1000
	})
	out.Counts = make([]uint64, len(cum)+1)
	prev := uint64(0)
	for i, c := range cum {
		out.Counts[i] = c - prev
		prev = c
	}
	out.Counts[len(cum)] = out.Count - prev
	return out
}
