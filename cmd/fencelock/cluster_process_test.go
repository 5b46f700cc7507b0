//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Three `fencelock server` processes on loopback, driven by workers that
// talk HTTP directly: they follow not_leader, retry with the same
// request_id until they get a definite answer, and record every answer.
// After each disruption the invariants are checked on the answers and on
// the surviving cluster; nothing is decided by sleeping.

type pnode struct {
	id, client, raft, data string
	p                      *proc
}

type pcluster struct {
	t *testing.T
	// engine is each node's --engine; empty: FENCELOCK_TEST_ENGINE's,
	// else the default.
	engine string
	nodes  []*pnode
	mu     sync.Mutex
	guess  string // the client address that last answered as leader
}

func startPCluster(t *testing.T) *pcluster {
	t.Helper()
	return startPClusterOn(t, "")
}

// startPClusterOn is startPCluster on engine (empty: as startPCluster).
func startPClusterOn(t *testing.T, engine string) *pcluster {
	t.Helper()
	dir := t.TempDir()
	c := &pcluster{t: t, engine: engine}
	var peers []string
	for i := range 3 {
		n := &pnode{id: fmt.Sprintf("n%d", i+1), client: freeAddr(t), raft: freeAddr(t),
			data: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.raft)
	}
	for _, n := range c.nodes {
		c.start(n, "--peers", strings.Join(peers, ","))
	}
	c.waitLeader()
	return c
}

func (c *pcluster) start(n *pnode, extra ...string) {
	c.t.Helper()
	args := append([]string{"--id", n.id, "--listen", n.client, "--raft", n.raft, "--data", n.data, "--log-level", "error"}, extra...)
	engine := c.engine
	if engine == "" {
		engine = os.Getenv("FENCELOCK_TEST_ENGINE")
	}
	if engine != "" {
		args = append(args, "--engine", engine)
	}
	n.p = startProc(c.t, c.t.TempDir(), nil, args...)
}

type membersAnswer struct {
	Leader        string `json:"leader"`
	LeaderAddr    string `json:"leader_addr"`
	Node          string `json:"node"`
	Ready         bool   `json:"ready"`
	AppliedIndex  uint64 `json:"applied_index"`
	AppliedTimeMs int64  `json:"applied_time_ms"`
}

var shortClient = &http.Client{Timeout: 2 * time.Second}

func members(addr string) (membersAnswer, error) {
	var m membersAnswer
	resp, err := shortClient.Get("http://" + addr + "/v1/cluster/members")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	return m, json.NewDecoder(resp.Body).Decode(&m)
}

// waitLeader polls, bounded, until some node answers as the ready leader.
func (c *pcluster) waitLeader() *pnode {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			if m, err := members(n.client); err == nil && m.Ready && m.Leader == n.id {
				c.mu.Lock()
				c.guess = n.client
				c.mu.Unlock()
				return n
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no ready leader within 30s")
	return nil
}

// do sends one request until a definite answer (anything but 503 or a
// transport error), following not_leader; ok is false if stop closed or
// the bound passed first.
func (c *pcluster) do(stop <-chan struct{}, method, path, body string) (reply, bool) {
	deadline := time.Now().Add(30 * time.Second)
	var last string
	defer func() {
		if time.Now().After(deadline) {
			c.t.Logf("%s %s %s: no definite answer in 30s; last: %s", method, path, body, last)
		}
	}()
	for i := 0; time.Now().Before(deadline); i++ {
		select {
		case <-stop:
			return reply{}, false
		default:
		}
		c.mu.Lock()
		addr := c.guess
		c.mu.Unlock()
		if addr == "" {
			addr = c.nodes[i%len(c.nodes)].client
		}
		r, err := callWith(shortClient, addr, method, path, body)
		last = fmt.Sprint(addr, " ", r, " ", err)
		if err == nil && r.status != http.StatusServiceUnavailable {
			c.mu.Lock()
			c.guess = addr
			c.mu.Unlock()
			return r, true
		}
		if err == nil && r.body["leader"] != nil && r.body["leader"] != "" {
			c.mu.Lock()
			c.guess = r.body["leader"].(string)
			c.mu.Unlock()
			continue
		}
		// Down, stopped or leaderless: try the next node.
		c.mu.Lock()
		if c.guess == addr {
			c.guess = c.nodes[(slices.IndexFunc(c.nodes, func(n *pnode) bool { return n.client == addr })+1)%len(c.nodes)].client
		}
		c.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	return reply{}, false
}

func callWith(hc *http.Client, addr, method, path, body string) (reply, error) {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // what every client sends with a body
	}
	resp, err := hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&r.body); err != nil {
		return reply{}, err
	}
	return r, nil
}

