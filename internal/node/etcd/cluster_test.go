package etcd

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/replica"
)

// etcdRouter carries messages between cores in one process (a lossless
// network; closed nodes drop what is sent to them).
type etcdRouter struct {
	mu    sync.Mutex
	cores map[uint64]*core
}

func (r *etcdRouter) send(msgs []*raftpb.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if c, ok := r.cores[m.GetTo()]; ok {
			c.deliver(proto.Clone(m).(*raftpb.Message))
		}
	}
}

// Three cores: one leads, proposals are answered, the leader is closed,
// another leads, tokens keep rising, and every acknowledged grant's token
// is in the survivors' state machines.
func TestEtcdCoreThreeNodes(t *testing.T) {
	names := []string{"a", "b", "c"}
	var voters []uint64
	for _, n := range names {
		voters = append(voters, etcdcodec.ID(n))
	}
	r := &etcdRouter{cores: map[uint64]*core{}}
	type member struct {
		st *node.Storage
		c  *core
		f  *fsm.FSM
	}
	ms := map[uint64]*member{}
	for i, n := range names {
		st, err := openTestStores(t, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		f := fsm.New(nil)
		c, err := openCore(st.Logs, st.Stable, st.Machine(f, node.Hooks{}), etcdcodec.ID(n), voters, nil,
			5*time.Millisecond, slog.New(slog.DiscardHandler), uint64(i+1)<<40, etcdSnapPolicy{})
		if err != nil {
			t.Fatal(err)
		}
		ms[etcdcodec.ID(n)] = &member{st, c, f}
		r.mu.Lock()
		r.cores[etcdcodec.ID(n)] = c
		r.mu.Unlock()
	}
	for _, m := range ms {
		m.c.setSend(r.send)
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.c.close()
			m.st.Close()
		}
	})
	leader := func(except uint64) uint64 {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for id, m := range ms {
				if id != except && m.c.lead.Load() {
					return id
				}
			}
			time.Sleep(2 * time.Millisecond) // polling, with a deadline
		}
		t.Fatal("no leader")
		return 0
	}
	var acked []uint64
	// propose acquires key on the leader, retrying under a new key when
	// leadership moved under it (then nothing was acknowledged).
	propose := func(key string) {
		for attempt := 0; ; attempt++ {
			id := leader(0)
			data, _ := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: fmt.Sprint(key, "-", attempt), Holder: "h", TTL: locktable.Second})
			res, err := ms[id].c.propose(data, time.Second)
			if errors.Is(err, replica.ErrNotLeader) && attempt < 50 {
				continue
			}
			if err != nil || res.Err != nil {
				t.Fatalf("propose %s on %x: %v %+v", key, id, err, res)
			}
			if n := len(acked); n > 0 && res.Lease.Token <= acked[n-1] {
				t.Fatalf("token %d after %d", res.Lease.Token, acked[n-1])
			}
			acked = append(acked, res.Lease.Token)
			return
		}
	}
	for i := range 20 {
		propose(fmt.Sprint("k", i))
	}
	l1 := leader(0)
	r.mu.Lock()
	delete(r.cores, l1)
	r.mu.Unlock()
	ms[l1].c.close()
	ms[l1].st.Close()
	delete(ms, l1)

	leader(l1) // another leads
	for i := range 20 {
		propose(fmt.Sprint("j", i))
	}
	top := acked[len(acked)-1]
	for id, m := range ms {
		deadline := time.Now().Add(10 * time.Second)
		for m.f.LastToken() < top && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond) // polling the follower's apply, with a deadline
		}
		if got := m.f.LastToken(); got < top {
			t.Fatalf("node %x applied tokens up to %d, below the acknowledged %d", id, got, top)
		}
	}
}
