package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/httpapi"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
	"github.com/fencelock/fencelock/internal/service"
)

// newAPI is the transports over the real service over an in-memory log.
func newAPI(t *testing.T) (*httpapi.API, *service.Service) {
	t.Helper()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	log := slog.New(slog.DiscardHandler)
	svc, err := service.New(service.Config{
		NodeID: "n1", Clock: fake, Logger: log,
		ApplyTimeout: 5 * time.Second, MinTickInterval: time.Nanosecond, ClockCheckpoint: time.Hour,
		JoinCatchUp: time.Second, AnnounceEvery: time.Second,
		MaxWaitersPerKey: 1000, MaxWaiters: 100000,
		WatchHistory: 1000, WatchMaxWatchers: 100, WatchMaxPerCaller: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	svc.Start(replicatest.New("n1", svc.FSM()))
	t.Cleanup(svc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := svc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	g := auth.NewGuard(svc, log)
	t.Cleanup(g.Close)
	a := httpapi.New(httpapi.Config{Service: svc, Guard: g, Logger: log,
		Metrics: http.NotFoundHandler()})
	return a, svc
}

// Every route says what its caller needs, or that it needs nothing: a
// route whose permission is forgotten fails here, not in production.
func TestEveryRouteDeclaresWhatItNeeds(t *testing.T) {
	a, _ := newAPI(t)
	seen := map[string]bool{}
	for _, rt := range a.Routes() {
		if !rt.Need.Valid() {
			t.Errorf("%s %s (%s) declares no permission: give it an auth.Need, or auth.Open() if it needs none", rt.Method, rt.Path, rt.Op)
		}
		if rt.Op == "" || seen[rt.Op] {
			t.Errorf("%s %s: op %q is empty or not unique", rt.Method, rt.Path, rt.Op)
		}
		seen[rt.Op] = true
		if rt.Priority != api.Priority(rt.Path) {
			t.Errorf("%s: priority %v, but api.Priority says %v", rt.Path, rt.Priority, api.Priority(rt.Path))
		}
	}
}

// With the ACLs on, a principal with no policies is refused every route
// that needs more than being a principal, before the operation runs: the
// guard of each route is not only declared but applied, whichever way the
// route serves (a typed endpoint, the watch, a binary call).
func TestAPrincipalWithoutPoliciesIsRefusedEveryGuardedRoute(t *testing.T) {
	a, svc := newAPI(t)
	ctx := context.Background()
	if _, err := svc.ACLBootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	nobody, err := svc.ACLCreateToken(ctx, api.ACLTokenRequest{Name: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(a.Handler())
	defer hs.Close()
	// Bodies the routes decode, acting as the principal's own holder, so
	// that only the missing permission can refuse them; {} for the rest.
	bodies := map[string]string{
		api.PathAcquire:       `{"key":"k","holder":"nobody","ttl_ms":1000}`,
		api.PathRenew:         `{"key":"k","holder":"nobody","ttl_ms":1000}`,
		api.PathExtend:        `{"key":"k","holder":"nobody","token":1,"ttl_ms":1000}`,
		api.PathExtendBatch:   `{"holder":"nobody","ttl_ms":1000,"leases":[{"key":"k","token":1}]}`,
		api.PathRelease:       `{"key":"k","holder":"nobody"}`,
		api.PathAcquireAll:    `{"keys":["k"],"holder":"nobody","ttl_ms":1000}`,
		api.PathSessionOpen:   `{"holder":"other","ttl_ms":1000}`,
		api.PathSessionExtend: `{"holder":"other","id":1}`,
		api.PathSessionClose:  `{"holder":"other","id":1}`,
	}
	for _, rt := range a.Routes() {
		kind := rt.Need.String()
		if kind == "open" || strings.HasPrefix(kind, "any principal") {
			continue
		}
		target := rt.Path + "?key=k&token=1&prefix=&wait_ms=0"
		req, _ := http.NewRequest(rt.Method, hs.URL+target, nil)
		if rt.Method == http.MethodPost {
			body, ok := bodies[rt.Path]
			if !ok {
				body = "{}"
			}
			req, _ = http.NewRequest(rt.Method, hs.URL+target, strings.NewReader(body))
			req.Header.Set("Content-Type", api.ContentType)
		}
		req.Header.Set(api.HeaderAuthorization, "Bearer "+nobody.Secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e api.Error
		json.Unmarshal(b, &e)
		if e.Code != api.CodePermissionDenied {
			t.Errorf("%s %s (needs %s) answered %d %s to a principal with no policies; want permission_denied", rt.Method, rt.Path, kind, resp.StatusCode, b)
		}
	}
}

// docs/API.md's table of routes and permissions is the route table.
func TestAPIDocListsEveryRoute(t *testing.T) {
	a, _ := newAPI(t)
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(GET|POST) ([^`]+)` \\| `([a-z-]+)` \\| ([^|]+) \\|$")
	var documented, table []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, fmt.Sprintf("%s %s %s %s", m[1], m[2], m[3], strings.TrimSpace(m[4])))
	}
	for _, rt := range a.Routes() {
		table = append(table, fmt.Sprintf("%s %s %s %s", rt.Method, rt.Path, rt.Op, rt.Need))
	}
	sort.Strings(documented)
	sort.Strings(table)
	if strings.Join(documented, "\n") != strings.Join(table, "\n") {
		t.Errorf("docs/API.md, \"Routes and what they need\", lists\n%s\n\nbut the route table is\n%s", strings.Join(documented, "\n"), strings.Join(table, "\n"))
	}
}
