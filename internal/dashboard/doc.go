// Package dashboard is the web dashboard a fencelock server serves at
// /ui/: a page, its script and its stylesheet, embedded in the binary
// (plain HTML, CSS and JavaScript: no build step, nothing fetched from
// anywhere but the server itself). The page polls the server's own API
// (/v1/overview, /v1/cluster/members) and follows /v1/watch for its
// events (first reading back the latest the node keeps), with the
// browser's credentials (a token, or a TLS client certificate), so it
// sees exactly what its principal may read; the assets themselves are
// public.
//
// The browser tests run the page in headless Chromium;
// docs/OPERATIONS.md, "Dashboard", says what it shows and how they run.
package dashboard
