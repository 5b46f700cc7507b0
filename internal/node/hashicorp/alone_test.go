package hashicorp

import (
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
)

func TestAloneVoter(t *testing.T) {
	v := func(id string) raft.Server { return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id)} }
	nv := func(id string) raft.Server { return raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id)} }
	for _, tc := range []struct {
		name    string
		servers []raft.Server
		want    bool
	}{
		{"itself", []raft.Server{v("a")}, true},
		{"itself and a non-voter", []raft.Server{v("a"), nv("b")}, true},
		{"no configuration yet", nil, false},
		{"another voter alone", []raft.Server{v("b")}, false},
		{"a non-voter of another's", []raft.Server{nv("a"), v("b")}, false},
		{"three voters", []raft.Server{v("a"), v("b"), v("c")}, false},
		{"two voters", []raft.Server{v("b"), v("a")}, false},
	} {
		if got := aloneVoter(raft.Configuration{Servers: tc.servers}, "a"); got != tc.want {
			t.Errorf("%s: alone %v, want %v", tc.name, got, tc.want)
		}
	}
}

// hourConfig is a node of a data dir whose raft timeouts are an hour: a
// node that waits for one is never elected within a test.
func hourConfig(id, dir string) node.Config {
	return node.Config{NodeID: id, DataDir: dir, Logger: slog.New(slog.DiscardHandler),
		HeartbeatTimeout: time.Hour, ElectionTimeout: time.Hour, LeaderLeaseTimeout: time.Hour,
		SnapshotThreshold: node.DefaultSnapshotThreshold, SnapshotInterval: node.DefaultSnapshotInterval, TrailingLogs: 10240}
}

// waitLeader waits for n to lead (a deadline: a failure of the test, not
// a decision; an hour's timeout is what it tells apart).
func waitLeader(t *testing.T, n *Node) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n.raft.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatalf("not elected: %v after 30 s of an hour's election timeout", n.raft.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A node alone is elected without waiting its election timeout, on its
// first start and on a restart that replays its log; its timeouts stay
// as configured for the elections that peers joining later would run.
func TestLoneVoterStandsAtOnce(t *testing.T) {
	dir := t.TempDir()
	n, err := Open(hourConfig("n1", dir), fsm.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, n)
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: "k", Holder: "h", TTL: locktable.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := n.Propose(data, 10*time.Second); err != nil || res.Err != nil {
		t.Fatalf("acquire: %v %+v", err, res)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	f := fsm.New(nil)
	n, err = Open(hourConfig("n1", dir), f, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitLeader(t, n)
	if !f.WaitApplied(n.StartIndex(), nil) || f.LastToken() != 1 {
		t.Fatalf("replayed to %d of %d, last token %d", f.AppliedIndex(), n.StartIndex(), f.LastToken())
	}
	if rc := n.raft.ReloadableConfig(); rc.HeartbeatTimeout != time.Hour || rc.ElectionTimeout != time.Hour {
		t.Fatalf("timeouts left at %v and %v, configured an hour", rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
}

// A node of three is no lone voter: it waits for a leader it may not
// have heard from yet, and the three elect one as before.
func TestThreeVotersElectAsBefore(t *testing.T) {
	ids := []string{"a", "b", "c"}
	var peers []node.Peer
	trans := map[string]*InmemTransport{}
	for _, id := range ids {
		peers = append(peers, node.Peer{ID: id, RaftAddr: id})
		trans[id] = NewInmemTransport(id)
	}
	for _, a := range ids {
		for _, b := range ids {
			if a != b {
				trans[a].Connect(raft.ServerAddress(b), trans[b])
			}
		}
	}
	var nodes []*Node
	for _, id := range ids {
		cfg := hourConfig(id, t.TempDir())
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		cfg.Peers = peers
		n, err := Open(cfg, fsm.New(nil), trans[id])
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		if n.standAlone() {
			t.Fatalf("%s of three stood alone", n.cfg.NodeID)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaders := 0
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				leaders++
			}
		}
		if leaders == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leaders after 30 s", leaders)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
