package server

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/dashboard"
	"github.com/fencelock/fencelock/internal/httpapi"
)

// The authorization seam sees every route before the operation runs, and
// a refusal is answered as its *Error with nothing done.
func TestAuthorizerSeesEveryRouteAndCanRefuse(t *testing.T) {
	var (
		mu     sync.Mutex
		seen   = map[string]Call{}
		refuse = map[string]bool{}
	)
	cfg := fastConfig("")
	cfg.Authorizer = AuthorizerFunc(func(ctx context.Context, c Call) error {
		mu.Lock()
		defer mu.Unlock()
		seen[c.Path] = c
		if refuse[c.Op] {
			return &Error{Code: api.CodeUnavailable, Message: "refused by the test: " + c.Op}
		}
		return nil
	})
	ts := startServer(t, cfg)
	routes := ts.api.Routes()
	const known = 24 + 4 + 1 + 1 + 1 + 1 // + session-open, session-extend, session-close, acquire-all; + watch; + overview; + the dashboard's assets; + acl-revision
	if len(routes) != known {
		t.Errorf("%d routes; this test knows %d", len(routes), known)
	}
	// Bootstrap turns ACLs on: it goes last (below).
	check := func(path string, rte httpapi.Route) {
		t.Helper()
		target := path
		if path == api.PathWatch {
			target += "?wait_ms=0" // not the default wait for an event
		}
		ts.do(context.Background(), rte.Method, target, "{}")
		mu.Lock()
		c, ok := seen[path]
		mu.Unlock()
		switch {
		case !ok:
			t.Errorf("%s %s: the authorizer was not asked", rte.Method, path)
		case c.Op == "" || c.Op != rte.Op || c.Method != rte.Method || c.Remote == "" || c.Header == nil:
			t.Errorf("%s %s: the authorizer saw %+v", rte.Method, path, c)
		}
	}
	for _, rte := range routes {
		if rte.Path != api.PathACLBootstrap && rte.Path != dashboard.Prefix { // the assets pass no authorizer
			check(rte.Path, rte)
		}
	}

	mu.Lock()
	refuse["acquire"] = true
	mu.Unlock()
	a := ts.post(api.PathAcquire, `{"key":"k","holder":"a","ttl_ms":60000}`)
	if a.status != http.StatusServiceUnavailable || a.body["code"] != api.CodeUnavailable || a.body["error"] != "refused by the test: acquire" {
		t.Fatalf("refused acquire answered %d %v", a.status, a.body)
	}
	if g := ts.get(api.PathLock + "?key=k"); g.status != http.StatusNotFound {
		t.Fatalf("a refused acquire ran: %d %v", g.status, g.body)
	}
	mu.Lock()
	refuse["acquire"] = false
	mu.Unlock()
	if a := ts.post(api.PathAcquire, `{"key":"k","holder":"a","ttl_ms":60000}`); a.status != http.StatusOK {
		t.Fatalf("allowed acquire answered %d %v", a.status, a.body)
	}
	for _, rte := range routes {
		if rte.Path == api.PathACLBootstrap {
			check(rte.Path, rte)
		}
	}
}