// ledger is every definite answer the workers got.
type ledger struct {
	mu       sync.Mutex
	grants   []*grantRecord
	byReq    map[string]uint64 // request id -> token
	perRun   map[string][]uint64
	errs     []string
	timeSeen []int64 // applied cluster time on ready leaders, in order
}

func newLedger() *ledger {
	return &ledger{byReq: map[string]uint64{}, perRun: map[string][]uint64{}}
}

func (l *ledger) errorf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

// load runs workers until stop: each acquires the shared key (and always
// releases it) or a key of its own (released every other time), with a
// request id per attempt series; an intruder tries to release and extend
// the shared key it never holds; a monitor records the leader's applied
// cluster time.
func (c *pcluster) load(l *ledger, workers int, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	// A phase stopped mid-hold leaves its shared key held: each load
	// phase contends on a key of its own.
	shared := fmt.Sprintf("shared/%d", time.Now().UnixNano())
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d-%d", w, time.Now().UnixNano())
			for i := 0; ; i++ {
				key := fmt.Sprintf("own/%s/%d", holder, i)
				if i%3 == 0 {
					key = shared
				}
				req := fmt.Sprintf("%s-a%d", holder, i)
				r, ok := c.do(stop, "POST", "/v1/acquire",
					fmt.Sprintf(`{"key":%q,"holder":%q,"ttl_ms":600000,"wait_ms":1000,"request_id":%q}`, key, holder, req))
				if !ok {
					return
				}
				if r.status != 200 {
					if r.status != 409 {
						l.errorf("acquire %s/%s: %d %v", key, holder, r.status, r.body)
					}
					continue
				}
				g := &grantRecord{key: key, holder: holder, token: token(r)}
				l.mu.Lock()
				if prev, seen := l.byReq[req]; seen && prev != g.token {
					l.errs = append(l.errs, fmt.Sprintf("request %s answered tokens %d and %d", req, prev, g.token))
				}
				l.byReq[req] = g.token
				l.grants = append(l.grants, g)
				l.perRun[holder] = append(l.perRun[holder], g.token)
				g.releaseAttempted = key == shared || i%2 == 1
				l.mu.Unlock()
				if !g.releaseAttempted {
					continue
				}
				r, ok = c.do(stop, "POST", "/v1/release",
					fmt.Sprintf(`{"key":%q,"holder":%q,"token":%d,"request_id":"%s-r%d"}`, key, holder, g.token, holder, i))
				if !ok {
					return
				}
				l.mu.Lock()
				g.released = r.status == 200 && r.body["released"] == true
				l.mu.Unlock()
				if !g.released {
					l.errorf("release of %s/%s token %d answered %d %v", key, holder, g.token, r.status, r.body)
				}
			}
		}()
	}
	wg.Add(2)
	go func() { // the intruder
		defer wg.Done()
		for i := 0; ; i++ {
			r, ok := c.do(stop, "POST", "/v1/release", fmt.Sprintf(`{"key":%q,"holder":"intruder"}`, shared))
			if !ok {
				return
			}
			if r.status != 200 || r.body["released"] != false {
				l.errorf("a non-holder's release answered %d %v", r.status, r.body)
			}
			r, ok = c.do(stop, "POST", "/v1/extend", fmt.Sprintf(`{"key":%q,"holder":"intruder","token":%d,"ttl_ms":600000}`, shared, i+1))
			if !ok {
				return
			}
			if r.status != 409 {
				l.errorf("a non-holder's extend answered %d %v", r.status, r.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() { // the cluster-time monitor
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range c.nodes {
				if m, err := members(n.client); err == nil && m.Ready && m.Leader == m.Node {
					l.mu.Lock()
					l.timeSeen = append(l.timeSeen, m.AppliedTimeMs)
					l.mu.Unlock()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return wg.Wait
}

// grantsSoFar is the number of acknowledged grants.
func (l *ledger) grantsSoFar() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.grants)
}

func (c *pcluster) waitGrants(l *ledger, n int) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for l.grantsSoFar() < n {
		if time.Now().After(deadline) {
			l.mu.Lock()
			errs := l.errs
			l.mu.Unlock()
			for _, nd := range c.nodes {
				m, err := members(nd.client)
				c.t.Logf("%s: %+v %v", nd.id, m, err)
			}
			c.t.Fatalf("only %d of %d grants acknowledged; errors: %v", l.grantsSoFar(), n, errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check verifies the invariants on the ledger and on the cluster.
func (c *pcluster) check(l *ledger) {
	t := c.t
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Error(e)
	}
	// Tokens: never repeated across answers to different requests, and
	// strictly increasing in each worker's sequence.
	owner := map[uint64]string{}
	for req, tok := range l.byReq {
		if o, dup := owner[tok]; dup {
			t.Errorf("token %d answered to %s and to %s", tok, o, req)
		}
		owner[tok] = req
	}
	for h, toks := range l.perRun {
		if !slices.IsSorted(toks) || len(slices.Compact(slices.Clone(toks))) != len(toks) {
			t.Errorf("%s got tokens out of order: %v", h, toks)
		}
	}
	// No two live holders of the shared key: with a 10-minute TTL nothing
	// expires during the test, so every acknowledged grant but the last
	// must have been released before the next one was granted.
	byKey := map[string][]*grantRecord{}
	for _, g := range l.grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	for key, gs := range byKey {
		slices.SortFunc(gs, func(a, b *grantRecord) int { return int(a.token) - int(b.token) })
		for i := 0; i+1 < len(gs); i++ {
			if !gs[i].releaseAttempted {
				t.Errorf("%s granted to %s (token %d) while %s held token %d", key, gs[i+1].holder, gs[i+1].token,
					gs[i].holder, gs[i].token)
			}
		}
	}
	// Cluster time as seen on ready leaders never went backwards.
	for i := 1; i < len(l.timeSeen); i++ {
		if l.timeSeen[i] < l.timeSeen[i-1] {
			t.Errorf("cluster time went backwards: %d ms after %d ms", l.timeSeen[i], l.timeSeen[i-1])
		}
	}
	// No acknowledged grant lost; released ones stay released.
	latest := map[string]*grantRecord{}
	var maxTok uint64
	for _, g := range l.grants {
		maxTok = max(maxTok, g.token)
		if cur := latest[g.key]; cur == nil || g.token > cur.token {
			latest[g.key] = g
		}
	}
	never := make(chan struct{})
	for key, g := range latest {
		r, ok := c.do(never, "GET", "/v1/lock?key="+key, "")
		if !ok {
			t.Fatalf("GET %s: no answer", key)
		}
		switch {
		case g.released:
			if r.status == 200 && token(r) == g.token {
				t.Errorf("%s: released token %d is live again", key, g.token)
			}
		case g.releaseAttempted:
		default:
			if r.status != 200 || r.body["holder"] != g.holder || token(r) != g.token {
				t.Errorf("%s: acknowledged lease %s/%d lost: %d %v", key, g.holder, g.token, r.status, r.body)
			}
			// A non-holder cannot release it.
			if r, _ := c.do(never, "POST", "/v1/release", fmt.Sprintf(`{"key":%q,"holder":"intruder"}`, key)); r.body["released"] != false {
				t.Errorf("%s: a non-holder released it: %v", key, r.body)
			}
		}
	}
	r, ok := c.do(never, "POST", "/v1/acquire", fmt.Sprintf(`{"key":"probe/%d","holder":"probe","ttl_ms":600000}`, maxTok))
	if !ok || r.status != 200 || token(r) <= maxTok {
		t.Errorf("next token %d, not above the %d answered before: %v", token(r), maxTok, r.body)
	}
	l.byReq[fmt.Sprintf("probe-%d", maxTok)] = token(r)
	l.grants = append(l.grants, &grantRecord{key: fmt.Sprintf("probe/%d", maxTok), holder: "probe", token: token(r)})
}

// converge waits until every live node has applied what the leader has.
func (c *pcluster) converge() {
	c.t.Helper()
	leader := c.waitLeader()
	m, err := members(leader.client)
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.nodes {
		for {
			if o, err := members(n.client); err == nil && o.AppliedIndex >= m.AppliedIndex && o.Leader == leader.id {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s did not catch up to index %d", n.id, m.AppliedIndex)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestClusterProcessKill9LeaderUnderLoad(t *testing.T) { testKill9LeaderUnderLoad(t, "") }

// The same on the etcd engine (issue 28).
func TestClusterProcessKill9LeaderUnderLoadEtcd(t *testing.T) { testKill9LeaderUnderLoad(t, "etcd") }

func testKill9LeaderUnderLoad(t *testing.T, engine string) {
	t.Parallel()
	c := startPClusterOn(t, engine)
	l := newLedger()
	stop := make(chan struct{})
	wait := c.load(l, 6, stop)
	c.waitGrants(l, 60)
	old := c.waitLeader()
	old.p.cmd.Process.Signal(syscall.SIGKILL)
	<-old.p.done
	before := l.grantsSoFar()
	c.waitGrants(l, before+60) // the survivors elect a leader and serve
	if nl := c.waitLeader(); nl == old {
		t.Fatal("the killed node leads")
	}
	c.start(old)
	c.waitGrants(l, l.grantsSoFar()+30)
	close(stop)
	wait()
	c.converge()
	c.check(l)
	t.Logf("%d grants acknowledged; %d before the kill", len(l.grants), before)
}

func TestClusterProcessSIGSTOPLeaderPastItsLeadership(t *testing.T) { testSIGSTOPLeader(t, "") }

// The same on the etcd engine (issue 28).
func TestClusterProcessSIGSTOPLeaderPastItsLeadershipEtcd(t *testing.T) { testSIGSTOPLeader(t, "etcd") }

func testSIGSTOPLeader(t *testing.T, engine string) {
	t.Parallel()
	c := startPClusterOn(t, engine)
	l := newLedger()
	stop := make(chan struct{})
	wait := c.load(l, 6, stop)
	c.waitGrants(l, 60)
	old := c.waitLeader()
	old.p.cmd.Process.Signal(syscall.SIGSTOP)
	// Past its leadership: the others elect a leader and serve.
	deadline := time.Now().Add(30 * time.Second)
	for {
		nl := c.waitLeader()
		if nl != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader while the old one is stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitGrants(l, l.grantsSoFar()+60)
	// A key granted while the old leader was stopped: right after SIGCONT
	// the old leader must not answer a read from its stale state.
	l.mu.Lock()
	fresh := l.grants[len(l.grants)-1]
	l.mu.Unlock()
	old.p.cmd.Process.Signal(syscall.SIGCONT)
	for _, path := range []string{"/v1/lock?key=" + fresh.key, fmt.Sprintf("/v1/check?key=%s&token=%d", fresh.key, fresh.token)} {
		r, err := callWith(shortClient, old.client, "GET", path, "")
		if err == nil && r.status != http.StatusServiceUnavailable && (r.status != 200 || token(r) == 0 && r.body["valid"] != true) {
			t.Errorf("the resumed old leader answered GET %s from stale state: %d %v", path, r.status, r.body)
		}
	}
	c.waitGrants(l, l.grantsSoFar()+30)
	close(stop)
	wait()
	c.converge()
	c.check(l)
}

// TestClusterProcessRestartAll stops every node gracefully, then kills
// every node at once under load, restarting all each time.
func TestClusterProcessRestartAll(t *testing.T) { testRestartAll(t, "") }

// The same on the etcd engine (issue 28).
func TestClusterProcessRestartAllEtcd(t *testing.T) { testRestartAll(t, "etcd") }

func testRestartAll(t *testing.T, engine string) {
	t.Parallel()
	c := startPClusterOn(t, engine)
	l := newLedger()
	stop := make(chan struct{})
	wait := c.load(l, 4, stop)
	c.waitGrants(l, 60)
	close(stop)
	wait()
	c.check(l)
	for _, n := range c.nodes {
		n.p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range c.nodes {
		if code := n.p.exitCode(); code != 0 {
			t.Fatalf("%s exited %d", n.id, code)
		}
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	c.converge()
	c.check(l)
	// Then all three killed at once under load, and restarted: requests in
	// flight are retried with their request ids until the cluster is back.
	stop = make(chan struct{})
	wait = c.load(l, 4, stop)
	c.waitGrants(l, l.grantsSoFar()+30)
	for _, n := range c.nodes {
		n.p.cmd.Process.Signal(syscall.SIGKILL)
	}
	for _, n := range c.nodes {
		<-n.p.done
	}
	before := l.grantsSoFar()
	for _, n := range c.nodes {
		c.start(n)
	}
	c.waitGrants(l, before+30)
	close(stop)
	wait()
	c.converge()
	c.check(l)
}

func TestBenchAgainstClusterProcess(t *testing.T) {
	t.Parallel()
	c := startPCluster(t)
	leader := c.waitLeader()
	var addrs []string
	for _, n := range c.nodes {
		if n != leader {
			addrs = append(addrs, n.client) // followers first: the bench must find the leader
		}
	}
	addrs = append(addrs, leader.client)
	out, err := exec.Command(fencelockBinary(t), "bench", "--addr", strings.Join(addrs, ","), "--clients", "4", "--duration", "300ms").Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^cycles=[1-9]\d* errors=0 `).Match(out) {
		t.Fatalf("bench against the cluster:\n%s", out)
	}
}

// Three processes formed with --join, inspected and shrunk with the
// cluster subcommand.
func TestClusterProcessJoinMembersRemove(t *testing.T) { testJoinMembersRemove(t, "") }

// The same on the etcd engine (issue 28).
func TestClusterProcessJoinMembersRemoveEtcd(t *testing.T) { testJoinMembersRemove(t, "etcd") }

func testJoinMembersRemove(t *testing.T, engine string) {
	t.Parallel()
	dir := t.TempDir()
	c := &pcluster{t: t, engine: engine}
	for i := range 3 {
		c.nodes = append(c.nodes, &pnode{id: fmt.Sprintf("n%d", i+1), client: freeAddr(t), raft: freeAddr(t),
			data: filepath.Join(dir, fmt.Sprintf("n%d", i+1))})
	}
	c.start(c.nodes[0])
	c.nodes[0].p.waitReady(c.nodes[0].client)
	for _, n := range c.nodes[1:] {
		c.start(n, "--join", c.nodes[0].client)
	}
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.client)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(fencelockBinary(t), append(append([]string{"cluster"}, args...), "--addr", strings.Join(addrs, ","))...).CombinedOutput()
		if err != nil {
			t.Fatalf("cluster %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := cli("members")
		if strings.Count(out, "voter") == 3 && strings.Contains(out, c.nodes[2].client) {
			if !regexp.MustCompile(`(?m)^n1 .* voter +\* +leader `).MatchString(out) {
				t.Fatalf("n1 should lead:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the joined nodes never showed up:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := cli("remove", "--id", "n3"); !strings.Contains(out, "removed n3") {
		t.Fatalf("remove: %s", out)
	}
	if out := cli("members"); strings.Count(out, "voter") != 2 || strings.Contains(out, c.nodes[2].raft) {
		t.Fatalf("after remove:\n%s", out)
	}
	err := exec.Command(fencelockBinary(t), "cluster", "remove").Run()
	var xe *exec.ExitError
	if !errors.As(err, &xe) || xe.ExitCode() != 2 {
		t.Fatalf("remove without --id: %v, want exit status 2", err)
	}
}

// A node stopped while the others write far more than they keep in their
// logs catches up from a snapshot (InstallSnapshot), and the cluster keeps
// every invariant when the leader is then killed.
func TestClusterProcessLaggingNodeCatchesUpFromASnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := &pcluster{t: t}
	var peers []string
	for i := range 3 {
		n := &pnode{id: fmt.Sprintf("n%d", i+1), client: freeAddr(t), raft: freeAddr(t),
			data: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.raft)
	}
	snap := []string{"--snapshot-threshold", "40", "--trailing-logs", "10", "--snapshot-interval", "50ms"}
	for _, n := range c.nodes {
		c.start(n, append([]string{"--peers", strings.Join(peers, ",")}, snap...)...)
	}
	leader := c.waitLeader()
	var lag *pnode
	for _, n := range c.nodes {
		if n != leader {
			lag = n
		}
	}
	lag.p.cmd.Process.Signal(syscall.SIGTERM)
	if code := lag.p.exitCode(); code != 0 {
		t.Fatalf("%s exited %d", lag.id, code)
	}
	l := newLedger()
	stop := make(chan struct{})
	wait := c.load(l, 4, stop)
	c.waitGrants(l, 150)
	close(stop)
	wait()
	// The leader's log must have been compacted past what the stopped
	// node has, so that only a snapshot can bring it back.
	snapshotIn := func(n *pnode) bool {
		snaps, _ := filepath.Glob(filepath.Join(n.data, "snapshots", "*", "state.bin"))
		return len(snaps) > 0
	}
	leader = c.waitLeader()
	poll(t, "the leader's first snapshot", func() bool { return snapshotIn(leader) })
	c.start(lag, snap...)
	c.converge()
	poll(t, lag.id+"'s installed snapshot", func() bool { return snapshotIn(lag) })
	c.check(l)
	// Lose the leader: the caught-up node is now needed for a quorum.
	leader = c.waitLeader()
	leader.p.cmd.Process.Signal(syscall.SIGKILL)
	<-leader.p.done
	if nl := c.waitLeader(); nl == leader {
		t.Fatal("the killed node leads")
	}
	c.check(l)
}

// poll waits, bounded, for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
