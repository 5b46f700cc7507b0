package node

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/fsm"
)

// etcdTestNet is an etcdNet in one process: lossless, except that a cut
// member neither sends nor receives, and a closed one receives nothing.
type etcdTestNet struct {
	mu      sync.Mutex
	deliver map[uint64]func(*raftpb.Message)
	cut     map[uint64]bool
}

func (nw *etcdTestNet) attach(id uint64, deliver func(*raftpb.Message)) func([]*raftpb.Message) {
	nw.mu.Lock()
	nw.deliver[id] = deliver
	nw.mu.Unlock()
	return func(msgs []*raftpb.Message) {
		nw.mu.Lock()
		defer nw.mu.Unlock()
		for _, m := range msgs {
			d, ok := nw.deliver[m.GetTo()]
			if ok && !nw.cut[m.GetFrom()] && !nw.cut[m.GetTo()] {
				d(proto.Clone(m).(*raftpb.Message))
			}
		}
	}
}

func (nw *etcdTestNet) setCut(id uint64, cut bool) {
	nw.mu.Lock()
	nw.cut[id] = cut
	nw.mu.Unlock()
}

func (nw *etcdTestNet) detach(id uint64) {
	nw.mu.Lock()
	delete(nw.deliver, id)
	nw.mu.Unlock()
}

// Three EtcdNodes over one network, used only through Replicator: a
// leader cut off from the others fails VerifyLeader and another is
// elected; the cut-off one rejoins; the leader then dies and a third
// election follows. Tokens rise across every leader, and every
// acknowledged token is in every survivor's state machine.
func TestEtcdNodeCluster(t *testing.T) {
	names := []string{"a", "b", "c"}
	var peers []Peer
	for _, n := range names {
		peers = append(peers, Peer{ID: n, RaftAddr: n + ":7000"})
	}
	nw := &etcdTestNet{deliver: map[uint64]func(*raftpb.Message){}, cut: map[uint64]bool{}}
	type member struct {
		r    Replicator
		n    *EtcdNode
		f    *fsm.FSM
		dead bool
	}
	ms := map[string]*member{}
	for _, name := range names {
		cfg := etcdTestConfig(t.TempDir(), name)
		cfg.ElectionTimeout = 100 * time.Millisecond
		cfg.HeartbeatTimeout = 100 * time.Millisecond
		cfg.RaftAddr = name + ":7000"
		cfg.Peers = peers
		f := fsm.New(nil)
		n, err := openEtcd(cfg, f, nw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		ms[name] = &member{r: n, n: n, f: f}
	}
	// leader waits for a member other than those in except to lead:
	// polling for an election, with a deadline.
	leader := func(except ...string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			for _, name := range names {
				m := ms[name]
				skip := m.dead
				for _, e := range except {
					skip = skip || e == name
				}
				if !skip && m.r.Status().State == Leader {
					return name
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		t.Fatal("no leader")
		return ""
	}
	type ack struct {
		key          string
		token, index uint64
	}
	var acked []ack
	// grant acquires key on the leader, retrying under a new key when
	// leadership moved under it.
	grant := func(key string, except ...string) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			l := leader(except...)
			k := fmt.Sprint(key, "-", attempt)
			res, err := ms[l].r.Propose(acquire(t, k), time.Second)
			if errors.Is(err, ErrNotLeader) && attempt < 50 {
				continue
			}
			if err != nil || res.Err != nil {
				t.Fatalf("acquire %s on %s: %v %+v", key, l, err, res)
			}
			if n := len(acked); n > 0 && res.Lease.Token <= acked[n-1].token {
				t.Fatalf("token %d after %d", res.Lease.Token, acked[n-1].token)
			}
			acked = append(acked, ack{k, res.Lease.Token, res.Index})
			return
		}
	}

	for i := range 10 {
		grant(fmt.Sprint("k", i))
	}
	l1 := leader()
	if err := ms[l1].r.VerifyLeader(); err != nil {
		t.Fatalf("verify the leader %s with its quorum: %v", l1, err)
	}
	for _, name := range names {
		if name == l1 {
			continue
		}
		if err := ms[name].r.VerifyLeader(); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("verify on the follower %s: %v, want ErrNotLeader", name, err)
		}
		if _, err := ms[name].r.Propose(acquire(t, "on a follower"), time.Second); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("propose on the follower %s: %v, want ErrNotLeader", name, err)
		}
	}
	servers, err := ms[l1].r.Configuration()
	if err != nil || len(servers) != 3 {
		t.Fatalf("configuration %+v, %v", servers, err)
	}

	// Cut the leader off: it cannot confirm its leadership, and the
	// others elect one of themselves.
	nw.setCut(etcdID(l1), true)
	if err := ms[l1].r.VerifyLeader(); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("verify on the cut-off leader %s: %v, want ErrNotLeader", l1, err)
	}
	if _, err := ms[l1].r.Propose(acquire(t, "cut off"), time.Second); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("propose on the cut-off %s: %v, want ErrNotLeader", l1, err)
	}
	l2 := leader(l1)
	for i := range 10 {
		grant(fmt.Sprint("j", i), l1)
	}
	if st := ms[l1].r.Status(); st.State == Leader {
		t.Fatalf("the cut-off %s still leads: %+v", l1, st)
	}

	// It rejoins, and the second leader dies.
	nw.setCut(etcdID(l1), false)
	nw.detach(etcdID(l2))
	if err := ms[l2].n.Close(); err != nil {
		t.Fatal(err)
	}
	ms[l2].dead = true
	l3 := leader(l2)
	for i := range 10 {
		grant(fmt.Sprint("i", i), l2)
	}
	if err := ms[l3].r.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	top := acked[len(acked)-1]
	for _, name := range names {
		m := ms[name]
		if m.dead {
			continue
		}
		timeout := make(chan struct{})
		timer := time.AfterFunc(20*time.Second, func() { close(timeout) })
		applied := m.f.WaitApplied(top.index, timeout)
		timer.Stop()
		if !applied {
			t.Fatalf("%s never applied index %d, the last acknowledged", name, top.index)
		}
		for _, a := range acked {
			if l, ok := m.f.Get(a.key, m.f.Now()); !ok || l.Token != a.token {
				t.Fatalf("%s: %s holds %+v (%v), want the acknowledged token %d", name, a.key, l, ok, a.token)
			}
		}
		if err := m.r.Covered(top.token, time.Second); err != nil {
			t.Fatalf("%s: the ceiling does not cover %d: %v", name, top.token, err)
		}
	}
}
