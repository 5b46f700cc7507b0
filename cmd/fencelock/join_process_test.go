//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestServerProcessJoinTargetUnreachable (issue 26.5): `server --join ADDR`
// where nothing listens logged only raft's "no known peers, aborting
// election" and /readyz said "knows no leader yet; retry". Now the node
// logs at ERROR that it cannot reach ADDR, /readyz says so, and it asks
// again with a growing back-off, so that once a cluster answers at ADDR
// it joins.
func TestServerProcessJoinTargetUnreachable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target, targetRaft := freeAddr(t), freeAddr(t)
	jc, jr := freeAddr(t), freeAddr(t)
	j := startProc(t, dir, nil, "--id", "n2", "--listen", jc, "--raft", jr, "--data", filepath.Join(dir, "n2"), "--join", target)
	poll(t, "an ERROR naming the --join address", func() bool {
		s := j.stderr.String()
		return strings.Contains(s, "level=ERROR") && strings.Contains(s, "cannot reach the cluster to join it") && strings.Contains(s, "join="+target)
	})
	r, err := call(jc, "GET", "/readyz", "")
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := r.body["error"].(string); r.status != 503 || !strings.Contains(msg, "cannot reach "+target+" to join the cluster") || !strings.Contains(msg, "trying again in") {
		t.Fatalf("/readyz while the target is down: %d %v", r.status, r.body)
	}
	poll(t, "a second attempt, after a longer back-off", func() bool { return strings.Contains(j.stderr.String(), "retry_in=2s") })

	// A cluster comes up at the address: the next attempt joins it.
	startProc(t, dir, nil, "--id", "n1", "--listen", target, "--raft", targetRaft, "--data", filepath.Join(dir, "n1")).waitReady(target)
	poll(t, "the node to join once the target answers", func() bool { return strings.Contains(j.stderr.String(), "joined the cluster") })
	r, err = call(jc, "GET", "/readyz", "")
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := r.body["error"].(string); r.status != 503 || r.body["code"] != "not_leader" || strings.Contains(msg, "join") {
		t.Fatalf("/readyz on the joined follower: %d %v", r.status, r.body)
	}
	out, code := clusterCLI(t, []string{target}, "members")
	if v, _, ids := voterLines(out); code != 0 || v != 2 || !strings.Contains(strings.Join(ids, " "), "n2") {
		t.Fatalf("members after the join: exit %d\n%s", code, out)
	}
}

// TestClusterProcessRemovedNodeSaysSo (issue 26.5): a node removed with
// `cluster remove` kept running, answered not_leader and never logged
// that it was removed. Now it logs it at ERROR, answers removed, and
// `cluster members` on it says it is no longer a member.
func TestClusterProcessRemovedNodeSaysSo(t *testing.T) {
	t.Parallel()
	c := startPCluster(t)
	addrs := c.clients()
	poll(t, "every member's client address", func() bool {
		out, code := clusterCLI(t, addrs, "members")
		return code == 0 && everyClientKnown(out)
	})
	l := c.waitLeader()
	victim := c.nodes[0]
	if victim == l {
		victim = c.nodes[1]
	}
	out, code := clusterCLI(t, addrs, "remove", "--id", victim.id)
	if code != 0 || !strings.Contains(out, "applied: removed "+victim.id) {
		t.Fatalf("remove %s: exit %d\n%s", victim.id, code, out)
	}
	poll(t, victim.id+" to log its removal", func() bool {
		s := victim.p.stderr.String()
		return strings.Contains(s, "level=ERROR") && strings.Contains(s, "this node was removed from the cluster")
	})
	r, err := call(victim.client, "GET", "/v1/lock?key=k", "")
	if err != nil || r.status != 503 || r.body["code"] != "removed" {
		t.Fatalf("a call on the removed node: %v %v", r, err)
	}
	out, code = clusterCLI(t, []string{victim.client}, "members")
	if code != 0 || !strings.Contains(out, victim.id+", which answered, is no longer a member") {
		t.Fatalf("cluster members on the removed node: exit %d\n%s", code, out)
	}
	if _, _, ids := voterLines(out); strings.Contains(strings.Join(ids, " "), victim.id) {
		t.Fatalf("the removed node lists itself:\n%s", out)
	}
}
