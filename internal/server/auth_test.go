package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/fsm"
)

// The attacks of issue 13 against ACLs: each call below was answered 200
// before authentication existed.

// authDo sends a request with a bearer token ("" for none).
func (ts *testServer) authDo(method, path, body, token string) answer {
	ts.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // what every client sends with a body
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		ts.t.Fatalf("%s %s: answer is not a JSON object: %q", method, path, raw)
	}
	return a
}

func (ts *testServer) bootstrap() string {
	ts.t.Helper()
	a := ts.post("/v1/acl/bootstrap", "{}")
	secret, _ := a.body["secret"].(string)
	if a.status != 200 || !strings.HasPrefix(secret, acl.TokenPrefix) || a.body["principal"] != "admin" {
		ts.t.Fatalf("bootstrap: %d %v", a.status, a.body)
	}
	return secret
}

// token creates a principal with one policy of rules ("prefix:verbs[:deny]").
func (ts *testServer) token(admin, name string, rules ...string) string {
	ts.t.Helper()
	return makeToken(ts.t, ts.authDo, admin, name, rules...)
}

// makeToken creates, through send, a principal with one policy of rules.
func makeToken(t *testing.T, send func(method, path, body, token string) answer, admin, name string, rules ...string) string {
	t.Helper()
	var rs []map[string]any
	for _, r := range rules {
		rule, err := acl.ParseRule(r)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, map[string]any{"prefix": rule.Prefix, "verbs": strings.Split(rule.Verbs.String(), ","), "deny": rule.Deny})
	}
	body, _ := json.Marshal(map[string]any{"name": name + "-policy", "rules": rs})
	if a := send("POST", "/v1/acl/policy/set", string(body), admin); a.status != 200 {
		t.Fatalf("policy set: %d %v", a.status, a.body)
	}
	a := send("POST", "/v1/acl/token/create", `{"name":"`+name+`","policies":["`+name+`-policy"]}`, admin)
	secret, _ := a.body["secret"].(string)
	if a.status != 200 || secret == "" {
		t.Fatalf("token create: %d %v", a.status, a.body)
	}
	return secret
}

