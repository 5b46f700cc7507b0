//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/clustersecret"
	"github.com/fencelock/fencelock/internal/testports"
)

// The harness: `fencelock server` processes on free loopback ports (or,
// for partitions, each in a network namespace of its own on a bridge), and
// what a fault needs to do to them. Polling with a deadline decides when
// something happened; nothing is decided by sleeping.

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// fencelockBinary builds cmd/fencelock once per test binary. Every fault
// run needs it, so this is where -short skips the fault suite; the
// checker's own tests, on hand-made histories, stay in the short tier.
func fencelockBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("fault suite (process tier: starts fencelock server processes): skipped by -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencelock-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "fencelock")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/fencelock/fencelock/cmd/fencelock").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// freeAddr is a loopback address for a process the test starts
// (internal/testports: none the kernel may give to another socket before
// the process binds it, none twice).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testports.Loopback(t)
}

// tailBuffer keeps the last 64 KiB a process wrote.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > 64<<10 {
		w.b = append([]byte(nil), w.b[len(w.b)-64<<10:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

type node struct {
	id           string
	client, raft string // host:port
	data         string
	ns           string // network namespace; "" on loopback
	ip           string // in ns

	cmd     *exec.Cmd
	done    chan struct{}
	log     *tailBuffer
	stopped bool // SIGSTOPped
}

func (n *node) running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

type cluster struct {
	t      *testing.T
	bin    string
	dir    string
	secret string // the cluster secret's file, given to every node
	nodes  []*node
	net    *bridgeNet // nil on loopback
	gen    int
}

// startCluster starts size nodes bootstrapped with --peers and waits for a
// ready leader. With netns, every node runs in a namespace of its own.
func startCluster(t *testing.T, size int, netns bool) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: fencelockBinary(t), dir: t.TempDir()}
	c.secret = writeSecret(t, c.dir)
	if netns {
		bn, err := newBridgeNet(size)
		if err != nil {
			t.Fatalf("network namespaces: %v", err)
		}
		c.net = bn
		t.Cleanup(bn.close)
	}
	var peers []string
	for i := range size {
		n := &node{id: fmt.Sprintf("n%d", i+1), data: filepath.Join(c.dir, fmt.Sprintf("n%d", i+1))}
		if c.net != nil {
			n.ns, n.ip = c.net.ns[i], c.net.ips[i]
			n.client, n.raft = n.ip+":7100", n.ip+":7101"
		} else {
			n.client, n.raft = freeAddr(t), freeAddr(t)
		}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.raft)
	}
	t.Cleanup(c.stopAll)
	for _, n := range c.nodes {
		c.start(n, "--peers", strings.Join(peers, ","))
	}
	c.leader(60 * time.Second)
	// A fault is only meaningful on a whole cluster: a node that did not
	// start (its port taken by another program meanwhile) would make a
	// minority of the rest.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.nodes {
		for {
			if !n.running() {
				t.Fatalf("harness: %s exited at start:\n%s", n.id, lastLines(n.log.String(), 5))
			}
			if _, err := members(n.client); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("harness: %s does not answer at %s", n.id, n.client)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// writeSecret writes a new cluster secret to a file only its owner
// reads, in dir, as the README has it done, and returns its path.
func writeSecret(t *testing.T, dir string) string {
	t.Helper()
	s, err := clustersecret.New()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "cluster.secret")
	if err := os.WriteFile(p, []byte(s.Encode()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *cluster) start(n *node, extra ...string) {
	c.t.Helper()
	args := append([]string{"server", "--id", n.id, "--listen", n.client, "--raft", n.raft, "--data", n.data, "--log-level", "warn",
		"--cluster-secret-file", c.secret}, extra...)
	if e := os.Getenv("FENCELOCK_TEST_ENGINE"); e != "" {
		args = append(args, "--engine", e) // the same suite on another engine (issue 28)
	}
	var cmd *exec.Cmd
	if n.ns != "" {
		// Each node has its own network namespace and a non-loopback
		// address; its client port is served without TLS: that takes
		// --insecure (its raft port runs TLS with the cluster secret).
		args = append(args, "--insecure")
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.ns, c.bin}, args...)...)
	} else {
		cmd = exec.Command(c.bin, args...)
	}
	n.log = &tailBuffer{}
	cmd.Stdout, cmd.Stderr = n.log, n.log
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting %s: %v", n.id, err)
	}
	n.cmd, n.done, n.stopped = cmd, make(chan struct{}), false
	done := n.done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
}

