package server

import (
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string // "" for valid; else a part of the error
	}{
		{"zero", Config{}, ""},
		{"defaults", DefaultConfig(), ""},
		{"in memory", Config{DataDir: "", RaftAddr: ""}, ""},
		{"negative heartbeat", Config{HeartbeatTimeout: -time.Second}, "HeartbeatTimeout is -1s"},
		{"negative election", Config{ElectionTimeout: -1}, "ElectionTimeout"},
		{"negative apply", Config{ApplyTimeout: -1}, "ApplyTimeout"},
		{"negative tick", Config{MinTickInterval: -1}, "MinTickInterval"},
		{"negative checkpoint", Config{ClockCheckpoint: -1}, "ClockCheckpoint"},
		{"negative catch-up", Config{JoinCatchUp: -1}, "JoinCatchUp"},
		{"negative snapshot interval", Config{SnapshotInterval: -1}, "SnapshotInterval"},
		{"lease longer than heartbeat", Config{HeartbeatTimeout: time.Second, LeaderLeaseTimeout: 2 * time.Second},
			"LeaderLeaseTimeout (2s) is longer than HeartbeatTimeout (1s)"},
		{"lease longer than the default heartbeat", Config{LeaderLeaseTimeout: time.Second}, "LeaderLeaseTimeout (1s)"},
		{"lease equal to heartbeat", Config{HeartbeatTimeout: time.Second, LeaderLeaseTimeout: time.Second}, ""},
		{"negative connections", Config{MaxConnections: -1}, "MaxConnections is -1"},
		{"negative segment", Config{WALSegmentSize: -1}, "WALSegmentSize"},
		{"negative per-address connections", Config{MaxConnectionsPerAddr: -1}, "MaxConnectionsPerAddr is -1"},
		{"negative in flight", Config{FramedMaxInFlight: -1}, "FramedMaxInFlight"},
		{"negative priority in flight", Config{FramedMaxPriorityInFlight: -1}, "FramedMaxPriorityInFlight"},
		{"negative pending bytes", Config{FramedMaxPendingAnswerBytes: -1}, "FramedMaxPendingAnswerBytes"},
		{"negative write timeout", Config{FramedWriteTimeout: -1}, "FramedWriteTimeout"},
		{"negative read timeout", Config{FramedReadTimeout: -1}, "FramedReadTimeout"},
		{"negative idle timeout", Config{FramedIdleTimeout: -1}, "FramedIdleTimeout"},
		{"no waiter caps", Config{MaxWaitersPerKey: -1, MaxWaiters: -1}, ""},
		{"negative waiters per key", Config{MaxWaitersPerKey: -2}, "MaxWaitersPerKey is -2"},
		{"too many waiters", Config{MaxWaiters: 1 << 31}, "MaxWaiters is 2147483648"},
		{"long node id", Config{NodeID: strings.Repeat("n", 129)}, "NodeID is 129 bytes"},
		{"long client address", Config{ClientAddr: strings.Repeat("a", 257)}, "ClientAddr is 257 bytes"},
		{"peers", Config{NodeID: "a", Peers: []Peer{{"a", "h:1"}, {"b", "h:2"}}}, ""},
		{"peers without this node", Config{NodeID: "c", Peers: []Peer{{"a", "h:1"}, {"b", "h:2"}}}, "Peers does not name this node (NodeID c)"},
		{"peers without the default node", Config{Peers: []Peer{{"a", "h:1"}}}, "NodeID fencelock-1"},
		{"peer without id", Config{NodeID: "a", Peers: []Peer{{"a", "h:1"}, {"", "h:2"}}}, "Peers[1] has no ID"},
		{"peer without address", Config{NodeID: "a", Peers: []Peer{{"a", ""}}}, "Peers[0] (a) has no RaftAddr"},
		{"peer twice", Config{NodeID: "a", Peers: []Peer{{"a", "h:1"}, {"a", "h:2"}}}, "Peers names a twice"},
		{"join with peers", Config{NodeID: "a", Join: true, Peers: []Peer{{"a", "h:1"}}}, "Join and Peers are both set"},
		{"join", Config{Join: true, RaftAddr: "127.0.0.1:0", ClusterSecret: testSecret}, ""},
		{"raft without a credential", Config{RaftAddr: "127.0.0.1:0"}, "RaftAddr 127.0.0.1:0 has no credential: set ClusterSecret (--cluster-secret-file)"},
		{"raft, insecure", Config{RaftAddr: "127.0.0.1:0", InsecureRaft: true}, ""},
		{"raft over TLS", Config{RaftAddr: "127.0.0.1:0", TLS: tlsconfig.Files{CertFile: "c", KeyFile: "k", CAFile: "ca"}}, ""},
		{"raft with a secret and client TLS", Config{RaftAddr: "127.0.0.1:0", ClusterSecret: testSecret, TLS: tlsconfig.Files{CertFile: "c", KeyFile: "k"}}, ""},
		{"a previous secret alone", Config{PreviousClusterSecret: testSecret}, "PreviousClusterSecret is set without ClusterSecret"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: valid, want an error with %q", c.name, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
	}
}

func TestNewRefusesAnInvalidConfig(t *testing.T) {
	s, err := New(Config{MaxConnections: -1})
	if err == nil {
		s.Close()
		t.Fatal("New accepted MaxConnections -1")
	}
	if !strings.Contains(err.Error(), "MaxConnections") {
		t.Fatalf("New: %v", err)
	}
}
