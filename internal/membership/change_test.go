package membership

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
)

// A change is checked before it is made: the voters left must answer, as
// the nodes the members table says, before a removal; the leader hands
// over before removing itself.
func TestRemoveChecksTheVotersLeft(t *testing.T) {
	peers := idPeers{}
	c, log := newTestCluster(t, func(cfg *Config) { cfg.Peers = peers })
	log.SetPeers([]replica.PeerStatus{{ID: "n2"}, {ID: "n3"}})
	ctx := context.Background()

	_, e := c.Remove(ctx, api.RemoveRequest{ID: "n2"})
	wantError(t, "n3 unknown", e, api.CodeNoQuorum,
		"refused, nothing changed: after removing n2, 1 of the 2 voters would answer and a quorum is 2; not answering: n3 (client address unknown)")

	if _, e := c.Announce(ctx, api.JoinRequest{ID: "n3", RaftAddr: "n3", ClientAddr: "n3:7470"}); e != nil {
		t.Fatal(e.Message)
	}
	_, e = c.Remove(ctx, api.RemoveRequest{ID: "n2"})
	wantError(t, "n3 silent", e, api.CodeNoQuorum,
		"refused, nothing changed: after removing n2, 1 of the 2 voters would answer and a quorum is 2; not answering: n3 (nobody at n3:7470)")

	peers["n3:7470"] = api.Identity{Node: "n9"}
	_, e = c.Remove(ctx, api.RemoveRequest{ID: "n2"})
	wantError(t, "n3 someone else", e, api.CodeNoQuorum,
		`refused, nothing changed: after removing n2, 1 of the 2 voters would answer and a quorum is 2; not answering: n3 (n3:7470 answers as "n9")`)

	// n3 answers: the removal is made, and the in-memory log refuses it
	// as a change that may have taken effect.
	peers["n3:7470"] = api.Identity{Node: "n3"}
	_, e = c.Remove(ctx, api.RemoveRequest{ID: "n2"})
	wantError(t, "quorum", e, api.CodeChangeUnknown,
		"removing n2: replicatest: a single in-memory voter takes no other members; it may or may not have been applied: check cluster members")

	// Removing itself, the leader hands over first.
	if _, e := c.Announce(ctx, api.JoinRequest{ID: "n2", RaftAddr: "n2", ClientAddr: "n2:7470"}); e != nil {
		t.Fatal(e.Message)
	}
	peers["n2:7470"] = api.Identity{Node: "n2"}
	_, e = c.Remove(ctx, api.RemoveRequest{ID: "n1"})
	wantError(t, "itself", e, api.CodeUnavailable,
		"removing the leader n1: handing leadership over failed (replicatest: a single in-memory voter takes no other members); nothing changed")

	_, e = c.Remove(ctx, api.RemoveRequest{ID: "n7"})
	wantError(t, "a stranger", e, api.CodeNotFound, "no member with id n7")
}

// A joining node is probed before anything changes: it must answer at its
// client address as the node named, at the raft address given, with a
// raft transport, in no cluster or this one, and take raft connections.
func TestJoinProbesTheNewNode(t *testing.T) {
	peers := idPeers{}
	c, _ := newTestClusterOver(t, func(cfg *Config) { cfg.Peers, cfg.Engine = peers, "etcd" },
		func(l *replicatest.Log) replica.Replicator { return &configured{Log: l} })
	ctx := context.Background()
	req := api.JoinRequest{ID: "n4", RaftAddr: "h4:7471", ClientAddr: "h4:7470"}
	for _, tc := range []struct {
		name string
		id   *api.Identity // what answers at h4:7470; nil: nothing
		code string
		msg  string
	}{
		{"silent", nil, api.CodeNodeUnreachable,
			"refused, nothing changed: node n4 does not answer at its client address h4:7470 (nobody at h4:7470); start it first (fencelock server --join) and give the addresses it serves"},
		{"another node", &api.Identity{Node: "n5"}, api.CodeWrongNode,
			`refused, nothing changed: the server at h4:7470 is node "n5", not "n4"`},
		{"another raft address", &api.Identity{Node: "n4", RaftAddr: "h5:7471"}, api.CodeWrongNode,
			"refused, nothing changed: node n4 has the raft address h5:7471, not h4:7471"},
		{"no raft", &api.Identity{Node: "n4", RaftAddr: "h4:7471"}, api.CodeNoRaft,
			"refused, nothing changed: node n4 has no raft transport; restart it with --raft h4:7471 and --join"},
		{"another cluster", &api.Identity{Node: "n4", RaftAddr: "h4:7471", Raft: true, ClusterID: "c2"}, api.CodeWrongCluster,
			"refused, nothing changed: node n4 belongs to another cluster (cluster id c2; this is ): it already has state of its own; stop it, empty its data directory and start it with --join"},
		// Issue 41: a node of the other engine was added as a non-voter
		// that could never catch up.
		{"another engine", &api.Identity{Node: "n4", RaftAddr: "h4:7471", Raft: true, Engine: "hashicorp"}, api.CodeWrongEngine,
			"refused, nothing changed: node n4 runs the hashicorp replication engine and this cluster runs etcd; they speak different raft protocols: restart it with --engine etcd (and an empty data directory) and --join"},
		// A node that names no engine (one from before the field) and one
		// of the same engine get as far as the raft probe.
		{"raft port shut", &api.Identity{Node: "n4", RaftAddr: "h4:7471", Raft: true}, api.CodeNodeUnreachable,
			"refused, nothing changed: node n4 does not accept connections at its raft address h4:7471 (replicatest: a single in-memory voter takes no other members)"},
		{"the same engine", &api.Identity{Node: "n4", RaftAddr: "h4:7471", Raft: true, Engine: "etcd"}, api.CodeNodeUnreachable,
			"refused, nothing changed: node n4 does not accept connections at its raft address h4:7471 (replicatest: a single in-memory voter takes no other members)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delete(peers, "h4:7470")
			if tc.id != nil {
				peers["h4:7470"] = *tc.id
			}
			_, e := c.Join(ctx, req)
			wantError(t, tc.name, e, tc.code, tc.msg)
		})
	}
	_, e := c.Join(ctx, api.JoinRequest{ID: "n4", RaftAddr: "h4:7471", ClientAddr: "h4"})
	if e == nil || e.Code != api.CodeInvalid || e.Field != "client_addr" {
		t.Fatalf("a client address without a port: %+v", e)
	}
}
