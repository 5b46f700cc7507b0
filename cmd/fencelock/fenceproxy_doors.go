package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/fencelock/fencelock/fence"
)

// The proxy's side doors: ways a request could reach the upstream as
// something other than what the proxy fenced. A tunnel (Upgrade, CONNECT,
// an HTTP/2 preface) carries requests the proxy never sees; a
// method-override header makes a request the proxy passes as a GET a PUT
// to the upstream; a header in a trailer arrives after the proxy has
// decided. Each is refused, or, where a flag says the upstream needs it,
// fenced by what the upstream will do.

// overrideHeaders are the method-override headers frameworks honour.
var overrideHeaders = []string{"X-Http-Method-Override", "X-Method-Override", "X-Http-Method"}

// overrideQuery is the query parameter some frameworks take a method from.
const overrideQuery = "_method"

// sideDoor is what the proxy knows of a request once its side doors are
// checked: the method to fence it by, and whether it opens a tunnel.
type sideDoor struct {
	method  string // the request's, or the honoured override's
	upgrade bool   // it asks for a protocol switch (--allow-upgrade)
}

// doors checks r's side doors. honour is the override header to follow
// ("" none); sensitive are the headers that must arrive in the head (the
// token, the key, the resource header).
func (cfg proxyConfig) doors(r *http.Request) (sideDoor, *resourceError) {
	d := sideDoor{method: r.Method}
	refuse := func(format string, args ...any) (sideDoor, *resourceError) {
		return d, &resourceError{code: "tunnel_refused", msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case r.Method == http.MethodConnect:
		return refuse("CONNECT opens a tunnel to the upstream, through which nothing is fenced")
	case r.Method == "PRI" || r.ProtoMajor >= 2:
		return refuse("an HTTP/2 connection preface (PRI * HTTP/2.0): the requests on it would not be fenced one by one")
	}
	if up := r.Header.Values("Upgrade"); len(up) > 0 || headerListHas(r.Header, "Connection", "upgrade") {
		if !cfg.allowUpgrade {
			return refuse("the request asks to switch protocols (Upgrade: %s): nothing inside the tunnel would be fenced; run the proxy with --allow-upgrade if the upstream needs it", strings.Join(up, ", "))
		}
		d.upgrade = true
	}
	overrides := func(format string, args ...any) (sideDoor, *resourceError) {
		return d, &resourceError{code: "method_override", msg: fmt.Sprintf(format, args...)}
	}
	if r.URL.Query().Has(overrideQuery) {
		return overrides("the query names a method (%s=), which some frameworks apply instead of the request's %s: the proxy would fence the wrong one", overrideQuery, r.Method)
	}
	for name, vs := range r.Header {
		alias := headerAlias(name)
		known := false
		for _, h := range overrideHeaders {
			known = known || alias == headerAlias(h)
		}
		if cfg.override != "" && alias == headerAlias(cfg.override) {
			if name != cfg.override {
				return overrides("the request carries %s spelt %s: which one the upstream reads is its guess", cfg.override, name)
			}
			continue
		}
		if known {
			return overrides("the request carries %s: %s, which some frameworks apply instead of its %s: the proxy would fence the wrong method (--method-override %s honours it)", name, strings.Join(vs, ", "), r.Method, name)
		}
	}
	if cfg.override != "" {
		if vs := r.Header.Values(cfg.override); len(vs) > 0 {
			m := strings.ToUpper(strings.TrimSpace(vs[0]))
			switch {
			case len(vs) > 1 || strings.Contains(vs[0], ","):
				return overrides("the request carries %d methods in %s: which one the upstream applies is its guess", len(vs)+strings.Count(strings.Join(vs, ","), ","), cfg.override)
			case headerListHas(r.Header, "Connection", cfg.override):
				return overrides("the request's Connection header names %s, which would then not be forwarded: the upstream would apply %s", cfg.override, r.Method)
			case !validHeaderName(m):
				return overrides("%s: %q is not a method", cfg.override, vs[0])
			}
			r.Header[cfg.override] = []string{m} // forwarded as it was fenced
			d.method = m
		}
	}
	return d, nil
}

// trailers refuses a request that announces, as a trailer, a header the
// proxy decides by: it would arrive after the decision. (Go's server
// moves the announced names from the Trailer header to r.Trailer.)
func (cfg proxyConfig) trailers(r *http.Request) *resourceError {
	sensitive := []string{fence.Header, fence.KeyHeader}
	if cfg.resource.header != "" {
		sensitive = append(sensitive, cfg.resource.header)
	}
	if cfg.override != "" {
		sensitive = append(sensitive, cfg.override)
	}
	for k := range r.Trailer {
		for _, h := range sensitive {
			if headerAlias(k) == headerAlias(h) {
				return &resourceError{code: "trailer_refused", msg: fmt.Sprintf("the request announces %s as a trailer: it must come in the header, where the proxy fences by it", k)}
			}
		}
	}
	return nil
}

// headerListHas: a header of h named name lists token (a comma-separated
// list, names compared as headerAlias does).
func headerListHas(h http.Header, name, token string) bool {
	want := headerAlias(token)
	for k, vs := range h {
		if headerAlias(k) != headerAlias(name) {
			continue
		}
		for _, v := range vs {
			for _, t := range strings.Split(v, ",") {
				if headerAlias(strings.TrimSpace(t)) == want {
					return true
				}
			}
		}
	}
	return false
}
