package main

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// proxyResource names the resource of a request the way fence-proxy fences
// it, and makes the request it forwards name exactly that resource: an
// upstream must not be able to read a request as another resource than
// the one whose mark the proxy checked. Every spelling the proxy cannot
// map to one name is refused.
type proxyResource struct {
	header string // the header naming the resource; "" for the URL path
	clean  bool   // path:clean: map //, ., .., a trailing slash and %2F to the clean path
	// raw (path:raw): %25, ;, trailing dots and spaces and non-ASCII are
	// the upstream's own, passed as they are
	raw  bool
	fold bool // --resource-case fold: ACCT and acct are one resource
	// maxLen caps a path (as escaped on the wire) or a header's resource
	// name, in bytes (0: defaultMaxResource)
	maxLen int
}

// defaultMaxResource is --max-resource's default: a resource name is a
// mark kept for good, and nobody names a resource with a kilobyte.
const defaultMaxResource = 1024

// A resourceError is a request whose resource cannot be named: 400 Code.
type resourceError struct {
	code, msg string
}

// hopByHop are the headers a proxy does not forward (RFC 9110 7.6.1, and
// the ones Go's proxy drops), and those that do not name anything.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length", "Fencing-Token"}

// parseResourceFrom reads --resource-from and --resource-case.
func parseResourceFrom(spec, caseMode string) (proxyResource, error) {
	var p proxyResource
	switch caseMode {
	case "exact", "":
	case "fold":
		p.fold = true
	default:
		return p, usageError("--resource-case %q: want exact or fold", caseMode)
	}
	switch {
	case spec == "path":
	case spec == "path:clean":
		p.clean = true
	case spec == "path:raw":
		p.raw = true
	case strings.HasPrefix(spec, "header:") && len(spec) > len("header:"):
		name := strings.TrimPrefix(spec, "header:")
		if !validHeaderName(name) {
			return p, usageError("--resource-from %q: %q is not a header name", spec, name)
		}
		p.header = http.CanonicalHeaderKey(name)
		for _, h := range hopByHop {
			if headerAlias(h) == headerAlias(p.header) {
				return p, usageError("--resource-from %q: %s is not forwarded as it came (a hop-by-hop or framing header); name the resource with another", spec, p.header)
			}
		}
	default:
		return p, usageError("--resource-from %q: want path, path:clean, path:raw or header:NAME", spec)
	}
	return p, nil
}

func validHeaderName(s string) bool {
	for _, c := range s {
		if c > unicode.MaxASCII || c <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			return false
		}
	}
	return s != ""
}

