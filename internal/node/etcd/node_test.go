package etcd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/replica"
)

func etcdTestConfig(dir, id string) node.Config {
	return node.Config{
		DataDir: dir, NodeID: id,
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), AsyncLogWrites: testAsync(),
	}
}

// testAsync says whether the package's tests run the engine with
// asynchronous log writes: FENCELOCK_ETCD_ASYNC=1 runs them all so.
func testAsync() bool { return os.Getenv("FENCELOCK_ETCD_ASYNC") == "1" }

func openTestEtcd(t *testing.T, cfg node.Config) (*Node, *fsm.FSM) {
	t.Helper()
	f := fsm.New(nil)
	n, err := Open(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, f
}

// awaitLeadership waits for r's next change of leadership and wants it
// to be lead.
func awaitLeadership(t *testing.T, r replica.Replicator, lead bool) {
	t.Helper()
	select {
	case got := <-r.Leadership():
		if got != lead {
			t.Fatalf("leadership %v, want %v", got, lead)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no change of leadership to %v", lead)
	}
}

func acquire(t *testing.T, key string) []byte {
	t.Helper()
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: key, Holder: "h", TTL: locktable.Second})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// grantEtcd acquires keys on r, which leads, and answers their tokens,
// each above the one before and above after.
func grantEtcd(t *testing.T, r replica.Replicator, after uint64, keys ...string) []uint64 {
	t.Helper()
	var toks []uint64
	for _, k := range keys {
		res, err := r.Propose(acquire(t, k), time.Second)
		if err != nil || res.Err != nil {
			t.Fatalf("acquire %s: %v %+v", k, err, res)
		}
		if res.Lease.Token <= after {
			t.Fatalf("acquire %s: token %d, not above %d", k, res.Lease.Token, after)
		}
		after = res.Lease.Token
		toks = append(toks, after)
	}
	return toks
}

// A node alone through Replicator: it leads, proposals answer rising
// tokens the ceiling covers, and after a restart the log replays (every
// token answered before is applied again) and new tokens are above every
// one answered before.
func TestEtcdNodeSingle(t *testing.T) {
	dir := t.TempDir()
	cfg := etcdTestConfig(dir, "a")
	n, f := openTestEtcd(t, cfg)
	var r replica.Replicator = n
	if got := r.StartIndex(); got != 0 {
		t.Fatalf("start index of a new node %d", got)
	}
	awaitLeadership(t, r, true)
	if err := r.VerifyLeader(); err != nil {
		t.Fatalf("verify the only voter: %v", err)
	}
	if err := r.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	toks := grantEtcd(t, r, 0, "a", "b", "c", "d", "e")
	last := toks[len(toks)-1]
	if err := r.Covered(last, time.Second); err != nil {
		t.Fatalf("covered %d: %v", last, err)
	}
	if c := n.Ceiling(); c < last {
		t.Fatalf("ceiling %d below the token %d answered", c, last)
	}
	if st := r.Status(); st.State != replica.Leader || st.LeaderID != "a" || st.Term == 0 || st.LeaderSilent || st.Fault != nil {
		t.Fatalf("status %+v", st)
	}
	if r.AppliedIndex() < r.CommitIndex() || r.CommitIndex() == 0 {
		t.Fatalf("applied %d, commit %d", r.AppliedIndex(), r.CommitIndex())
	}
	servers, err := r.Configuration()
	if err != nil || len(servers) != 1 || servers[0].ID != "a" || !servers[0].Voter {
		t.Fatalf("configuration %+v, %v", servers, err)
	}
	if peers, ok := r.Peers(); !ok || len(peers) != 0 {
		t.Fatalf("peers of a node alone %v %v", peers, ok)
	}
	if err := r.RemoveServer("a", time.Second); err == nil || errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("removing the only voter: %v, want a refusal", err)
	}
	if err := r.AddNonvoter("a", "", time.Second); err != nil {
		t.Fatalf("a voter added as a non-voter: %v", err)
	}
	if servers, err := r.Configuration(); err != nil || len(servers) != 1 || !servers[0].Voter {
		t.Fatalf("configuration after the refused changes %+v, %v", servers, err)
	}
	if err := r.TransferLeadership(); err == nil || errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("transfer with no other voter: %v, want a refusal", err)
	}
	if err := r.ProbeRaft(t.Context(), "b", "b.invalid:1", time.Second); err == nil {
		t.Fatal("probe of an address nobody listens on: no error")
	}
	if f.LastToken() != last {
		t.Fatalf("state machine's last token %d, want %d", f.LastToken(), last)
	}
	end := r.AppliedIndex()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n, f = openTestEtcd(t, cfg)
	r = n
	if got := r.StartIndex(); got < end {
		t.Fatalf("start index after a restart %d, below the applied %d", got, end)
	}
	awaitLeadership(t, r, true)
	if err := r.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	if got := f.LastToken(); got != last {
		t.Fatalf("replayed state machine's last token %d, want %d", got, last)
	}
	if r.AppliedIndex() < r.StartIndex() {
		t.Fatalf("applied %d after a barrier, below the start %d", r.AppliedIndex(), r.StartIndex())
	}
	grantEtcd(t, r, last, "f", "g")
}