func (c *cluster) kill(n *node) {
	if !n.running() {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
	n.stopped = false
}

func (c *cluster) signal(n *node, sig syscall.Signal) {
	if n.running() {
		_ = n.cmd.Process.Signal(sig)
		n.stopped = sig == syscall.SIGSTOP
	}
}

func (c *cluster) stopAll() {
	for _, n := range c.nodes {
		c.kill(n)
	}
	if c.t.Failed() {
		for _, n := range c.nodes {
			if n.log != nil {
				c.t.Logf("%s (%s) log tail:\n%s", n.id, n.client, lastLines(n.log.String(), 30))
			}
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *cluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.client)
	}
	return out
}

type member struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
	Suffrage   string `json:"suffrage"`
}

type membersAnswer struct {
	Leader  string   `json:"leader"`
	Node    string   `json:"node"`
	Ready   bool     `json:"ready"`
	Members []member `json:"members"`
}

var probe = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func members(addr string) (membersAnswer, error) {
	var m membersAnswer
	resp, err := probe.Get("http://" + addr + "/v1/cluster/members")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return m, fmt.Errorf("members: HTTP %d", resp.StatusCode)
	}
	return m, json.NewDecoder(resp.Body).Decode(&m)
}

// findLeader is one look for a ready leader among the running nodes that
// are not excluded.
func (c *cluster) findLeader(exclude *node) *node {
	for _, n := range c.nodes {
		if n == exclude || !n.running() || n.stopped {
			continue
		}
		if m, err := members(n.client); err == nil && m.Ready && m.Leader == n.id {
			return n
		}
	}
	return nil
}

// leader polls, bounded, for a ready leader.
func (c *cluster) leader(within time.Duration) *node {
	c.t.Helper()
	n := c.waitLeader(nil, within)
	if n == nil {
		c.t.Fatalf("no ready leader within %v", within)
	}
	return n
}

