//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The README's three-node cluster with its one extra step (issue 41): a
// secret made once, in a file only its owner reads, given to every node.
// A node restarted without it, or without its raft address, refuses to
// start; one with another secret is refused by the others, who count
// it; with the secret again it catches up.
func TestClusterProcessReadmeClusterWithASecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mk := exec.Command("sh", "-c", `umask 077; "$0" cluster secret > cluster.secret`, fencelockBinary(t))
	mk.Dir = dir
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("cluster secret: %v %s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "cluster.secret")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cluster.secret: %v %v", fi.Mode(), err)
	}
	type node struct{ id, client, raft string }
	nodes := []node{{"n1", freeAddr(t), freeAddr(t)}, {"n2", freeAddr(t), freeAddr(t)}, {"n3", freeAddr(t), freeAddr(t)}}
	args := func(n node, extra ...string) []string {
		return append([]string{"--id", n.id, "--listen", n.client, "--raft", n.raft, "--data", n.id, "--log-level", "warn"}, extra...)
	}
	procs := map[string]*proc{}
	for i, n := range nodes {
		extra := []string{"--cluster-secret-file", "cluster.secret"}
		if i > 0 {
			extra = append(extra, "--join", nodes[0].client)
		}
		procs[n.id] = startProc(t, dir, nil, args(n, extra...)...)
		if i == 0 {
			procs[n.id].waitReady(n.client)
		}
	}
	poll(t, "three voters", func() bool {
		out, code := clusterCLI(t, []string{nodes[0].client}, "members")
		v, _, _ := voterLines(out)
		return code == 0 && v == 3
	})

	n3 := nodes[2]
	procs[n3.id].cmd.Process.Signal(syscall.SIGTERM)
	if code := procs[n3.id].exitCode(); code != 0 {
		t.Fatalf("n3 exit %d after SIGTERM", code)
	}
	noSecret := []string{"FENCELOCK_CLUSTER_SECRET_FILE="}
	p := startProc(t, dir, noSecret, args(n3)...)
	if code := p.exitCode(); code != exitUsage || !strings.Contains(p.stderr.String(), "--raft needs a credential: give every node the same --cluster-secret-file FILE") {
		t.Fatalf("n3 without the secret: exit %d\n%s", code, p.stderr.String())
	}
	p = startProc(t, dir, noSecret, "--id", n3.id, "--listen", n3.client, "--data", n3.id)
	if code := p.exitCode(); code != 1 || !strings.Contains(p.stderr.String(), "belongs to a cluster of 3 voters; start this node with its raft address (--raft) and the cluster's secret (--cluster-secret-file)") {
		t.Fatalf("n3 without its raft address: exit %d\n%s", code, p.stderr.String())
	}

	refused := func() float64 {
		return metricValue(metricsText(t, nodes[0].client), `fencelock_raft_connections_refused_total{reason="handshake"}`)
	}
	before := refused()
	mk = exec.Command("sh", "-c", `umask 077; "$0" cluster secret > other.secret`, fencelockBinary(t))
	mk.Dir = dir
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("cluster secret: %v %s", err, out)
	}
	p = startProc(t, dir, nil, args(n3, "--cluster-secret-file", "other.secret")...)
	poll(t, "n1 to refuse n3 with another secret", func() bool { return refused() > before })
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.exitCode()

	// A write n3 missed, then n3 with the secret again catches up.
	l := leaderOf(t, nodes[0].client, nodes[1].client)
	if r, err := call(l, "POST", "/v1/acquire", `{"key":"k","holder":"a","ttl_ms":600000}`); err != nil || r.status != 200 {
		t.Fatalf("acquire: %v %+v", err, r)
	}
	m, err := members(l)
	if err != nil {
		t.Fatal(err)
	}
	startProc(t, dir, nil, args(n3, "--cluster-secret-file", "cluster.secret")...)
	poll(t, "n3 to apply the write it missed", func() bool {
		m3, err := members(n3.client)
		return err == nil && m3.AppliedIndex >= m.AppliedIndex
	})
}

// leaderOf is whichever of addrs answers a members call naming itself
// leader.
func leaderOf(t *testing.T, addrs ...string) string {
	t.Helper()
	var l string
	poll(t, "a leader", func() bool {
		for _, a := range addrs {
			if m, err := members(a); err == nil && m.Leader != "" && m.Leader == m.Node {
				l = a
				return true
			}
		}
		return false
	})
	return l
}

// --insecure-raft runs a cluster node without a credential, and says so
// at start.
func TestServerProcessInsecureRaftWarns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	client := freeAddr(t)
	p := startProc(t, dir, nil, "--id", "n1", "--listen", client, "--raft", freeAddr(t), "--data", filepath.Join(dir, "n1"), "--insecure-raft")
	p.waitReady(client)
	if s := p.stderr.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "raft port without a credential (--insecure-raft)") {
		t.Fatalf("no warning at start:\n%s", s)
	}
}