func TestAuthUnauthenticatedCallsAreRefusedAndChangeNothing(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	// Before bootstrap the server is open, as it always was.
	if a := ts.post("/v1/acquire", acquireBody("open", "anyone", 60000, "")); a.status != 200 {
		t.Fatalf("acquire before bootstrap: %d %v", a.status, a.body)
	}
	// Nothing made before bootstrap can survive it.
	if a := ts.post("/v1/acl/policy/set", `{"name":"admin","rules":[{"prefix":"","verbs":["admin"]}]}`); a.status != 400 {
		t.Fatalf("policy set before bootstrap: %d %v", a.status, a.body)
	}
	if a := ts.post("/v1/acl/token/create", `{"name":"evil","policies":["admin"]}`); a.status != 400 || a.body["secret"] != nil {
		t.Fatalf("token create before bootstrap: %d %v", a.status, a.body)
	}
	admin := ts.bootstrap()
	if _, ok := ts.fsm.ACL().Principals["evil"]; ok {
		t.Fatal("a principal made before bootstrap survived it")
	}
	if a := ts.post("/v1/acl/bootstrap", "{}"); a.status != 403 || a.body["code"] != "permission_denied" || a.body["secret"] != nil {
		t.Fatalf("second bootstrap: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", "/v1/acl/bootstrap", "{}", admin); a.status != 403 {
		t.Fatalf("second bootstrap with the admin token: %d %v", a.status, a.body)
	}
	membersBefore := ts.authDo("GET", "/v1/cluster/members", "", admin)
	applied := ts.fsm.AppliedIndex()
	for _, token := range []string{"", "flk_not-a-token", admin + "x"} {
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/acquire", acquireBody("k", "mallory", 60000, "")},
			{"POST", "/v1/release", `{"key":"open","holder":"anyone"}`},
			{"POST", "/v1/cluster/join", `{"id":"evil","raft_addr":"127.0.0.1:1","client_addr":"127.0.0.1:2"}`},
			{"POST", "/v1/cluster/remove", `{"id":"fencelock-1"}`},
			{"POST", "/v1/cluster/announce", `{"id":"fencelock-1","raft_addr":"x","client_addr":"127.0.0.1:2"}`},
			{"GET", "/v1/locks", ""},
			{"GET", "/v1/lock?key=open", ""},
			{"GET", "/v1/cluster/members", ""},
			{"GET", "/metrics", ""},
			{"POST", "/v1/acl/token/create", `{"name":"mallory","policies":["admin"]}`},
			{"GET", "/v1/acl/tokens", ""},
		} {
			a := ts.authDo(c.method, c.path, c.body, token)
			if a.status != 401 || a.body["code"] != "unauthenticated" {
				t.Errorf("%s %s with token %q: %d %v, want 401 unauthenticated", c.method, c.path, token, a.status, a.body)
			}
		}
	}
	if got := ts.fsm.AppliedIndex(); got != applied {
		t.Errorf("refused calls applied entries: index %d, was %d", got, applied)
	}
	if _, ok := ts.fsm.Get("k", ts.fsm.Now()); ok {
		t.Error("an unauthenticated acquire was granted")
	}
	if l, ok := ts.fsm.Get("open", ts.fsm.Now()); !ok || l.Holder != "anyone" {
		t.Error("an unauthenticated release released")
	}
	if m := ts.authDo("GET", "/v1/cluster/members", "", admin); !equalJSON(m.body["members"], membersBefore.body["members"]) {
		t.Errorf("members changed: %v, was %v", m.body["members"], membersBefore.body["members"])
	}
	// Probes stay open.
	for _, p := range []string{"/healthz", "/readyz", "/v1/cluster/identity"} {
		if a := ts.get(p); a.status != 200 {
			t.Errorf("GET %s without a token: %d %v", p, a.status, a.body)
		}
	}
	// The admin may do everything, as holders named after it.
	if a := ts.authDo("POST", "/v1/acquire", acquireBody("k", "admin/job", 60000, ""), admin); a.status != 200 {
		t.Fatalf("admin acquire: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", "/v1/acl/token/delete", `{"name":"admin"}`, admin); a.status != 400 {
		t.Fatalf("deleting the last admin: %d %v", a.status, a.body)
	}
	if a := ts.authDo("GET", "/v1/acl/whoami", "", admin); a.status != 200 || a.body["principal"] != "admin" || a.body["auth"] != true {
		t.Fatalf("whoami: %d %v", a.status, a.body)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestAuthPrefixRules(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	ts.authDo("POST", "/v1/acquire", acquireBody("other/x", "admin", 60000, ""), admin)
	ci := ts.token(admin, "ci", "jobs/:lock")
	if a := ts.authDo("POST", "/v1/acquire", acquireBody("jobs/a", "ci/w1", 60000, ""), ci); a.status != 200 {
		t.Fatalf("ci acquire jobs/a: %d %v", a.status, a.body)
	}
	applied := ts.fsm.AppliedIndex()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/acquire", acquireBody("other/y", "ci", 60000, "")},
		{"POST", "/v1/acquire", acquireBody("jobs/b", "someone-else", 60000, "")}, // not its holder
		{"POST", "/v1/release", `{"key":"other/x","holder":"admin"}`},             // force-release needs admin
		{"GET", "/v1/lock?key=other/x", ""},
		{"GET", "/v1/lock?key=jobs/a", ""}, // lock is not read
		{"GET", "/v1/check?key=other/x&token=1", ""},
		{"GET", "/v1/locks?prefix=other/", ""},
		{"POST", "/v1/cluster/remove", `{"id":"fencelock-1"}`},
		{"POST", "/v1/acl/token/create", `{"name":"ci2","policies":["admin"]}`},
		{"POST", "/v1/acl/policy/set", `{"name":"ci-policy","rules":[{"prefix":"","verbs":["admin"]}]}`},
	} {
		a := ts.authDo(c.method, c.path, c.body, ci)
		if a.status != 403 || a.body["code"] != "permission_denied" {
			t.Errorf("ci %s %s: %d %v, want 403 permission_denied", c.method, c.path, a.status, a.body)
		}
	}
	if got := ts.fsm.AppliedIndex(); got != applied {
		t.Errorf("refused calls applied entries: index %d, was %d", got, applied)
	}
	if _, ok := ts.fsm.Get("other/y", ts.fsm.Now()); ok {
		t.Error("ci was granted other/y")
	}
	if _, ok := ts.fsm.Get("other/x", ts.fsm.Now()); !ok {
		t.Error("ci released admin's other/x")
	}
	// A policy change applies at once, no restart: a deny below the allow.
	body := `{"name":"ci-policy","rules":[{"prefix":"jobs/","verbs":["lock","read"]},{"prefix":"jobs/secret/","verbs":["lock"],"deny":true}]}`
	if a := ts.authDo("POST", "/v1/acl/policy/set", body, admin); a.status != 200 {
		t.Fatalf("policy set: %d %v", a.status, a.body)
	}
	if a := ts.authDo("GET", "/v1/lock?key=jobs/a", "", ci); a.status != 200 || a.body["holder"] != "ci/w1" {
		t.Fatalf("ci read jobs/a after the change: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", "/v1/acquire", acquireBody("jobs/secret/1", "ci", 60000, ""), ci); a.status != 403 {
		t.Fatalf("ci acquire under the deny: %d %v", a.status, a.body)
	}
	// Leases below a read deny are left out of a list and their holders
	// out of a 409.
	ts.authDo("POST", "/v1/acquire", acquireBody("jobs/hidden/x", "admin", 60000, ""), admin)
	body = `{"name":"ci-policy","rules":[{"prefix":"jobs/","verbs":["lock","read"]},{"prefix":"jobs/hidden/","verbs":["read"],"deny":true}]}`
	if a := ts.authDo("POST", "/v1/acl/policy/set", body, admin); a.status != 200 {
		t.Fatalf("policy set: %d %v", a.status, a.body)
	}
	if a := ts.authDo("GET", "/v1/locks?prefix=jobs/", "", ci); a.status != 200 || !strings.Contains(jsonString(a.body), "jobs/a") ||
		strings.Contains(jsonString(a.body), "hidden") {
		t.Fatalf("ci list jobs/: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", "/v1/acquire", acquireBody("jobs/hidden/x", "ci", 60000, ""), ci); a.status != 409 || a.body["holder"] != nil {
		t.Fatalf("ci acquire of a held key it may not read: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", "/v1/acquire", acquireBody("jobs/hidden/x", "admin/2", 60000, ""), admin); a.status != 409 || a.body["holder"] != "admin" {
		t.Fatalf("with read, the 409 names the holder: %d %v", a.status, a.body)
	}
	// Deleting the token ends it at once.
	if a := ts.authDo("POST", "/v1/acl/token/delete", `{"name":"ci"}`, admin); a.status != 200 {
		t.Fatalf("token delete: %d %v", a.status, a.body)
	}
	if a := ts.authDo("GET", "/v1/lock?key=jobs/a", "", ci); a.status != 401 {
		t.Fatalf("a deleted token: %d %v", a.status, a.body)
	}
}

// syncBuffer is an io.Writer for a logger written by several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAuthHoldersAreBoundToPrincipals(t *testing.T) {
	var logs syncBuffer
	cfg := fastConfig("")
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ts := startServer(t, cfg)
	admin := ts.bootstrap()
	alice := ts.token(admin, "alice", "jobs/:lock")
	bob := ts.token(admin, "bob", "jobs/:lock")
	carol := ts.token(admin, "carol", "jobs/:read")
	g := ts.authDo("POST", "/v1/acquire", acquireBody("jobs/a", "alice/w1", 60000, ""), alice)
	if g.status != 200 {
		t.Fatalf("alice acquire: %d %v", g.status, g.body)
	}
	tok := num(g, "token")
	applied := ts.fsm.AppliedIndex()
	for _, c := range []struct{ path, body string }{
		{"/v1/extend", `{"key":"jobs/a","holder":"alice/w1","token":` + jsonNum(tok) + `,"ttl_ms":60000}`},
		{"/v1/renew", `{"key":"jobs/a","holder":"alice/w1","ttl_ms":60000}`},
		{"/v1/release", `{"key":"jobs/a","holder":"alice/w1"}`},
		{"/v1/release", `{"key":"jobs/a","holder":"alice/w1","token":` + jsonNum(tok) + `}`},
		{"/v1/extend-batch", `{"holder":"alice/w1","ttl_ms":60000,"leases":[{"key":"jobs/a","token":` + jsonNum(tok) + `}]}`},
		{"/v1/acquire", acquireBody("jobs/a", "alice/w1", 60000, "")}, // acquiring as alice would renew her lease
		{"/v1/acquire", acquireBody("jobs/a", "alice", 60000, "")},
	} {
		if a := ts.authDo("POST", c.path, c.body, bob); a.status != 403 || a.body["code"] != "permission_denied" {
			t.Errorf("bob POST %s %s: %d %v, want 403", c.path, c.body, a.status, a.body)
		}
	}
	if got := ts.fsm.AppliedIndex(); got != applied {
		t.Errorf("refused calls applied entries: index %d, was %d", got, applied)
	}
	if l, ok := ts.fsm.Get("jobs/a", ts.fsm.Now()); !ok || l.Holder != "alice/w1" || l.Token != tok {
		t.Fatalf("alice's lease after bob's attempts: %+v %v", l, ok)
	}
	// Bob may compete for the key as himself, and learns it is held, not
	// by whom.
	held := ts.authDo("POST", "/v1/acquire", acquireBody("jobs/a", "bob", 60000, ""), bob)
	if held.status != 409 || held.body["code"] != "held" || held.body["holder"] != nil || held.body["token"] != nil {
		t.Fatalf("bob's acquire of a held key: %d %v, want 409 without the holder", held.status, held.body)
	}
	for _, p := range []string{"/v1/lock?key=jobs/a", "/v1/locks?prefix=jobs/", "/v1/locks"} {
		if a := ts.authDo("GET", p, "", bob); a.status != 403 {
			t.Errorf("bob GET %s: %d %v, want 403", p, a.status, a.body)
		}
	}
	// Carol, with read on jobs/, sees the holder.
	if a := ts.authDo("GET", "/v1/locks?prefix=jobs/", "", carol); a.status != 200 || !strings.Contains(jsonString(a.body), "alice/w1") {
		t.Fatalf("carol list: %d %v", a.status, a.body)
	}
	// Alice extends and releases her own.
	if a := ts.authDo("POST", "/v1/extend", `{"key":"jobs/a","holder":"alice/w1","token":`+jsonNum(tok)+`,"ttl_ms":60000}`, alice); a.status != 200 {
		t.Fatalf("alice extend: %d %v", a.status, a.body)
	}
	// The admin may force-release anyone's lease, and it is audited.
	if a := ts.authDo("POST", "/v1/release", `{"key":"jobs/a","holder":"alice/w1"}`, admin); a.status != 200 || a.body["released"] != true {
		t.Fatalf("admin force-release: %d %v", a.status, a.body)
	}
	out := logs.String()
	for _, want := range []string{`"audit":true,"principal":"admin","op":"force-release","target":"jobs/a alice/w1","result":"ok"`,
		`"audit":true,"principal":"admin","op":"acl-token-create","target":"bob"`,
		`"audit":true,"principal":"bob","op":"force-release"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, alice) || strings.Contains(out, admin) {
		t.Error("a secret was logged")
	}
}

func jsonNum(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

// ACLs are replicated: a follower has the tables, and after a leader
// change the new leader enforces them and takes changes, no restart.
func TestAuthPolicyIsReplicatedAndEnforcedAfterLeaderChange(t *testing.T) {
	c := startCluster(t, 3, nil)
	old := c.leader()
	c.announced(old)
	admin := old.bootstrap()
	ci := old.token(admin, "ci", "jobs/:lock")
	for _, n := range c.nodes {
		eventually(t, "the tables on "+n.id, func() bool {
			st := n.fsm.ACL()
			p, ok := st.ByToken(ci)
			return ok && st.Allowed(p, acl.Lock, "jobs/1")
		})
	}
	// A follower authenticates too: without a token, 401; with one,
	// not_leader naming the leader.
	f := c.others(old)[0]
	if a := f.authDo("POST", "/v1/acquire", acquireBody("jobs/a", "ci", 60000, ""), ""); a.status != 401 {
		t.Fatalf("follower, no token: %d %v", a.status, a.body)
	}
	c.isolate(old)
	l := c.leader(c.others(old)...)
	if a := l.authDo("POST", "/v1/acquire", acquireBody("other/x", "ci", 60000, ""), ci); a.status != 403 {
		t.Fatalf("new leader, other/x: %d %v", a.status, a.body)
	}
	if a := l.authDo("POST", "/v1/acquire", acquireBody("jobs/a", "ci", 60000, ""), ci); a.status != 200 {
		t.Fatalf("new leader, jobs/a: %d %v", a.status, a.body)
	}
	if a := l.authDo("POST", "/v1/acquire", acquireBody("jobs/b", "ci", 60000, ""), ""); a.status != 401 {
		t.Fatalf("new leader, no token: %d %v", a.status, a.body)
	}
	body := `{"name":"ci-policy","rules":[{"prefix":"jobs/","verbs":["lock"],"deny":true}]}`
	if a := l.authDo("POST", "/v1/acl/policy/set", body, admin); a.status != 200 {
		t.Fatalf("policy change on the new leader: %d %v", a.status, a.body)
	}
	if a := l.authDo("POST", "/v1/acquire", acquireBody("jobs/b", "ci", 60000, ""), ci); a.status != 403 {
		t.Fatalf("after the change: %d %v", a.status, a.body)
	}
	// The old leader catches up once healed.
	c.heal()
	eventually(t, "the change on the old leader", func() bool {
		st := old.fsm.ACL()
		p, _ := st.ByToken(ci)
		return !st.Allowed(p, acl.Lock, "jobs/1")
	})
}

// A node announces its client address to the leader with Config.AuthToken
// once ACLs are on; without a valid token the announce is refused 401 and
// the members table is not changed.
func TestAuthNodesAnnounceWithTheirToken(t *testing.T) {
	const nodeSecret = "flk_test-node-secret"
	c := startCluster(t, 3, func(cfg *Config) { cfg.AuthToken = nodeSecret })
	l := c.leader()
	c.announced(l)
	l.bootstrap()
	if res, err := l.ProposeForTest(fsm.Command{Op: fsm.OpACL, ACL: &fsm.ACLChange{Kind: fsm.ACLSetPrincipal, Principal: acl.Principal{Name: "nodes",
		Policies: []string{acl.AdminPolicy}, TokenHash: acl.HashToken(nodeSecret)}}}); err != nil || res.Err != nil {
		t.Fatal(err, res)
	}
	f := c.others(l)[0]
	forget := func() {
		t.Helper()
		if _, err := l.ProposeForTest(fsm.Command{Op: fsm.OpMember, NodeID: f.id}); err != nil {
			t.Fatal(err)
		}
	}
	forget()
	eventually(t, "the follower to announce itself again", func() bool {
		m, ok := l.fsm.Member(f.id)
		return ok && m.ClientAddr == f.addr
	})
	if res, err := l.ProposeForTest(fsm.Command{Op: fsm.OpACL, ACL: &fsm.ACLChange{Kind: fsm.ACLDeletePrincipal, Name: "nodes"}}); err != nil || res.Err != nil {
		t.Fatal(err, res)
	}
	refused := func() float64 {
		return l.metric("fencelock_http_requests_total", "route", "/v1/cluster/announce", "code", "401")
	}
	before := refused()
	forget()
	eventually(t, "a refused announce", func() bool { return refused() > before })
	if m, ok := l.fsm.Member(f.id); ok {
		t.Fatalf("an announce with a revoked token was recorded: %+v", m)
	}
}

// With ACLs on, a list page still starts after the cursor: a client that
// pages through a prefix (Client.ListAfter, fencelock list --after) must
// not be given the first page again and again.
func TestAuthListPagesAfterTheCursor(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	admin := ts.bootstrap()
	for _, k := range []string{"jobs/a", "jobs/b", "jobs/c"} {
		if a := ts.authDo("POST", "/v1/acquire", acquireBody(k, "admin", 60000, ""), admin); a.status != 200 {
			t.Fatalf("acquire %s: %d %v", k, a.status, a.body)
		}
	}
	a := ts.authDo("GET", "/v1/locks?prefix=jobs/&limit=1&after=jobs/a", "", admin)
	locks, _ := a.body["locks"].([]any)
	if a.status != 200 || len(locks) != 1 || locks[0].(map[string]any)["key"] != "jobs/b" {
		t.Fatalf("page after jobs/a: %d %v, want jobs/b alone", a.status, a.body)
	}
}
