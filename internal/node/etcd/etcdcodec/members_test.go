package etcdcodec

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"go.etcd.io/raft/v3/raftpb"
)

func TestEtcdConfigurationRoundTrip(t *testing.T) {
	c := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "a", Address: "127.0.0.1:1"},
		{Suffrage: raft.Voter, ID: "b", Address: "127.0.0.1:2"},
		{Suffrage: raft.Nonvoter, ID: "c", Address: "127.0.0.1:3"},
	}}
	cs, names := ConfState(c)
	if !slices.Equal(cs.GetVoters(), []uint64{ID("a"), ID("b")}) || !slices.Equal(cs.GetLearners(), []uint64{ID("c")}) {
		t.Fatalf("conf state %v", cs)
	}
	back, err := Configuration(cs, names)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Servers, c.Servers) {
		t.Fatalf("configuration %v, want %v", back.Servers, c.Servers)
	}
	if _, err := Configuration(&raftpb.ConfState{Voters: []uint64{42}}, names); err == nil {
		t.Fatal("a member without a name was accepted")
	}
	if _, err := Configuration(&raftpb.ConfState{Voters: []uint64{ID("a")}, VotersOutgoing: []uint64{ID("b")}}, names); err == nil {
		t.Fatal("a joint configuration was accepted")
	}
	if ID("a") == ID("b") || ID("a") == 0 {
		t.Fatal("ids collide or are zero")
	}
}