// A proposal to a node that does not lead is refused with ErrNotLeader
// and changes nothing: before its first election, a node alone follows.
func TestEtcdNodeProposeBeforeLeading(t *testing.T) {
	cfg := etcdTestConfig(t.TempDir(), "a")
	cfg.ElectionTimeout = time.Hour // no election within the test
	n, f := openTestEtcd(t, cfg)
	if _, err := n.Propose(acquire(t, "k"), time.Second); !errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("propose on a follower: %v", err)
	}
	if err := n.Barrier(time.Second); !errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("barrier on a follower: %v", err)
	}
	if err := n.VerifyLeader(); !errors.Is(err, replica.ErrNotLeader) {
		t.Fatalf("verify on a follower: %v", err)
	}
	if f.LastToken() != 0 {
		t.Fatalf("a refused proposal issued token %d", f.LastToken())
	}
}

// Config.TokenFloor becomes the pending floor of a new node only; the
// service commits and clears it.
func TestEtcdNodePendingFloor(t *testing.T) {
	cfg := etcdTestConfig(t.TempDir(), "a")
	cfg.TokenFloor = 5000
	n, _ := openTestEtcd(t, cfg)
	awaitLeadership(t, n, true)
	if got := n.PendingFloor(); got != 5000 {
		t.Fatalf("pending floor %d", got)
	}
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpTokenFloor, Token: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Propose(data, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.ClearPendingFloor(5000); err != nil {
		t.Fatal(err)
	}
	grantEtcd(t, n, 5000, "k")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, _ = openTestEtcd(t, cfg)
	if got := n.PendingFloor(); got != 0 {
		t.Fatalf("a node with state took the floor again: %d", got)
	}
}

// A damaged data dir of the etcd engine is refused as the hashicorp
// node's is (TestOpenStoresRefusesDamage): a *DataDirError of one line
// naming the file.
func TestEtcdNodeRefusesDamage(t *testing.T) {
	base := t.TempDir()
	cfg := etcdTestConfig(base, "a")
	n, _ := openTestEtcd(t, cfg)
	awaitLeadership(t, n, true)
	var keys []string
	for i := range 5 {
		keys = append(keys, fmt.Sprintf("a key that is easy to find in the segment %d", i))
	}
	grantEtcd(t, n, 0, keys...)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	copyTo := func(t *testing.T) string {
		dst := filepath.Join(t.TempDir(), "d")
		if err := os.CopyFS(dst, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	refused := func(t *testing.T, dir, file string) {
		t.Helper()
		n, err := Open(etcdTestConfig(dir, "a"), fsm.New(nil))
		if err == nil {
			n.Close()
			t.Fatalf("started on a damaged data dir (want a refusal naming %s)", file)
		}
		var de *node.DataDirError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), file) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("refusal %v, want one line naming %s", err, file)
		}
	}
	t.Run("a byte flipped in a middle entry", func(t *testing.T) {
		d := copyTo(t)
		segs, err := filepath.Glob(filepath.Join(d, "wal", "*.wal"))
		if err != nil || len(segs) == 0 {
			t.Fatalf("segments %v: %v", segs, err)
		}
		sort.Strings(segs)
		path := segs[0]
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		at := indexOf(b, []byte(keys[2]), 0)
		if at < 0 {
			t.Fatal("key not found in the segment")
		}
		b[at] ^= 0xff
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		refused(t, d, ".wal")
	})
	t.Run("watermark beyond the log", func(t *testing.T) {
		d := copyTo(t)
		if err := node.EditStateFile(d, func(s *node.StateRecord) { s.Durable += 3 }); err != nil {
			t.Fatal(err)
		}
		refused(t, d, ".wal")
	})
	t.Run("state file missing under a checksummed log", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, "fencelock.state"))
		refused(t, d, "fencelock.state")
	})
	t.Run("log metadata missing", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, "wal", "wal-meta.db"))
		refused(t, d, "wal-meta.db")
	})
}

// A restart's replay ends at the last command the log held at open, not
// at an entry after it that carries none (a barrier, a new leader's
// empty entry): the state machine never applies those, so a replay
// waiting for one would keep the relaxed GC policy on until the next
// write.
func TestEtcdReplayEndsAtTheLastCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := etcdTestConfig(dir, "a")
	n, _ := openTestEtcd(t, cfg)
	awaitLeadership(t, n, true)
	var lastCmd uint64
	for _, k := range []string{"a", "b", "c"} {
		res, err := n.Propose(acquire(t, k), time.Second)
		if err != nil || res.Err != nil {
			t.Fatalf("acquire %s: %v %+v", k, err, res)
		}
		lastCmd = res.Index
	}
	if err := n.Barrier(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, f := openTestEtcd(t, cfg)
	if n.core.replayTo != lastCmd || n.StartIndex() <= lastCmd {
		t.Fatalf("replay to %d, want the last command %d (the log ends at %d)", n.core.replayTo, lastCmd, n.StartIndex())
	}
	if !f.WaitApplied(lastCmd, nil) || f.LastToken() != 3 {
		t.Fatalf("applied %d, last token %d", f.AppliedIndex(), f.LastToken())
	}
}
