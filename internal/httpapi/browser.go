package httpapi

import (
	"mime"
	"net/http"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/service"
)

// Browsers. A page of any site can make a browser send this server a
// POST that needs no CORS preflight (a form, text/plain, an untyped
// body), with the browser's network position (loopback, a private
// network) and its client certificate; and a page that rebinds its own
// name to this server's address can read the answers. So, over HTTP:
//
//   - a request whose Host is none of the server's names is refused
//     (HostCheck): a rebound page sends its own name;
//   - a POST with a body must be Content-Type application/json, which a
//     page of another site cannot send without a preflight this server
//     never answers;
//   - a POST a browser marks as coming from another origin
//     (Sec-Fetch-Site, else Origin against Host) is refused.
//
// Framed requests are exempt: no browser speaks the framed protocol.

// HostCheck says whether a request's Host header (host, or host:port)
// names this server.
type HostCheck func(host string) bool

var crossOrigin = http.NewCrossOriginProtection()

// browserCheck refuses what a page of another site could make a browser
// send.
func (a *API) browserCheck(r *http.Request) *service.Error {
	if r.Proto == framing.Proto {
		return nil
	}
	if a.cfg.Hosts != nil && !a.cfg.Hosts(r.Host) {
		return service.NewError(api.CodeHostNotAllowed,
			"the Host %q names no address of this server; a page that rebinds its own name to the server's address sends its own, so it is refused: reach the server by its listen or advertised address, a name on its certificate, or one given with --allowed-host", r.Host)
	}
	if r.Method != http.MethodPost {
		return nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" || r.ContentLength != 0 {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != api.ContentType {
			return service.NewError(api.CodeUnsupportedMediaType,
				"a POST body must be Content-Type %s, not %q: a page of another site can send any other type without asking", api.ContentType, ct)
		}
	}
	if err := crossOrigin.Check(r); err != nil {
		return service.NewError(api.CodeCrossSite,
			"refused: the browser says this POST comes from a page of another origin (Origin %q, Sec-Fetch-Site %q), and such a page may change nothing here", r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"))
	}
	return nil
}
