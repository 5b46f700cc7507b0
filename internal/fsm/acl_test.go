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

// The ACL revision is the index of the entry that made the tables, and
// ACLWatch's channel closes when they change: what a follower waits for
// before it answers under them, and what open streams re-check on.
func TestACLRevisionAndWatch(t *testing.T) {
	f := New(nil)
	if f.ACLRevision() != 0 {
		t.Fatalf("revision of a new state machine: %d", f.ACLRevision())
	}
	st0, changed := f.ACLWatch()
	f.ApplyCommand(1, Command{Op: OpACL, Now: 1, ACL: &ACLChange{Kind: ACLBootstrap, Principal: acl.Principal{TokenHash: acl.HashToken("root")}}})
	select {
	case <-changed:
	default:
		t.Fatal("bootstrap did not close the watch channel")
	}
	st1, changed := f.ACLWatch()
	if st1 == st0 || !st1.On || f.ACLRevision() != 1 {
		t.Fatalf("after bootstrap: on %v, revision %d", st1.On, f.ACLRevision())
	}
	f.ApplyCommand(2, Command{Op: OpTick, Now: 2})
	// A refused change changes nothing.
	f.ApplyCommand(3, Command{Op: OpACL, Now: 3, ACL: &ACLChange{Kind: ACLDeletePolicy, Name: "none"}})
	select {
	case <-changed:
		t.Fatal("a tick and a refused change closed the watch channel")
	default:
	}
	if f.ACLRevision() != 1 {
		t.Fatalf("revision after a tick and a refusal: %d", f.ACLRevision())
	}
	f.ApplyCommand(4, Command{Op: OpACL, Now: 4, ACL: &ACLChange{Kind: ACLSetPolicy, Policy: acl.Policy{Name: "p", Rules: []acl.Rule{{Prefix: "a/", Verbs: acl.Read}}}}})
	if f.ACLRevision() != 4 {
		t.Fatalf("revision after a policy: %d", f.ACLRevision())
	}
	snap, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyCommand(9, Command{Op: OpTick, Now: 5})
	g := New(nil)
	_, changed = g.ACLWatch()
	if err := g.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a restore did not close the watch channel")
	}
	if g.ACLRevision() != 4 || !g.ACL().On {
		t.Fatalf("restored: revision %d (the snapshot's index, 4), on %v", g.ACLRevision(), g.ACL().On)
	}
}

// WaitApplied answers once the index is applied, at once when it is, and
// false when given up.
func TestWaitApplied(t *testing.T) {
	f := New(nil)
	f.ApplyCommand(1, Command{Op: OpTick, Now: 1})
	if !f.WaitApplied(1, nil) {
		t.Fatal("an applied index was waited for")
	}
	done := make(chan struct{})
	close(done)
	if f.WaitApplied(2, done) {
		t.Fatal("index 2 reported applied")
	}
	got := make(chan bool)
	go func() { got <- f.WaitApplied(3, nil) }()
	f.ApplyCommand(2, Command{Op: OpTick, Now: 2})
	f.ApplyCommand(3, Command{Op: OpTick, Now: 3})
	if !<-got {
		t.Fatal("WaitApplied(3) after 3 was applied: false")
	}
}
