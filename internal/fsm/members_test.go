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
