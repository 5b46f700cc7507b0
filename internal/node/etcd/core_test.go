package etcd

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd/etcdcodec"
	"github.com/fencelock/fencelock/internal/replica"
)

// A node alone on the etcd core: proposals answer the state machine's
// result after commit and apply, tokens rise, and after a restart the
// log replays into a new state machine with the same tokens.
func TestEtcdCoreSingleNode(t *testing.T) {
	dir := t.TempDir()
	open := func() (*node.Storage, *core, *fsm.FSM) {
		st, err := openTestStores(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		f := fsm.New(nil)
		m := st.Machine(f, node.Hooks{})
		c, err := openCore(st.Logs, st.Stable, m, etcdcodec.ID("a"), []uint64{etcdcodec.ID("a")}, nil, time.Millisecond, slog.New(slog.DiscardHandler), 1000, etcdSnapPolicy{})
		if err != nil {
			t.Fatal(err)
		}
		return st, c, f
	}
	propose := func(c *core, key string) *fsm.Result {
		data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: key, Holder: "h", TTL: locktable.Second})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := c.propose(data, time.Second)
			if err == nil {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("propose %s: %v", key, err)
			}
			time.Sleep(5 * time.Millisecond) // polling for the election, with a deadline
		}
	}
	st, c, _ := open()
	var last uint64
	for _, k := range []string{"a", "b", "c"} {
		r := propose(c, k)
		if r.Err != nil || r.Lease.Token <= last {
			t.Fatalf("acquire %s: %+v (last token %d)", k, r, last)
		}
		last = r.Lease.Token
	}
	if st.Ceiling() < last {
		t.Fatalf("ceiling %d below the token %d answered", st.Ceiling(), last)
	}
	c.close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, c, f := open()
	defer st.Close()
	defer c.close()
	r := propose(c, "d")
	if r.Err != nil || r.Lease.Token <= last {
		t.Fatalf("after restart: %+v, want a token above %d", r, last)
	}
	if got := f.LastToken(); got != r.Lease.Token {
		t.Fatalf("replayed state machine's last token %d, want %d", got, r.Lease.Token)
	}
}

// failingLogs is an in-memory log whose writes fail once fail is set.
type failingLogs struct {
	*raft.InmemStore
	fail atomic.Bool
}

func (l *failingLogs) StoreLogs(logs []*raft.Log) error {
	if l.fail.Load() {
		return errors.New("planted write failure")
	}
	return l.InmemStore.StoreLogs(logs)
}

// A core whose log cannot be written stops for good: the proposal that
// hit the failure and every later wait answer ErrUnavailable, none hangs.
func TestEtcdCoreHaltsOnAWriteFailure(t *testing.T) {
	mem := raft.NewInmemStore()
	logs := &failingLogs{InmemStore: mem}
	f := fsm.New(nil)
	c, err := openCore(logs, mem, (&node.Storage{}).Machine(f, node.Hooks{}), etcdcodec.ID("a"), []uint64{etcdcodec.ID("a")}, nil,
		time.Millisecond, slog.New(slog.DiscardHandler), 1, etcdSnapPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	select {
	case <-c.leaderCh:
	case <-time.After(20 * time.Second):
		t.Fatal("no leadership")
	}
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: "k", Holder: "h", TTL: locktable.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.propose(data, time.Second); err != nil {
		t.Fatal(err)
	}
	logs.fail.Store(true)
	for i := range 3 {
		if _, err := c.propose(data, time.Second); !errors.Is(err, replica.ErrUnavailable) || !strings.Contains(err.Error(), "planted") {
			t.Fatalf("proposal %d after the failure: %v, want replica.ErrUnavailable naming the cause", i, err)
		}
	}
	if err := c.verify(time.Second); !errors.Is(err, replica.ErrUnavailable) {
		t.Fatalf("verify after the failure: %v", err)
	}
}
