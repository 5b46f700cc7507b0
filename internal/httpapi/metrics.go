package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/service"
)

// serveMetrics answers GET /metrics. A caller with a principal sees a
// series counted by key prefix only if it may read every key under that
// prefix ("other" sums prefixes it cannot know, so only a caller that may
// read every key sees it); the other series count no keys and are shown
// to every principal.
func (a *API) serveMetrics(w http.ResponseWriter, r *http.Request) *service.Error {
	reads := auth.ReadsAll(r.Context())
	if reads == nil || a.cfg.Gatherer == nil {
		a.cfg.Metrics.ServeHTTP(w, r)
		return nil
	}
	g := prefixFilter{g: a.cfg.Gatherer, keep: func(prefix string) bool {
		if prefix == service.OtherPrefix {
			return reads("")
		}
		return reads(prefix)
	}}
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

// prefixFilter leaves out the series whose prefix label keep refuses.
type prefixFilter struct {
	g    prometheus.Gatherer
	keep func(prefix string) bool
}

func (f prefixFilter) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := f.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
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

func (f prefixFilter) allowed(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == service.PrefixLabel {
			return f.keep(l.GetValue())
		}
	}
	return true
}
