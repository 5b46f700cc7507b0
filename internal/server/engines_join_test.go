package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/node"
)

// Issue 41, item 4: a hashicorp-engine node told to join an etcd-engine
// cluster was added as a non-voter, and the leader then logged "unknown
// rpc type 102" seven times a second: the engines speak different raft
// protocols. A join across engines is now refused at the probe, naming
// both, and the configuration is unchanged; both ways round.
func TestJoinAcrossEnginesIsRefusedAtTheProbe(t *testing.T) {
	for _, pair := range [][2]string{{node.EngineEtcd, node.EngineHashicorp}, {node.EngineHashicorp, node.EngineEtcd}} {
		cluster, joiner := pair[0], pair[1]
		t.Run(cluster+" cluster, "+joiner+" node", func(t *testing.T) {
			rln := listen(t)
			cfg := clusterConfig("n1")
			cfg.Engine, cfg.RaftAddr, cfg.raftListener = cluster, rln.Addr().String(), rln
			n1 := serveTLSNode(t, cfg, listen(t))
			l := tlsLeader(t, []*tlsNode{n1})

			rln = listen(t)
			cfg = clusterConfig("n2")
			cfg.Engine, cfg.RaftAddr, cfg.raftListener, cfg.Join = joiner, rln.Addr().String(), rln, true
			n2 := serveTLSNode(t, cfg, listen(t))
			if id := n2.Identity(t.Context()); id.Engine != joiner {
				t.Fatalf("n2's identity names the engine %q, want %q", id.Engine, joiner)
			}
			body := `{"id":"n2","raft_addr":"` + n2.node.Addr() + `","client_addr":"` + n2.addr + `"}`
			st, m := postJSON(t, &http.Client{Timeout: time.Minute}, "http://"+l.addr+api.PathJoin, body)
			msg, _ := m["error"].(string)
			if st != 409 || m["code"] != api.CodeWrongEngine || !strings.Contains(msg, cluster) || !strings.Contains(msg, joiner) {
				t.Fatalf("join of a %s node to a %s cluster: %d %v; want 409 %s naming both engines", joiner, cluster, st, m, api.CodeWrongEngine)
			}
			servers, err := l.node.Configuration()
			if err != nil || len(servers) != 1 {
				t.Fatalf("configuration after the refused join: %v %v", servers, err)
			}
		})
	}
}
