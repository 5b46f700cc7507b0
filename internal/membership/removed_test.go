package membership

import (
	"context"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
)

// A node is removed once a configuration it has been in no longer has
// it, and answers removed from then on; a node not yet in (joining) is
// not, and says how its join goes; a removed node added again is a
// member again.
func TestRemovedNode(t *testing.T) {
	join := &JoinStatus{}
	join.Set("asking h9:7470 to add this node to the cluster")
	var conf *configured
	c, log := newTestClusterOver(t, func(cfg *Config) { cfg.Join = join },
		func(l *replicatest.Log) replica.Replicator {
			conf = &configured{Log: l}
			conf.set("n2", "n3")
			return conf
		})
	log.Follow("n2", false)
	notLeader := func() *api.Error { return c.Redirect(&api.Error{Code: api.CodeNotLeader}) }

	c.checkMembership()
	if c.Removed() {
		t.Fatal("a node never in the configuration is removed")
	}
	wantError(t, "joining", c.NotReady(), api.CodeUnavailable, "not ready: asking h9:7470 to add this node to the cluster")

	conf.set("n1", "n2", "n3")
	c.checkMembership()
	wantError(t, "a member", c.NotReady(), api.CodeNotLeader, "this node is not the leader and knows no leader yet; retry")

	conf.set("n2", "n3")
	c.checkMembership()
	if !c.Removed() {
		t.Fatal("a node taken out of the configuration is not removed")
	}
	for what, e := range map[string]*api.Error{"not ready": c.NotReady(), "not_leader": notLeader()} {
		if e.Code != api.CodeRemoved {
			t.Fatalf("%s on a removed node: %s %q", what, e.Code, e.Message)
		}
	}
	if e := c.Redirect(&api.Error{Code: api.CodeHeld}); e.Code != api.CodeHeld {
		t.Fatalf("a removed node changed a held answer to %s", e.Code)
	}
	if m, e := c.Members(context.Background()); e != nil || !m.Removed {
		t.Fatalf("members of a removed node: removed %v, %v", m.Removed, e)
	}

	conf.set("n1", "n2", "n3")
	c.checkMembership()
	if c.Removed() || notLeader().Code != api.CodeNotLeader {
		t.Fatal("a removed node added again is still removed")
	}
}