// headerAlias is what a header name comes to in a server that ignores case
// and reads _ as - (CGI's HTTP_X_RESOURCE, many frameworks): two headers
// with one alias are one header to such an upstream.
func headerAlias(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// name is r's resource. It rewrites r so that the request forwarded names
// exactly that resource: the path in its one escaping, or the one header
// value. A request it cannot name without guessing is refused.
func (p proxyResource) name(r *http.Request) (string, *resourceError) {
	if p.header != "" {
		return p.headerName(r)
	}
	name, err := p.pathName(r.URL.EscapedPath(), r.URL.Path)
	if err != nil {
		return "", err
	}
	r.URL.Path, r.URL.RawPath = name, ""
	return name, nil
}

func (p proxyResource) pathName(escaped, decoded string) (string, *resourceError) {
	if n := p.limit(); len(escaped) > n {
		return "", tooLong("path", len(escaped), n)
	}
	refuse := func(what string) (string, *resourceError) {
		msg := fmt.Sprintf("path %q has %s, which an upstream may read as another path than the one fenced", escaped, what)
		if !p.clean && strings.HasPrefix(decoded, "/") {
			msg += fmt.Sprintf("; send %q, or run the proxy with --resource-from path:clean", path.Clean(decoded))
		}
		return "", &resourceError{code: "noncanonical_path", msg: msg}
	}
	lower := strings.ToLower(escaped)
	switch {
	case strings.ContainsRune(decoded, '\\') || strings.Contains(lower, "%5c"):
		return refuse("a backslash")
	case strings.ContainsFunc(decoded, unicode.IsControl):
		return refuse("a control character")
	case !strings.HasPrefix(decoded, "/"):
		return refuse("no leading slash")
	}
	if !p.raw {
		if what := foreignSpelling(decoded); what != "" {
			return "", &resourceError{code: "noncanonical_path",
				msg: fmt.Sprintf("path %q has %s: the upstream may apply the write to another resource than the one fenced (--resource-from path:raw, for an upstream that takes such paths as they are)", escaped, what)}
		}
	}
	if p.clean {
		name := path.Clean(decoded)
		if p.fold {
			name = strings.ToLower(name)
		}
		return name, nil
	}
	if strings.Contains(lower, "%2f") {
		return refuse("an encoded slash (%2F)")
	}
	if decoded != "/" && strings.HasSuffix(decoded, "/") {
		return refuse("a trailing slash")
	}
	for _, seg := range strings.Split(decoded[1:], "/") {
		switch seg {
		case "":
			if decoded != "/" {
				return refuse("an empty segment (//)")
			}
		case ".", "..":
			return refuse("a dot segment (" + seg + ")")
		}
	}
	if p.fold {
		return strings.ToLower(decoded), nil
	}
	return decoded, nil
}

func (p proxyResource) headerName(r *http.Request) (string, *resourceError) {
	alias := headerAlias(p.header)
	for _, v := range r.Header["Connection"] {
		for _, opt := range strings.Split(v, ",") {
			if headerAlias(strings.TrimSpace(opt)) == alias {
				return "", &resourceError{code: "hop_by_hop_resource",
					msg: "the request's Connection header names " + p.header + ", which would then not be forwarded: the upstream would not see the resource fenced"}
			}
		}
	}
	var values []string
	for k, vs := range r.Header {
		if k == p.header {
			values = vs
		} else if headerAlias(k) == alias {
			return "", &resourceError{code: "duplicate_resource",
				msg: fmt.Sprintf("the request carries %s and %s, one header to many servers: which resource it names is the upstream's guess", p.header, k)}
		}
	}
	switch {
	case len(values) > 1:
		return "", &resourceError{code: "duplicate_resource",
			msg: fmt.Sprintf("the request carries %d %s headers: which one names the resource is the upstream's guess", len(values), p.header)}
	case len(values) == 0 || strings.TrimSpace(values[0]) == "":
		return "", &resourceError{code: "missing_resource", msg: "request carries no " + p.header + " header to name its resource"}
	}
	name := strings.TrimSpace(values[0])
	if strings.Contains(name, ",") {
		return "", &resourceError{code: "duplicate_resource",
			msg: fmt.Sprintf("the request's %s header holds a list (%q): to HTTP it is the same as %d headers, and which one names the resource is the upstream's guess", p.header, name, strings.Count(name, ",")+1)}
	}
	if n := p.limit(); len(name) > n {
		return "", tooLong(p.header+" header", len(name), n)
	}
	if p.fold {
		name = strings.ToLower(name)
	}
	r.Header[p.header] = []string{name}
	return name, nil
}

func (p proxyResource) limit() int {
	if p.maxLen > 0 {
		return p.maxLen
	}
	return defaultMaxResource
}

func tooLong(what string, n, limit int) *resourceError {
	return &resourceError{code: "resource_too_long",
		msg: fmt.Sprintf("the %s is %d bytes; a resource name is at most %d (--max-resource): it would be kept as a mark for good", what, n, limit)}
}

// foreignSpelling names what in a decoded path some upstream reads as
// another path than the one fenced ("" for nothing): an escape of its
// own (%25: decoded twice, %2570 is p), path parameters (;, which Java
// servers drop), a segment ending in a dot or a space (which Windows
// drops), a non-ASCII character (a fullwidth solidus is a slash to
// some, a zero-width space is nothing) or bytes that are not UTF-8 (an
// overlong encoding of /).
func foreignSpelling(decoded string) string {
	switch {
	case strings.ContainsRune(decoded, '%'):
		return "an encoded percent sign (%25), which an upstream that decodes twice reads as another escape"
	case strings.ContainsRune(decoded, ';'):
		return "a ; (path parameters, which some servers drop)"
	}
	for _, seg := range strings.Split(decoded, "/") {
		if seg != "." && seg != ".." && (strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ")) {
			return fmt.Sprintf("a segment ending in a dot or a space (%q, which some servers drop)", seg)
		}
	}
	for i := 0; i < len(decoded); i++ {
		if decoded[i] < utf8.RuneSelf {
			continue
		}
		if !utf8.ValidString(decoded) {
			return "bytes that are not UTF-8 (a broken or overlong encoding, which some decoders read as ASCII)"
		}
		r, _ := utf8.DecodeRuneInString(decoded[i:])
		return fmt.Sprintf("a non-ASCII character (%U), which an upstream may fold into another", r)
	}
	return ""
}

// of is the resource of a request that name has rewritten.
func (p proxyResource) of(r *http.Request) string {
	if p.header != "" {
		return r.Header.Get(p.header)
	}
	return r.URL.Path
}
