//go:build unix

package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// cluster join/remove against real processes: each says whether the
// change was applied, by its message and its exit status.

// clusterCLI runs 'fencelock cluster ARGS --addr ADDRS' and returns its
// combined output and exit status.
func clusterCLI(t *testing.T, addrs []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(fencelockBinary(t), append(append([]string{"cluster"}, args...), "--addr", strings.Join(addrs, ","))...)
	out, err := cmd.CombinedOutput()
	var xe *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &xe):
		return string(out), xe.ExitCode()
	}
	t.Fatalf("cluster %v: %v", args, err)
	return "", 0
}

func (c *pcluster) clients() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.client)
	}
	return out
}

// voterCount is how many of the member lines of 'cluster members' say
// voter (not nonvoter), and whether every node's client address is known.
func voterLines(out string) (voters, nonvoters int, ids []string) {
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		ids = append(ids, f[0])
		switch f[3] {
		case "voter":
			voters++
		case "nonvoter":
			nonvoters++
		}
	}
	return voters, nonvoters, ids
}

// everyClientKnown: no member line of 'cluster members' has "-" in its
// CLIENT column.
func everyClientKnown(out string) bool {
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 3 && f[2] == "-" {
			return false
		}
	}
	return true
}

func TestClusterProcessMembershipChanges(t *testing.T) {
	t.Parallel()
	c := startPCluster(t)
	addrs := c.clients()
	poll(t, "every member's client address", func() bool {
		out, code := clusterCLI(t, addrs, "members")
		return code == 0 && everyClientKnown(out)
	})

	// The reproduction: a ghost is refused and changes nothing.
	out, code := clusterCLI(t, addrs, "join", "--id", "ghost", "--raft", freeAddr(t), "--client", freeAddr(t))
	if code != 1 || !strings.Contains(out, "refused, nothing changed") || !strings.Contains(out, "ghost") {
		t.Fatalf("join of a ghost: exit %d\n%s", code, out)
	}
	out, _ = clusterCLI(t, addrs, "members")
	if v, nv, _ := voterLines(out); v != 3 || nv != 0 || strings.Contains(out, "ghost") {
		t.Fatalf("members after the ghost join:\n%s", out)
	}
	if r, ok := c.do(nil, "POST", "/v1/acquire", `{"key":"k","holder":"a","ttl_ms":60000}`); !ok || r.status != 200 {
		t.Fatalf("the cluster stopped serving: %v", r)
	}

	// A real node started with --join (pointed at nothing, so only the
	// CLI adds it) joins and is promoted.
	n4 := &pnode{id: "n4", client: freeAddr(t), raft: freeAddr(t), data: filepath.Join(t.TempDir(), "n4")}
	c.start(n4, "--join", freeAddr(t))
	poll(t, "n4 to serve", func() bool { _, err := members(n4.client); return err == nil })
	out, code = clusterCLI(t, addrs, "join", "--id", "n4", "--raft", n4.raft, "--client", n4.client)
	if code != 0 || !strings.Contains(out, "applied: n4 joined and is a voter") {
		t.Fatalf("join of n4: exit %d\n%s", code, out)
	}
	if v, nv, _ := voterLines(out); v != 4 || nv != 0 {
		t.Fatalf("members after n4 joined:\n%s", out)
	}
	c.nodes = append(c.nodes, n4)
	addrs = c.clients()

	// Removing the leader hands over; the CLI follows to the new leader.
	old := c.waitLeader()
	out, code = clusterCLI(t, addrs, "remove", "--id", old.id)
	if code != 0 || !strings.Contains(out, "applied: removed "+old.id) {
		t.Fatalf("remove of the leader %s: exit %d\n%s", old.id, code, out)
	}
	var rest []*pnode
	for _, n := range c.nodes {
		if n != old {
			rest = append(rest, n)
		}
	}
	c.nodes = rest
	addrs = c.clients()
	nl := c.waitLeader()
	if nl == old {
		t.Fatal("the removed node leads")
	}
	// Asked of the leader, which has the removal: 'cluster members' shows
	// the configuration of the node that answers, and a follower may not
	// have the entry yet when the leader has committed it.
	out, _ = clusterCLI(t, append([]string{nl.client}, addrs...), "members")
	if v, _, ids := voterLines(out); v != 3 || strings.Contains(fmt.Sprint(ids), old.id) {
		t.Fatalf("members after removing the leader:\n%s", out)
	}

	// With one of three down, removing another would leave one of two.
	var down, victim *pnode
	for _, n := range c.nodes {
		switch {
		case n == nl:
		case down == nil:
			down = n
		default:
			victim = n
		}
	}
	down.p.cmd.Process.Signal(syscall.SIGKILL)
	<-down.p.done
	out, code = clusterCLI(t, addrs, "remove", "--id", victim.id)
	if code != 1 || !strings.Contains(out, "refused, nothing changed") || !strings.Contains(out, "no_quorum") {
		t.Fatalf("remove that loses quorum: exit %d\n%s", code, out)
	}
	out, _ = clusterCLI(t, append([]string{nl.client}, addrs...), "members")
	if v, _, _ := voterLines(out); v != 3 {
		t.Fatalf("members after the refused remove:\n%s", out)
	}
	if r, ok := c.do(nil, "POST", "/v1/acquire", `{"key":"k2","holder":"a","ttl_ms":60000}`); !ok || r.status != 200 {
		t.Fatalf("the cluster stopped serving: %v", r)
	}
}

// A node without --raft refuses joins; a call nobody answers exits 3; a
// call that was sent and never answered exits 5 (unknown).
func TestClusterProcessJoinExitStatuses(t *testing.T) {
	t.Parallel()
	single := freeAddr(t)
	p := startProc(t, t.TempDir(), nil, "--listen", single, "--data", "d", "--log-level", "error")
	p.waitReady(single)
	out, code := clusterCLI(t, []string{single}, "join", "--id", "n2", "--raft", freeAddr(t), "--client", freeAddr(t))
	if code != 1 || !strings.Contains(out, "restart it with --raft") {
		t.Fatalf("join on a node without --raft: exit %d\n%s", code, out)
	}
	out, code = clusterCLI(t, []string{freeAddr(t)}, "join", "--id", "n2", "--raft", freeAddr(t), "--client", freeAddr(t), "--timeout", "1s")
	if code != 3 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("join with no node up: exit %d\n%s", code, out)
	}
	// A listener that takes the request and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	out, code = clusterCLI(t, []string{ln.Addr().String()}, "remove", "--id", "n2", "--timeout", "1s")
	if code != 5 || !strings.Contains(out, "unknown") || !strings.Contains(out, "cluster members") {
		t.Fatalf("remove with no answer: exit %d\n%s", code, out)
	}
}