// waitLeader polls, bounded, for a ready leader other than exclude; nil if
// none came.
func (c *cluster) waitLeader(exclude *node, within time.Duration) *node {
	deadline := time.Now().Add(within)
	for {
		if n := c.findLeader(exclude); n != nil {
			return n
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cli runs the fencelock binary (on the host: the cluster's client
// addresses are reachable from here in both set-ups).
func (c *cluster) cli(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// bridgeNet is one bridge on the host and a namespace per node, each with
// a veth pair into the bridge. A partition is made of blackhole routes
// inside the namespaces, so the host (the clients) still reaches every
// node while the nodes cannot reach each other.
type bridgeNet struct {
	prefix string // of every name it makes
	subnet int    // the third byte of 10.213.N.0/24
	bridge string
	ns     []string
	ips    []string
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netnsUnavailable says why namespaces cannot be used here, or "".
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "iproute2 (ip) is not installed"
	}
	name := "flprobe" + randHex(3)
	if err := ipCmd("netns", "add", name); err != nil {
		return err.Error()
	}
	_ = ipCmd("netns", "del", name)
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// bridges holds the names and subnets taken by this test binary: runs in
// parallel each need their own, and two bridges on one subnet would route
// one cluster's traffic into the other.
var bridges struct {
	sync.Mutex
	prefixes map[string]bool
	subnets  map[int]bool
}

// claimBridge picks a name prefix and a 10.213.N subnet that no other
// bridge of this binary holds and that no address on the host is in
// (another checkout's suite may be running).
func claimBridge() (prefix string, subnet int, err error) {
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").CombinedOutput()
	if err != nil {
		return "", 0, fmt.Errorf("ip addr show: %v: %s", err, strings.TrimSpace(string(out)))
	}
	bridges.Lock()
	defer bridges.Unlock()
	if bridges.prefixes == nil {
		bridges.prefixes, bridges.subnets = map[string]bool{}, map[int]bool{}
	}
	prefix = "fl" + randHex(2)
	for bridges.prefixes[prefix] {
		prefix = "fl" + randHex(2)
	}
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	for i := range 256 {
		n := (int(b[0]) + i) % 256
		if !bridges.subnets[n] && !strings.Contains(string(out), fmt.Sprintf(" 10.213.%d.", n)) {
			bridges.prefixes[prefix], bridges.subnets[n] = true, true
			return prefix, n, nil
		}
	}
	return "", 0, fmt.Errorf("no free subnet in 10.213.0.0/16")
}

func (bn *bridgeNet) release() {
	bridges.Lock()
	defer bridges.Unlock()
	delete(bridges.prefixes, bn.prefix)
	delete(bridges.subnets, bn.subnet)
}

func newBridgeNet(size int) (*bridgeNet, error) {
	prefix, n, err := claimBridge()
	if err != nil {
		return nil, err
	}
	bn := &bridgeNet{prefix: prefix, subnet: n}
	bn.bridge = bn.prefix + "br"
	subnet := fmt.Sprintf("10.213.%d", n)
	steps := [][]string{
		{"link", "add", bn.bridge, "type", "bridge"},
		{"addr", "add", subnet + ".1/24", "dev", bn.bridge},
		{"link", "set", bn.bridge, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			bn.close()
			return nil, err
		}
	}
	for i := range size {
		ns := fmt.Sprintf("%sn%d", bn.prefix, i+1)
		host, peer := fmt.Sprintf("%sh%d", bn.prefix, i+1), fmt.Sprintf("%sp%d", bn.prefix, i+1)
		ip := fmt.Sprintf("%s.%d", subnet, 10+i)
		bn.ns, bn.ips = append(bn.ns, ns), append(bn.ips, ip)
		steps := [][]string{
			{"netns", "add", ns},
			{"link", "add", host, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", ns},
			{"link", "set", host, "master", bn.bridge},
			{"link", "set", host, "up"},
			{"-n", ns, "addr", "add", ip + "/24", "dev", peer},
			{"-n", ns, "link", "set", peer, "up"},
			{"-n", ns, "link", "set", "lo", "up"},
			// A next hop that answers for nobody: frames for its made-up
			// address reach no interface, so what the silent classes
			// route through it vanishes without a word (connects hang,
			// open connections go quiet), as over a dead link.
			{"-n", ns, "neigh", "replace", bn.sink(), "lladdr", "02:00:00:00:de:ad", "dev", peer, "nud", "permanent"},
		}
		for _, s := range steps {
			if err := ipCmd(s...); err != nil {
				bn.close()
				return nil, err
			}
		}
	}
	return bn, nil
}

// sink is the next hop that answers for nobody, in the bridge's subnet.
func (bn *bridgeNet) sink() string { return fmt.Sprintf("10.213.%d.254", bn.subnet) }

func (bn *bridgeNet) close() {
	for _, ns := range bn.ns {
		_ = ipCmd("netns", "del", ns) // takes its end of the veth pair along
	}
	_ = ipCmd("link", "del", bn.bridge)
	bn.release()
}

// isolate cuts n off from every other node, both ways; clients on the host
// still reach all of them.
// silence routes, in both directions, everything between n and the other
// nodes through the sink, where it vanishes: nothing is
// refused, connects hang and open connections stop carrying anything.
// With clients, n's answers to the host (the test's clients) vanish too.
func (c *cluster) silence(n *node, cut, clients bool) error {
	verb := "add"
	if !cut {
		verb = "del"
	}
	for _, m := range c.nodes {
		if m == n {
			continue
		}
		if err := ipCmd("-n", n.ns, "route", verb, m.ip+"/32", "via", c.net.sink()); err != nil {
			return err
		}
		if err := ipCmd("-n", m.ns, "route", verb, n.ip+"/32", "via", c.net.sink()); err != nil {
			return err
		}
	}
	if clients {
		host := fmt.Sprintf("10.213.%d.1/32", c.net.subnet)
		if err := ipCmd("-n", n.ns, "route", verb, host, "via", c.net.sink()); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) isolate(n *node, cut bool) error {
	verb := "add"
	if !cut {
		verb = "del"
	}
	for _, m := range c.nodes {
		if m == n {
			continue
		}
		if err := ipCmd("-n", n.ns, "route", verb, "blackhole", m.ip+"/32"); err != nil {
			return err
		}
		if err := ipCmd("-n", m.ns, "route", verb, "blackhole", n.ip+"/32"); err != nil {
			return err
		}
	}
	return nil
}

// replace takes old out of the cluster with `fencelock cluster remove`,
// kills it, and joins a fresh node in its place with `server --join`,
// waiting until the leader counts the fresh node a voter. Loopback only.
func (c *cluster) replace(t *testing.T, old *node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The leader refuses a removal it cannot show leaves a quorum that
	// answers, which it learns at the client addresses the nodes announce
	// after they start.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ld := c.findLeader(nil); ld != nil {
			if m, err := members(ld.client); err == nil && !slices.ContainsFunc(m.Members, func(mm member) bool { return mm.ClientAddr == "" }) {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the leader does not know every node's client address within 30s")
		}
	}
	if out, err := c.cli(ctx, "cluster", "remove", "--id", old.id, "--addr", strings.Join(c.addrs(), ","), "--timeout", "60s"); err != nil {
		return fmt.Errorf("cluster remove %s: %v: %s", old.id, err, out)
	}
	c.kill(old)
	if c.waitLeader(old, 60*time.Second) == nil {
		return fmt.Errorf("no ready leader within 60s of removing %s", old.id)
	}
	c.gen++
	fresh := &node{id: fmt.Sprintf("%sr%d", old.id, c.gen), client: freeAddr(t), raft: freeAddr(t),
		data: filepath.Join(c.dir, fmt.Sprintf("%sr%d", old.id, c.gen))}
	var join []string
	for _, n := range c.nodes {
		if n != old {
			join = append(join, n.client)
		}
	}
	c.nodes[slices.Index(c.nodes, old)] = fresh
	c.start(fresh, "--join", strings.Join(join, ","))
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ld := c.findLeader(nil); ld != nil {
			if m, err := members(ld.client); err == nil && slices.ContainsFunc(m.Members, func(mm member) bool {
				return mm.ID == fresh.id && strings.EqualFold(mm.Suffrage, "voter")
			}) {
				return nil
			}
		}
	}
	return fmt.Errorf("%s, joined in place of %s, is not a voter within 60s", fresh.id, old.id)
}

// TestSilenceDropsQuietly: the silent classes' links drop without a word —
// a connect to a silenced node times out instead of being refused — and
// healing them gives the node back.
func TestSilenceDropsQuietly(t *testing.T) {
	if why := netnsUnavailable(); why != "" {
		t.Skipf("skipping: %s", why)
	}
	t.Parallel()
	c := startCluster(t, 3, true)
	n := c.nodes[0]
	if err := c.silence(n, true, true); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", n.client, time.Second)
	var ne net.Error
	if err == nil {
		conn.Close()
		t.Fatal("a silenced node took a connection")
	}
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("connect to a silenced node: %v; want it to hang until its timeout", err)
	}
	// From a peer's namespace too (where a blackhole route would refuse
	// the connect at once): timeout(1) ends it, with status 124.
	peer := c.nodes[1]
	dial := exec.Command("ip", "netns", "exec", peer.ns, "timeout", "1", "bash", "-c", "exec 3<>/dev/tcp/"+strings.Replace(n.raft, ":", "/", 1))
	if out, err := dial.CombinedOutput(); dial.ProcessState == nil || dial.ProcessState.ExitCode() != 124 {
		t.Fatalf("connect from %s to silenced %s: %v %s; want it to hang", peer.id, n.raft, err, out)
	}
	if err := c.silence(n, false, true); err != nil {
		t.Fatal(err)
	}
	conn, err = net.DialTimeout("tcp", n.client, 5*time.Second)
	if err != nil {
		t.Fatalf("connect after healing: %v", err)
	}
	conn.Close()
}
