package server

import (
	"testing"

	"github.com/fencelock/fencelock/api"
)

// A follower of a cluster whose ACLs were never bootstrapped answers a
// call that needs a principal without asking the leader for its ACL
// revision. It learns of the bootstrap from its own applied log: once it
// has applied it, a call without a credential is refused there too.
func TestFollowerAsksNobodyUntilACLsAreBootstrapped(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	c.announced(l)
	f := c.others(l)[0]
	asked := func() float64 {
		return l.metric("fencelock_http_requests_total", "route", api.PathACLRevision, "code", "200")
	}
	before := asked()
	for range 20 {
		if a := f.authDo("GET", api.PathACLWhoAmI, "", ""); a.status != 200 || a.body["auth"] != false {
			t.Fatalf("whoami on the follower with ACLs never on: %d %v", a.status, a.body)
		}
	}
	if n := asked() - before; n != 0 {
		t.Fatalf("the follower asked the leader %v times with ACLs never on", n)
	}

	admin := l.bootstrap()
	eventually(t, "the follower to refuse a call without a credential", func() bool {
		return f.authDo("GET", api.PathACLWhoAmI, "", "").status == 401
	})
	before = asked()
	if a := f.authDo("GET", api.PathACLWhoAmI, "", admin); a.status != 200 || a.body["principal"] != "admin" {
		t.Fatalf("whoami of the admin on the follower: %d %v", a.status, a.body)
	}
	if asked() == before {
		t.Fatal("with ACLs on, the follower answered without asking the leader")
	}
}
