package fsm

import "testing"

func TestMembersAreReplicatedStateAndSurviveSnapshots(t *testing.T) {
	a, _ := newApplier(t)
	a.do(Command{Op: OpMember, NodeID: "n2", RaftAddr: "127.0.0.1:2", ClientAddr: "127.0.0.1:12"})
	a.do(Command{Op: OpMember, NodeID: "n1", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:11"})
	a.do(Command{Op: OpMember, NodeID: "n1", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:21"})
	data, _ := a.f.MarshalBinary()
	g := New(nil)
	if err := g.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	ms := g.Members()
	if len(ms) != 2 || ms[0].NodeID != "n1" || ms[0].ClientAddr != "127.0.0.1:21" || ms[1].ClientAddr != "127.0.0.1:12" {
		t.Fatalf("members after restore: %+v", ms)
	}
	b := &applier{t: t, f: g, index: a.index}
	b.do(Command{Op: OpMember, NodeID: "n2"})
	if _, ok := g.Member("n2"); ok || len(g.Members()) != 1 {
		t.Fatalf("n2 not forgotten: %+v", g.Members())
	}
}

// The cluster id is set once, by the first OpClusterID applied, and is in
// every snapshot, also one with no members; snapshots from before it
// existed still restore (with no id).
func TestClusterIDIsSetOnceAndSurvivesSnapshots(t *testing.T) {
	a, _ := newApplier(t)
	old, _ := a.f.MarshalBinary() // no members, no id: the pre-cluster format
	a.do(Command{Op: OpClusterID, ClusterID: "first"})
	a.do(Command{Op: OpClusterID, ClusterID: "second"})
	if id := a.f.ClusterID(); id != "first" {
		t.Fatalf("cluster id %q, want the first one", id)
	}
	for _, withMember := range []bool{false, true} {
		if withMember {
			a.do(Command{Op: OpMember, NodeID: "n1", RaftAddr: "r", ClientAddr: "c"})
		}
		data, _ := a.f.MarshalBinary()
		g := New(nil)
		if err := g.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		if g.ClusterID() != "first" || len(g.Members()) != map[bool]int{false: 0, true: 1}[withMember] {
			t.Fatalf("after restore: id %q, members %+v", g.ClusterID(), g.Members())
		}
		again, _ := g.MarshalBinary()
		if string(again) != string(data) {
			t.Fatal("a restored snapshot re-encodes differently")
		}
	}
	g := New(nil)
	if err := g.UnmarshalBinary(old); err != nil || g.ClusterID() != "" {
		t.Fatalf("old snapshot: %v, id %q", err, g.ClusterID())
	}
	if _, err := Encode(Command{Op: OpClusterID}); err == nil {
		t.Fatal("an empty cluster id encoded")
	}
}
