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
