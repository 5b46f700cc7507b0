package dashboard_test

// The dashboard as it is deployed: over TLS (the browser trusts the
// cluster's CA), with ACLs on and a client certificate naming the
// principal, and on a follower of a cluster.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/server"
	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// startTLSServer runs a node the way the server command does, TLS on its
// one port (server.Serve), verifying client certificates from ca when
// they are given, and returns it with a client that trusts ca and
// presents the certificate of client (a name no principal has).
func startTLSServer(t *testing.T, ca *tlstest.CA) *testServer {
	t.Helper()
	dir := t.TempDir()
	f := tlstest.Write(t, dir, "node", ca, ca.Issue(t, "node"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, ln, server.Config{
			HeartbeatTimeout:   50 * time.Millisecond,
			ElectionTimeout:    50 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond,
			Logger:             slog.New(slog.DiscardHandler),
			TLS:                tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA},
		}, 5*time.Second)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	cert := ca.Issue(t, "test-client").TLS(t)
	ts := &testServer{url: "https://" + ln.Addr().String(), client: &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}},
	}}}
	t.Cleanup(ts.client.CloseIdleConnections)
	deadline := time.Now().Add(20 * time.Second)
	for ts.call(context.Background(), t, "GET", api.PathReady, "", nil, nil) != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the TLS server never became ready")
		}
		time.Sleep(20 * time.Millisecond) // waiting for an election, not deciding anything
	}
	return ts
}

// nssTools are the programs that put a certificate and its key where
// Chromium on Linux finds them (an NSS database under $HOME/.pki).
func nssTools(t *testing.T) {
	t.Helper()
	for _, p := range []string{"certutil", "pk12util", "openssl"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is not on PATH: the client-certificate browser test needs Debian's libnss3-tools and openssl "+
				"(bash .ci/deps installs them), or FENCELOCK_TEST_NO_BROWSER=1 to skip the browser tests", p)
		}
	}
}

// browserHome makes a home directory whose NSS database trusts ca and,
// when leaf is not nil, holds leaf and its key, for a browser started
// with HOME set to it.
func browserHome(t *testing.T, ca *tlstest.CA, leaf *tlstest.Leaf) string {
	t.Helper()
	nssTools(t)
	home := t.TempDir()
	db := "sql:" + filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(filepath.Join(home, ".pki", "nssdb"), 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("certutil", "-N", "-d", db, "--empty-password")
	caFile := filepath.Join(home, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	run("certutil", "-A", "-d", db, "-n", "fencelock test CA", "-t", "C,,", "-i", caFile)
	if leaf != nil {
		f := tlstest.Write(t, home, "client", ca, leaf)
		p12 := filepath.Join(home, "client.p12")
		run("openssl", "pkcs12", "-export", "-in", f.Cert, "-inkey", f.Key, "-out", p12, "-passout", "pass:")
		run("pk12util", "-i", p12, "-d", db, "-W", "")
	}
	return home
}

// secureBrowser is a browser whose home is home, so it trusts what its
// NSS database trusts and has its certificate; its profile lets it
// present that certificate to origin without asking (the content setting
// behind Chromium's AutoSelectCertificateForUrls policy: a browser asks
// its user, and a headless one would wait for ever).
func secureBrowser(t *testing.T, home, origin string) context.Context {
	t.Helper()
	profile := t.TempDir()
	if err := os.MkdirAll(filepath.Join(profile, "Default"), 0o700); err != nil {
		t.Fatal(err)
	}
	prefs, _ := json.Marshal(map[string]any{"profile": map[string]any{"content_settings": map[string]any{"exceptions": map[string]any{
		"auto_select_certificate": map[string]any{origin + ",*": map[string]any{"setting": map[string]any{"filters": []any{map[string]any{}}}}},
	}}}})
	if err := os.WriteFile(filepath.Join(profile, "Default", "Preferences"), prefs, 0o600); err != nil {
		t.Fatal(err)
	}
	return browser(t, 1280, 900, time.Minute, chromedp.Env("HOME="+home), chromedp.UserDataDir(profile))
}

// TestDashboardOverTLSWithAClientCertificate: with TLS and ACLs on, a
// browser that presents a certificate naming a principal opens the
// dashboard without a token and sees what that principal may read (and a
// 403 beyond it), the events backfilled and the sessions; its links are
// https. A browser without a certificate is asked for a token.
func TestDashboardOverTLSWithAClientCertificate(t *testing.T) {
	chromiumPath(t)
	nssTools(t)
	ca := tlstest.NewCA(t, "fencelock test CA")
	ts := startTLSServer(t, ca)
	ctx := context.Background()
	var boot api.ACLSecret
	if st := ts.call(ctx, t, "POST", api.PathACLBootstrap, "", struct{}{}, &boot); st != 200 {
		t.Fatalf("bootstrap: %d", st)
	}
	admin := boot.Secret
	if st := ts.call(ctx, t, "POST", api.PathACLPolicySet, admin, api.ACLPolicy{Name: "jobs-read", Rules: []api.ACLRule{{Prefix: "jobs/", Verbs: []string{"read"}}}}, nil); st != 200 {
		t.Fatalf("policy set: %d", st)
	}
	if st := ts.call(ctx, t, "POST", api.PathACLTokenCreate, admin, api.ACLTokenRequest{Name: "viewer", Policies: []string{"jobs-read"}, NoSecret: true}, nil); st != 200 {
		t.Fatalf("token create: %d", st)
	}
	ts.acquire(t, "jobs/a", "admin/job", time.Minute, admin)
	ts.acquire(t, "ops/b", "admin/job", time.Minute, admin)
	var ss api.Session
	if st := ts.call(ctx, t, "POST", api.PathSessionOpen, admin, api.SessionOpenRequest{Holder: "admin/deployer", TTLMs: 30000}, &ss); st != 200 {
		t.Fatalf("session open: %d", st)
	}
	if st := ts.call(ctx, t, "POST", api.PathAcquire, admin, api.AcquireRequest{Key: "jobs/deploy", Holder: "admin/deployer", Session: ss.ID}, nil); st != 200 {
		t.Fatalf("acquire under the session: %d", st)
	}

	// The viewer's certificate: no token asked, jobs/ readable.
	bctx := secureBrowser(t, browserHome(t, ca, ca.Issue(t, "viewer")), ts.url)
	open(bctx, t, ts.url+"/ui/?poll=200")
	banner := wait[string](bctx, t, "a 403 for the prefix \"\"", `!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes('403') && document.getElementById('banner').textContent`)
	if !strings.Contains(banner, "permission denied") {
		t.Errorf("403 banner says %q", banner)
	}
	if shown := wait[bool](bctx, t, "the page, not the token form", `document.getElementById('auth').hidden && !document.getElementById('main').hidden`); !shown {
		t.Error("the token form is shown to a browser with a certificate")
	}
	if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.ID("prefix"), "jobs/")); err != nil {
		t.Fatal(err)
	}
	holder := wait[string](bctx, t, "jobs/a in the list", row("jobs/a")+` && document.getElementById('banner').hidden && `+row("jobs/a")+`.querySelector('.holder').textContent`)
	if holder != "admin/job" {
		t.Errorf("jobs/a's holder shows as %q", holder)
	}
	r := fmt.Sprintf(`document.querySelector('#sessions-body tr[data-session="%d"]')`, ss.ID)
	if keys := wait[string](bctx, t, "the session", r+` && `+r+`.querySelector('.keys').textContent`); keys != "jobs/deploy" {
		t.Errorf("the session's keys: %q", keys)
	}
	evs := wait[[]string](bctx, t, "the events under jobs/", eventsJS+`.length === 2 && `+eventsJS)
	if evs[0] != "granted jobs/deploy" || evs[1] != "granted jobs/a" {
		t.Errorf("events under jobs/: %q", evs)
	}
	got := wait[[]string](bctx, t, "the https links", `[location.protocol, document.querySelector('#members-body a').href, String(!!`+row("ops/b")+`), String(sessionStorage.length)]`)
	if got[0] != "https:" || !strings.HasPrefix(got[1], "https://127.0.0.1:") || got[2] != "false" || got[3] != "0" {
		t.Errorf("protocol, member link, ops/b shown, tokens stored: %q", got)
	}
	noProblems(bctx, t)

	// A browser without a certificate (trusting the CA all the same).
	nctx := secureBrowser(t, browserHome(t, ca, nil), ts.url)
	open(nctx, t, ts.url+"/ui/?poll=200")
	wait[bool](nctx, t, "the token form", `!document.getElementById('auth').hidden && document.getElementById('main').hidden`)
	noProblems(nctx, t)
}

// clusterNode is one node of an in-process cluster on raft's in-memory
// transport, serving HTTP on its own loopback port; stop ends it as a
// shutdown does (once; the test's cleanup does it otherwise).
type clusterNode struct {
	*testServer
	id   string
	stop func()
}

// startCluster starts n voters from one peer list and returns them once
// one leads.
func startCluster(t *testing.T, n int) (nodes []*clusterNode, leader *clusterNode) {
	t.Helper()
	var peers []server.Peer
	trans := make([]*raft.InmemTransport, n)
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		_, trans[i] = raft.NewInmemTransport(raft.ServerAddress(id))
		peers = append(peers, server.Peer{ID: id, RaftAddr: id})
	}
	for i := range trans {
		for j := range trans {
			if i != j {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
	for i := range n {
		var srv atomic.Pointer[server.Server]
		hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			srv.Load().Handler().ServeHTTP(w, r)
		}))
		s, err := server.New(server.Config{
			NodeID:             peers[i].ID,
			Peers:              peers,
			Transport:          trans[i],
			ClientAddr:         hs.Listener.Addr().String(),
			HeartbeatTimeout:   100 * time.Millisecond,
			ElectionTimeout:    100 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond,
			Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			hs.Close()
			t.Fatal(err)
		}
		srv.Store(s)
		hs.Start()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				s.BeginShutdown()
				hs.Close()
				if err := s.Close(); err != nil {
					t.Errorf("close %s: %v", peers[i].ID, err)
				}
			})
		}
		t.Cleanup(stop)
		nodes = append(nodes, &clusterNode{testServer: &testServer{Server: s, url: hs.URL}, id: peers[i].ID, stop: stop})
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, nd := range nodes {
			if nd.Ready() {
				return nodes, nd
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no node of the cluster became a ready leader")
		}
		time.Sleep(20 * time.Millisecond) // waiting for an election, not deciding anything
	}
}

// TestDashboardOnAFollower: a follower's page says it is one and links to
// the leader's dashboard; it lists the members with the leader marked
// (and their health, once the server reports it) and fills its events
// from its own watch history, which a follower answers.
func TestDashboardOnAFollower(t *testing.T) {
	ctx := browser(t, 1280, 900, time.Minute)
	nodes, leader := startCluster(t, 2)
	var follower *clusterNode
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
		}
	}
	l := leader.acquire(t, "jobs/a", "alice", time.Minute, "")
	// The follower applies the grant before the page asks it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var w api.WatchResponse
		if st := follower.call(context.Background(), t, "GET", api.PathWatch+"?after=0&wait_ms=0", "", nil, &w); st == 200 && len(w.Events) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower never applied the grant")
		}
		time.Sleep(10 * time.Millisecond) // polling the follower's state, not deciding anything
	}

	open(ctx, t, follower.url+"/ui/?poll=200")
	banner := wait[string](ctx, t, "the follower's banner", `!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes('follower') && document.getElementById('banner').textContent`)
	if !strings.Contains(banner, "locks are read on the leader") {
		t.Errorf("the banner says %q", banner)
	}
	link := wait[string](ctx, t, "the link to the leader", `document.querySelector('#banner a') && document.querySelector('#banner a').href`)
	if want := leader.url + "/ui/"; link != want {
		t.Errorf("the banner links to %q, want the leader's dashboard %q", link, want)
	}
	if live := wait[string](ctx, t, "the live badge", `document.getElementById('live-text').textContent`); live != "follower" {
		t.Errorf("the live badge says %q", live)
	}
	roles := wait[[]string](ctx, t, "both members", `document.querySelectorAll('#members-body tr').length === 2 && [...document.querySelectorAll('#members-body tr')].map(r => r.dataset.node + ' ' + r.querySelector('.role').textContent + ' ' + r.className + ' ' + r.dataset.state)`)
	for _, r := range roles {
		f := strings.Fields(r)
		switch {
		case f[0] == leader.id && f[1] != "leader":
			t.Errorf("the leader's row: %q", r)
		case f[0] == follower.id && (f[1] != "voter" || !strings.Contains(r, "self")):
			t.Errorf("the follower's row: %q (this node, a voter)", r)
		case len(f) > 3 && f[0] == follower.id && f[3] != "healthy":
			t.Errorf("the follower's health: %q", r)
		}
	}
	ev := wait[string](ctx, t, "the grant, from the follower's history", `document.querySelector('#events li') && document.querySelector('#events li').dataset.kind + ' ' + document.querySelector('#events li .tok').textContent`)
	if ev != fmt.Sprintf("granted #%d", l.Token) {
		t.Errorf("the follower's events: %q", ev)
	}
	if tm := wait[string](ctx, t, "the event's time", `document.querySelector('#events li .time').textContent`); !strings.Contains(tm, ":") || strings.Contains(tm, "·") {
		t.Errorf("the event's time shows as %q", tm)
	}
	if leader := wait[string](ctx, t, "the leader tile", `document.getElementById('stat-leader').textContent !== '–' && document.getElementById('stat-leader').textContent`); leader != nodes[0].id && leader != nodes[1].id {
		t.Errorf("the leader tile says %q", leader)
	}
	noProblems(ctx, t)
}

// TestDashboardOnARemovedNode: the page of a node removed from the
// cluster says so and links to a member's dashboard, where the server
// reports removal (MembersResponse.Removed).
func TestDashboardOnARemovedNode(t *testing.T) {
	if _, ok := reflect.TypeOf(api.MembersResponse{}).FieldByName("Removed"); !ok {
		t.Skip("this server's members answer does not say a node was removed")
	}
	ctx := browser(t, 1280, 900, time.Minute)
	nodes, leader := startCluster(t, 2)
	var gone *clusterNode
	for _, nd := range nodes {
		if nd != leader {
			gone = nd
		}
	}
	if st := leader.call(context.Background(), t, "POST", api.PathRemove, "", api.RemoveRequest{ID: gone.id}, nil); st != 200 {
		t.Fatalf("remove %s: %d", gone.id, st)
	}
	open(ctx, t, gone.url+"/ui/?poll=200")
	banner := wait[string](ctx, t, "the removed node's banner", `!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes('removed') && document.getElementById('banner').textContent`)
	if !strings.Contains(banner, "serves nothing") {
		t.Errorf("the banner says %q", banner)
	}
	if link := wait[string](ctx, t, "the link to a member", `document.querySelector('#banner a') && document.querySelector('#banner a').href`); link != leader.url+"/ui/" {
		t.Errorf("the banner links to %q, want %q", link, leader.url+"/ui/")
	}
	noProblems(ctx, t)
}
