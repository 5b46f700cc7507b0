package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/fencelock/fencelock/internal/acl"
)

// The ACL tables are replicated state: changes apply in log order, a
// refusal changes nothing, and a snapshot (with or without members and a
// cluster id) restores them to the byte.
func TestACLIsReplicatedStateAndSurvivesSnapshots(t *testing.T) {
	for _, withCluster := range []bool{false, true} {
		f := New(nil)
		i := uint64(0)
		do := func(c ACLChange) error {
			i++
			return f.ApplyCommand(i, Command{Op: OpACL, Now: 1, ACL: &c}).Err
		}
		if withCluster {
			f.ApplyCommand(100, Command{Op: OpClusterID, ClusterID: "c1"})
		}
		if f.ACL().On {
			t.Fatal("a new state machine has ACLs on")
		}
		if err := do(ACLChange{Kind: ACLBootstrap, Principal: acl.Principal{TokenHash: acl.HashToken("root")}}); err != nil {
			t.Fatal(err)
		}
		if err := do(ACLChange{Kind: ACLBootstrap, Principal: acl.Principal{TokenHash: acl.HashToken("again")}}); !errors.Is(err, acl.ErrBootstrapped) {
			t.Fatalf("second bootstrap: %v", err)
		}
		if err := do(ACLChange{Kind: ACLSetPolicy, Policy: acl.Policy{Name: "jobs", Rules: []acl.Rule{{Prefix: "jobs/", Verbs: acl.Lock}}}}); err != nil {
			t.Fatal(err)
		}
		if err := do(ACLChange{Kind: ACLSetPrincipal, Principal: acl.Principal{Name: "ci", Policies: []string{"jobs"}, TokenHash: acl.HashToken("ci")}}); err != nil {
			t.Fatal(err)
		}
		if err := do(ACLChange{Kind: ACLSetPrincipal, Principal: acl.Principal{Name: "ci", TokenHash: acl.HashToken("x")}}); !errors.Is(err, acl.ErrExists) {
			t.Fatalf("create over an existing principal: %v", err)
		}
		before := f.ACL()
		data, _ := f.MarshalBinary()
		g := New(nil)
		if err := g.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		st := g.ACL()
		if !st.On || !reflect.DeepEqual(st.Principals, before.Principals) || !reflect.DeepEqual(st.Policies, before.Policies) {
			t.Fatalf("restored %+v, want %+v", st, before)
		}
		if p, ok := st.ByToken("ci"); !ok || !st.Allowed(p, acl.Lock, "jobs/1") || st.Allowed(p, acl.Lock, "other/1") {
			t.Fatalf("the restored tables do not authenticate or authorize: %+v %v", p, ok)
		}
		again, _ := g.MarshalBinary()
		if !bytes.Equal(again, data) {
			t.Fatal("a restored snapshot re-encodes to other bytes")
		}
		if g.ClusterID() != f.ClusterID() {
			t.Fatalf("cluster id %q after restore, want %q", g.ClusterID(), f.ClusterID())
		}
	}
}
