package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/service"
)

// serveMetrics answers GET /metrics, the series a caller with a
// principal may see (auth.RedactMetrics).
func (a *API) serveMetrics(w http.ResponseWriter, r *http.Request) *service.Error {
	g, redacted := auth.RedactMetrics(r.Context(), a.cfg.Gatherer)
	if !redacted {
		a.cfg.Metrics.ServeHTTP(w, r)
		return nil
	}
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
