package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// The client against a cluster with ACLs on: the token travels on every
// call, refusals are the auth sentinels, and a generated holder is the
// principal's own.
func TestAuthToken(t *testing.T) {
	ctx := context.Background()
	srv, anon := newPair(t, client.SystemClock{})
	boot, err := anon.ACLBootstrap(ctx)
	if err != nil || boot.Secret == "" || boot.Principal != "admin" {
		t.Fatalf("ACLBootstrap = %+v, %v", boot, err)
	}
	if _, err := anon.ACLBootstrap(ctx); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("second ACLBootstrap = %v, want ErrPermissionDenied", err)
	}
	if _, err := anon.TryAcquire(ctx, "jobs/a"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("TryAcquire without a token = %v, want ErrUnauthenticated", err)
	}
	admin, err := client.New([]string{srv.Addr}, client.WithAuthToken(boot.Secret))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.ACLSetPolicy(ctx, api.ACLPolicy{Name: "jobs", Rules: []api.ACLRule{{Prefix: "jobs/", Verbs: []string{"lock", "read"}}}}); err != nil {
		t.Fatal(err)
	}
	ci, err := admin.ACLCreateToken(ctx, api.ACLTokenRequest{Name: "ci", Policies: []string{"jobs"}})
	if err != nil || ci.Secret == "" {
		t.Fatalf("ACLCreateToken = %+v, %v", ci, err)
	}
	list, err := admin.ACLTokens(ctx)
	if err != nil || len(list.Principals) != 2 || strings.Contains(jsonOf(list), ci.Secret) {
		t.Fatalf("ACLTokens = %+v, %v", list, err)
	}
	c, err := client.New([]string{srv.Addr}, client.WithAuthToken(ci.Secret))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "jobs/a", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire with a token: %v", err)
	}
	if !strings.HasPrefix(l.Holder(), "ci/") {
		t.Fatalf("generated holder %q is not the principal's", l.Holder())
	}
	if _, err := c.TryAcquire(ctx, "other/x"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("TryAcquire outside the policy = %v, want ErrPermissionDenied", err)
	}
	if _, err := c.TryAcquire(ctx, "jobs/b", client.WithHolder("bob")); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("TryAcquire as another's holder = %v, want ErrPermissionDenied", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.ACLDeleteToken(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WhoAmI(ctx); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("WhoAmI with a deleted token = %v", err)
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }
