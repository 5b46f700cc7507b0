//go:build unix

package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// TLS and ACLs together, as real processes (docs/SECURITY.md): the
// attacks of issue 13 fail on a 3-node cluster with TLS on the client and
// raft ports and ACLs bootstrapped, before and after the leader is killed.

// secureCLI runs the binary against addrs over TLS (FENCELOCK_CLIENT_CA=ca) with
// FENCELOCK_AUTH_TOKEN=token ("" for none); it returns stdout, stderr and
// the exit status.
func secureCLI(t *testing.T, addrs []string, ca, token string, args ...string) (string, string, int) {
	t.Helper()
	return runBinary(t, []string{"FENCELOCK_ADDR=" + strings.Join(addrs, ","), "FENCELOCK_CLIENT_CA=" + ca,
		"FENCELOCK_AUTH_TOKEN=" + token, "FENCELOCK_CLIENT_CERT=", "FENCELOCK_CLIENT_KEY="}, args...)
}

// secureCall sends one request over https with a bearer token ("": none).
func secureCall(hc *http.Client, addr, token, method, path, body string) (reply, string, error) {
	req, err := http.NewRequest(method, "https://"+addr+path, strings.NewReader(body))
	if err != nil {
		return reply{}, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // what every client sends with a body
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return reply{}, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, "", err
	}
	r := reply{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		return reply{}, "", fmt.Errorf("%s %s: %d %q", method, path, resp.StatusCode, raw)
	}
	return r, string(raw), nil
}

// secureDo sends the request to each of addrs in turn, bounded, until one
// gives a definite answer (not 503, no transport error): the leader's.
func secureDo(t *testing.T, hc *http.Client, addrs []string, token, method, path, body string) (reply, string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for i := 0; time.Now().Before(deadline); i++ {
		r, raw, err := secureCall(hc, addrs[i%len(addrs)], token, method, path, body)
		if err == nil && r.status != http.StatusServiceUnavailable {
			return r, raw
		}
		last = fmt.Sprint(raw, err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s %s: no definite answer in 30s; last: %s", method, path, last)
	return reply{}, ""
}

// forgedAppend sends addr's raft port an AppendEntries of a newer term,
// over dial, whose one entry releases key's lease, committed at once; it
// returns the transport's error (nil if raft answered).
func forgedAppend(t *testing.T, addr string, after uint64, key, holder string, dial func(string) (net.Conn, error)) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(dialStream{Listener: ln, dial: dial}, 1, 5*time.Second, io.Discard)
	defer trans.Close()
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpRelease, Now: locktable.Time(1 << 40), Key: key, Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	term := uint64(1 << 20)
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("mallory"), Addr: []byte(trans.LocalAddr())},
		Term:              term,
		PrevLogEntry:      after,
		Entries:           []*raft.Log{{Index: after + 1, Term: term, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: after + 1,
	}
	var resp raft.AppendEntriesResponse
	return trans.AppendEntries("target", raft.ServerAddress(addr), req, &resp)
}

// dialStream is a raft StreamLayer that only dials, for an attacker.
type dialStream struct {
	net.Listener
	dial func(addr string) (net.Conn, error)
}

func (d dialStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return d.dial(string(addr))
}

func TestSecureProcessCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cluster CA")
	pool := ca.Pool()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	type snode struct {
		*pnode
		files tlstest.Files
	}
	var nodes []*snode
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		nodes = append(nodes, &snode{
			pnode: &pnode{id: id, client: freeAddr(t), raft: freeAddr(t), data: filepath.Join(dir, id)},
			files: tlstest.Write(t, dir, id, ca, ca.Issue(t, id)),
		})
	}
	caFile := nodes[0].files.CA
	start := func(n *snode, extra ...string) {
		n.p = startProc(t, dir, nil, append([]string{"--id", n.id, "--listen", n.client, "--raft", n.raft,
			"--data", n.data, "--log-level", "error", "--cert", n.files.Cert, "--key", n.files.Key, "--ca", n.files.CA}, extra...)...)
	}
	var all []string
	for _, n := range nodes {
		all = append(all, n.client)
	}
	n1 := nodes[0]
	start(n1)
	poll(t, "n1 ready over TLS", func() bool {
		r, _, err := secureCall(hc, n1.client, "", "GET", "/readyz", "")
		return err == nil && r.status == 200
	})

	// ACLs on over TLS: the admin, a policy that locks and reads jobs/
	// (alice) and one that only locks there (bob).
	out, errs, code := secureCLI(t, all[:1], caFile, "", "acl", "bootstrap")
	admin := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(admin, "flk_") {
		t.Fatalf("acl bootstrap over TLS: exit %d %q %q", code, out, errs)
	}
	for _, args := range [][]string{
		{"acl", "policy", "set", "jobs-rw", "--rule", "jobs/:lock,read"},
		{"acl", "policy", "set", "jobs-lock", "--rule", "jobs/:lock"},
	} {
		if out, errs, code := secureCLI(t, all[:1], caFile, admin, args...); code != 0 {
			t.Fatalf("%v: exit %d %q %q", args, code, out, errs)
		}
	}
	secrets := map[string]string{}
	for name, policy := range map[string]string{"alice": "jobs-rw", "bob": "jobs-lock"} {
		out, errs, code := secureCLI(t, all[:1], caFile, admin, "acl", "token", "create", "--name", name, "--policy", policy)
		if secrets[name] = strings.TrimSpace(out); code != 0 || !strings.HasPrefix(secrets[name], "flk_") {
			t.Fatalf("token create %s: exit %d %q %q", name, code, out, errs)
		}
	}
	alice, bob := secrets["alice"], secrets["bob"]

	// The others join over https with the admin token, and are checked
	// over mutual TLS on their raft ports.
	for _, n := range nodes[1:] {
		start(n, "--join", n1.client, "--auth-token", admin)
	}
	var membersOut string
	poll(t, "three announced voters", func() bool {
		membersOut, _, _ = secureCLI(t, all, caFile, admin, "cluster", "members")
		v, _, _ := voterLines(membersOut)
		return v == 3 && strings.Contains(membersOut, nodes[1].client) && strings.Contains(membersOut, nodes[2].client)
	})

	// refusedMembership: an unauthenticated join naming an unreachable
	// voter, and a remove, are refused (401), so is bob's (403), and the
	// members are unchanged.
	refusedMembership := func(addrs []string, wantIDs []string) {
		t.Helper()
		for _, who := range []struct{ token, want string }{{"", "unauthenticated"}, {bob, "permission denied"}} {
			for _, args := range [][]string{
				{"cluster", "join", "--id", "evil", "--raft", "127.0.0.1:1", "--client", "127.0.0.1:2", "--timeout", "5s"},
				{"cluster", "remove", "--id", wantIDs[0], "--timeout", "5s"},
			} {
				if out, errs, code := secureCLI(t, addrs, caFile, who.token, args...); code != 1 || !strings.Contains(errs, who.want) {
					t.Errorf("%v (token %.8q): exit %d %q %q; want 1 and %q", args, who.token, code, out, errs, who.want)
				}
			}
		}
		out, errs, code := secureCLI(t, addrs, caFile, admin, "cluster", "members")
		_, _, ids := voterLines(out)
		slices.Sort(ids) // in the order they joined
		if code != 0 || !slices.Equal(ids, wantIDs) || strings.Contains(out, "evil") {
			t.Errorf("members after the refused calls: exit %d, ids %v, want %v\n%s%s", code, ids, wantIDs, out, errs)
		}
	}
	refusedMembership(all, []string{"n1", "n2", "n3"})

	// alice takes jobs/x as alice/w1 over TLS.
	out, errs, code = secureCLI(t, all, caFile, alice, "acquire", "jobs/x", "--holder", "alice/w1", "--ttl", "10m")
	tok, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if code != 0 || err != nil {
		t.Fatalf("alice's acquire: exit %d %q %q", code, out, errs)
	}
	// stillHers: the lease is alice/w1's under the same token (read by
	// the admin).
	stillHers := func(addrs []string, when string) {
		t.Helper()
		r, raw := secureDo(t, hc, addrs, admin, "GET", "/v1/lock?key=jobs/x", "")
		if r.status != 200 || r.body["holder"] != "alice/w1" || token(r) != tok {
			t.Errorf("%s: jobs/x is %d %s, want alice/w1's token %d", when, r.status, raw, tok)
		}
	}
	// bobRefused: bob cannot extend, renew, release, or read alice's
	// lease, nor learn her holder name from a 409.
	bobRefused := func(addrs []string) {
		t.Helper()
		for _, c := range []struct {
			method, path, body string
			status             int
		}{
			{"POST", "/v1/acquire", `{"key":"jobs/x","holder":"bob/w1","ttl_ms":60000}`, 409},
			{"POST", "/v1/acquire", `{"key":"jobs/x","holder":"alice/w1","ttl_ms":60000}`, 403}, // a renew
			{"POST", "/v1/extend", fmt.Sprintf(`{"key":"jobs/x","holder":"alice/w1","token":%d,"ttl_ms":60000}`, tok), 403},
			{"POST", "/v1/release", fmt.Sprintf(`{"key":"jobs/x","holder":"alice/w1","token":%d}`, tok), 403},
			{"POST", "/v1/release", `{"key":"jobs/x","holder":"alice/w1"}`, 403},
			{"GET", "/v1/lock?key=jobs/x", "", 403},
			{"GET", "/v1/locks?prefix=jobs/", "", 403},
		} {
			r, raw := secureDo(t, hc, addrs, bob, c.method, c.path, c.body)
			// An answer may repeat the holder bob named, nothing more.
			leak := !strings.Contains(c.body, "alice") && strings.Contains(raw, "alice") ||
				strings.Contains(raw, fmt.Sprintf(`"token":%d`, tok))
			if r.status != c.status || leak {
				t.Errorf("bob's %s %s %s: %d %s; want %d naming neither alice (unless bob did) nor her token",
					c.method, c.path, c.body, r.status, raw, c.status)
			}
		}
		if out, errs, code := secureCLI(t, addrs, caFile, bob, "get", "jobs/x"); code != exitDenied || !strings.Contains(errs, "permission denied") || strings.Contains(out+errs, "alice") {
			t.Errorf("bob's get: exit %d %q %q", code, out, errs)
		}
		if out, errs, code := secureCLI(t, addrs, caFile, "", "get", "jobs/x"); code != exitDenied || !strings.Contains(errs, "authentication required") {
			t.Errorf("get without a token: exit %d %q %q", code, out, errs)
		}
	}
	bobRefused(all)
	stillHers(all, "after bob's attempts")

	// The raft ports refuse anyone without a certificate of the cluster's
	// CA: garbage over plain TCP, and a forged AppendEntries that releases
	// alice's lease over plain TCP, over TLS without a certificate, and
	// over TLS with another CA's certificate.
	rogue := tlstest.NewCA(t, "rogue CA").Issue(t, "mallory").TLS(t)
	tlsDial := func(cfg *tls.Config) func(string) (net.Conn, error) {
		return func(addr string) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		}
	}
	plain := func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }
	r, raw := secureDo(t, hc, all, admin, "GET", "/v1/cluster/members", "")
	applied, _ := r.body["applied_index"].(float64)
	if r.status != 200 || applied == 0 {
		t.Fatalf("members: %d %s", r.status, raw)
	}
	for _, n := range nodes {
		c, err := net.DialTimeout("tcp", n.raft, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("\x00forged append entries\x00\xff\xff\xff\xff"))
		io.Copy(io.Discard, c) // until the node closes it
		c.Close()
		for _, a := range []struct {
			name string
			dial func(string) (net.Conn, error)
		}{
			{"plain TCP", plain},
			{"TLS without a certificate", tlsDial(&tls.Config{RootCAs: pool})},
			// GetClientCertificate, not Certificates: Go's client sends no
			// certificate the server's list of acceptable CAs does not name.
			{"TLS with another CA's certificate", tlsDial(&tls.Config{RootCAs: pool,
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogue, nil }})},
		} {
			if err := forgedAppend(t, n.raft, uint64(applied), "jobs/x", "alice/w1", a.dial); err == nil {
				t.Errorf("%s's raft port answered a forged AppendEntries over %s", n.id, a.name)
			}
		}
	}
	stillHers(all, "after the forged raft traffic")

	// The leader is killed; the new one enforces the same rules, and
	// alice's lease is still hers under the same token.
	r, raw = secureDo(t, hc, all, admin, "GET", "/v1/cluster/members", "")
	old := slices.IndexFunc(nodes, func(n *snode) bool { return n.id == r.body["leader"] })
	if r.status != 200 || old < 0 {
		t.Fatalf("members: %d %s", r.status, raw)
	}
	nodes[old].p.cmd.Process.Signal(syscall.SIGKILL)
	<-nodes[old].p.done
	var rest []string
	var wantIDs []string
	for i, n := range nodes {
		wantIDs = append(wantIDs, n.id)
		if i != old {
			rest = append(rest, n.client)
		}
	}
	poll(t, "a new leader", func() bool {
		for _, a := range rest {
			r, _, err := secureCall(hc, a, admin, "GET", "/v1/cluster/members", "")
			if err == nil && r.status == 200 && r.body["ready"] == true && r.body["leader"] == r.body["node"] {
				return true
			}
		}
		return false
	})
	stillHers(rest, "on the new leader")
	bobRefused(rest)
	refusedMembership(rest, wantIDs)
	out, errs, code = secureCLI(t, rest, caFile, alice, "extend", "jobs/x", strconv.FormatUint(tok, 10), "--holder", "alice/w1", "--ttl", "10m")
	if code != 0 || strings.TrimSpace(out) != strconv.FormatUint(tok, 10) {
		t.Errorf("alice's extend on the new leader: exit %d %q %q; want %d", code, out, errs, tok)
	}
	stillHers(rest, "after alice's extend")
}

// The acl command takes --ca (and FENCELOCK_CLIENT_CA) like the other client
// commands, so that a cluster serving only TLS can be bootstrapped.
func TestSecureProcessACLCommandOverTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cluster CA")
	f := tlstest.Write(t, dir, "n1", ca, ca.Issue(t, "n1"))
	addr := freeAddr(t)
	startProc(t, dir, nil, "--listen", addr, "--data", "d", "--cert", f.Cert, "--key", f.Key, "--ca", f.CA)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	poll(t, "ready over TLS", func() bool {
		r, _, err := secureCall(hc, addr, "", "GET", "/readyz", "")
		return err == nil && r.status == 200
	})
	out, errs, code := secureCLI(t, []string{addr}, f.CA, "", "acl", "bootstrap")
	admin := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(admin, "flk_") {
		t.Fatalf("acl bootstrap with FENCELOCK_CLIENT_CA: exit %d %q %q", code, out, errs)
	}
	cmd := exec.Command(fencelockBinary(t), "acl", "whoami", "--addr", addr, "--ca", f.CA, "--auth-token", admin)
	cmd.Env = append(os.Environ(), "FENCELOCK_CLIENT_CA=")
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "admin" {
		t.Fatalf("acl whoami --ca: %v %q", err, out)
	}
}
