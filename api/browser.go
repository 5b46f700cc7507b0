package api

import "net/http"

// Error codes of the server's protections against browsers driving the
// API from another site (docs/SECURITY.md, "Browsers").
const (
	// CodeUnsupportedMediaType: a POST over HTTP whose body is not
	// Content-Type application/json (415). A browser sends a form or
	// text/plain from any site without asking; JSON it must ask for.
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeCrossSite: a POST from a page of another site (its Origin or
	// Sec-Fetch-Site says so) (403).
	CodeCrossSite = "cross_site_request"
	// CodeHostNotAllowed: a request whose Host header is none of the
	// server's names (403): a page that rebound its own name to this
	// server's address (DNS rebinding).
	CodeHostNotAllowed = "host_not_allowed"
)

func browserStatus(code string) (int, bool) {
	switch code {
	case CodeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType, true
	case CodeCrossSite, CodeHostNotAllowed:
		return http.StatusForbidden, true
	}
	return 0, false
}
