package service

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
)

// The ACL tables at the service: bootstrap works once and answers the
// admin's secret; policies and principals are set, replaced, listed
// (never with their secrets) and deleted through the log; nothing leaves
// the cluster without an admin.
func TestACLOperations(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	workers := api.ACLPolicy{Name: "workers", Rules: []api.ACLRule{{Prefix: "jobs/", Verbs: []string{"lock", "read"}}}}

	// Before bootstrap the tables do not change.
	_, err := s.ACLSetPolicy(ctx, workers)
	if e := wantCode(t, err, api.CodeInvalid); e.Field != "acl" {
		t.Fatalf("set policy before bootstrap: field %q", e.Field)
	}
	if st, known := s.ACL(); st.On || !known {
		t.Fatalf("ACLs before bootstrap: on %v known %v", st.On, known)
	}

	boot, err := s.ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if boot.Principal != acl.BootstrapPrincipal || !slices.Equal(boot.Policies, []string{acl.AdminPolicy}) || !strings.HasPrefix(boot.Secret, acl.TokenPrefix) {
		t.Fatalf("bootstrap answered %+v", boot)
	}
	st, _ := s.ACL()
	admin, ok := st.ByToken(boot.Secret)
	if !st.On || !ok || admin.Name != acl.BootstrapPrincipal || !st.Allowed(admin, acl.Admin, "") {
		t.Fatalf("after bootstrap: on %v, secret names %+v (%v)", st.On, admin, ok)
	}
	_, err = s.ACLBootstrap(ctx)
	wantCode(t, err, api.CodePermissionDenied)
	if st, _ := s.ACL(); len(st.Principals) != 1 {
		t.Fatalf("a second bootstrap changed the principals: %v", st.Principals)
	} else if _, ok := st.ByToken(boot.Secret); !ok {
		t.Fatal("a second bootstrap changed the admin's secret")
	}

	_, err = s.ACLSetPolicy(ctx, api.ACLPolicy{Name: "bad", Rules: []api.ACLRule{{Prefix: "x", Verbs: []string{"write"}}}})
	if e := wantCode(t, err, api.CodeInvalid); e.Field != "rules" {
		t.Fatalf("an unknown verb: field %q", e.Field)
	}
	if p, err := s.ACLSetPolicy(ctx, workers); err != nil || p.Name != "workers" || !slices.Equal(p.Rules[0].Verbs, []string{"lock", "read"}) {
		t.Fatalf("set policy: %+v %v", p, err)
	}

	w1, err := s.ACLCreateToken(ctx, api.ACLTokenRequest{Name: "w1", Policies: []string{"workers"}})
	if err != nil || w1.Secret == "" || w1.Principal != "w1" {
		t.Fatalf("create token: %+v %v", w1, err)
	}
	st, _ = s.ACL()
	if p, ok := st.ByToken(w1.Secret); !ok || p.Name != "w1" || !st.Allowed(p, acl.Lock, "jobs/x") || st.Allowed(p, acl.Lock, "other") || st.Allowed(p, acl.Admin, "") {
		t.Fatalf("w1's secret names %+v (%v) with the wrong rights", p, ok)
	}
	_, err = s.ACLCreateToken(ctx, api.ACLTokenRequest{Name: "w1", Policies: []string{"workers"}})
	if e := wantCode(t, err, api.CodeAlreadyExists); !strings.Contains(e.Message, `"replace": true`) {
		t.Fatalf("create an existing principal: %q does not say how to replace it", e.Message)
	}
	w1b, err := s.ACLCreateToken(ctx, api.ACLTokenRequest{Name: "w1", Policies: []string{"workers"}, Replace: true})
	if err != nil || w1b.Secret == w1.Secret {
		t.Fatalf("replace: %+v %v; want a new secret", w1b, err)
	}
	st, _ = s.ACL()
	if _, ok := st.ByToken(w1.Secret); ok {
		t.Fatal("a replaced secret still names its principal")
	}
	if nos, err := s.ACLCreateToken(ctx, api.ACLTokenRequest{Name: "certonly", Policies: []string{"workers"}, NoSecret: true}); err != nil || nos.Secret != "" {
		t.Fatalf("no_secret: %+v %v", nos, err)
	}

	list, err := s.ACLTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.ACLPrincipal{
		{Name: "admin", Policies: []string{"admin"}, HasToken: true},
		{Name: "certonly", Policies: []string{"workers"}},
		{Name: "w1", Policies: []string{"workers"}, HasToken: true},
	}
	if !slices.EqualFunc(list.Principals, want, func(a, b api.ACLPrincipal) bool {
		return a.Name == b.Name && a.HasToken == b.HasToken && slices.Equal(a.Policies, b.Policies)
	}) {
		t.Fatalf("principals %+v, want %+v", list.Principals, want)
	}
	pols, err := s.ACLPolicies(ctx)
	if err != nil || len(pols.Policies) != 2 || pols.Policies[0].Name != "admin" || pols.Policies[1].Name != "workers" {
		t.Fatalf("policies %+v %v", pols, err)
	}

	if d, err := s.ACLDeleteToken(ctx, api.ACLDeleteRequest{Name: "w1"}); err != nil || d.Deleted != "w1" {
		t.Fatalf("delete w1: %+v %v", d, err)
	}
	st, _ = s.ACL()
	if _, ok := st.ByToken(w1b.Secret); ok {
		t.Fatal("a deleted principal's secret still works")
	}
	_, err = s.ACLDeleteToken(ctx, api.ACLDeleteRequest{Name: "w1"})
	wantCode(t, err, api.CodeNotFound)
	// The last admin stays.
	_, err = s.ACLDeleteToken(ctx, api.ACLDeleteRequest{Name: "admin"})
	if e := wantCode(t, err, api.CodeInvalid); e.Field != "name" {
		t.Fatalf("deleting the last admin: field %q", e.Field)
	}
	_, err = s.ACLDeletePolicy(ctx, api.ACLDeleteRequest{Name: "admin"})
	wantCode(t, err, api.CodeInvalid)
	if _, err := s.ACLDeletePolicy(ctx, api.ACLDeleteRequest{Name: "workers"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.ACL(); st.Allowed(st.Principals["certonly"], acl.Read, "jobs/x") {
		t.Fatal("a deleted policy still grants")
	}
}
