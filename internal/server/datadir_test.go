package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func grantN(t *testing.T, ts *testServer, prefix string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		a := ts.post("/v1/acquire", fmt.Sprintf(`{"key":"%s/%d","holder":"h","ttl_ms":600000}`, prefix, i))
		if a.status != 200 {
			t.Fatalf("acquire: %+v", a)
		}
		last = num(a, "token")
	}
	return last
}

// The ceiling in the state file covers every token answered, in blocks;
// a clean restart keeps the tokens dense.
func TestTokenCeilingCoversEveryGrant(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	last := grantN(t, ts, "a", 30)
	if c := ts.node.state.get().Ceiling; c < last || c > last+tokenBlock {
		t.Fatalf("ceiling %d for last token %d", c, last)
	}
	ts.stop()
	st, err := readStateFile(dir)
	if err != nil || st.Ceiling < last || st.Durable == 0 || st.CRCFrom != 1 {
		t.Fatalf("state on disk %+v %v", st, err)
	}
	ts = startServer(t, fastConfig(dir))
	if tok := grantN(t, ts, "b", 1); tok != last+1 {
		t.Fatalf("token after a clean restart %d, want %d", tok, last+1)
	}
}

// A pending floor (what recover leaves) is committed before the first
// grant, then cleared.
func TestPendingFloorCommittedBeforeServing(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	grantN(t, ts, "a", 3)
	ts.stop()
	sf, err := openStateFile(dir, dirState{})
	if err != nil {
		t.Fatal(err)
	}
	sf.update(func(s *dirState) { s.PendingFloor = 5000 }, true)
	sf.close()
	ts = startServer(t, fastConfig(dir))
	if tok := grantN(t, ts, "b", 1); tok != 5001 {
		t.Fatalf("first token after a floor of 5000: %d", tok)
	}
	if st := ts.node.state.get(); st.PendingFloor != 0 || st.Ceiling < 5001 {
		t.Fatalf("state after the floor: %+v", st)
	}
}

func refusal(t *testing.T, dir, file string) {
	t.Helper()
	s, err := New(fastConfig(dir))
	if err == nil {
		s.Close()
		t.Fatalf("started on a damaged data dir (want a refusal naming %s)", file)
	}
	var de *DataDirError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), file) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("refusal %v, want one line naming %s", err, file)
	}
}

func TestOpenStoresRefusesDamage(t *testing.T) {
	base := t.TempDir()
	ts := startServer(t, fastConfig(base))
	grantN(t, ts, "a", 5)
	ts.stop()
	copyTo := func(t *testing.T) string {
		dst := filepath.Join(t.TempDir(), "d")
		if err := os.CopyFS(dst, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	t.Run("state file missing under a checksummed log", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, stateFileName))
		refusal(t, d, stateFileName)
	})
	t.Run("state file garbage", func(t *testing.T) {
		d := copyTo(t)
		os.WriteFile(filepath.Join(d, stateFileName), []byte("nonsense"), 0o600)
		refusal(t, d, stateFileName)
	})
	t.Run("watermark beyond the log", func(t *testing.T) {
		d := copyTo(t)
		sf, err := openStateFile(d, dirState{})
		if err != nil {
			t.Fatal(err)
		}
		sf.update(func(s *dirState) { s.Durable += 3 }, true)
		sf.close()
		refusal(t, d, ".wal")
	})
	t.Run("recover then start", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, "wal", walMetaFile))
		refusal(t, d, walMetaFile)
		did, err := Recover(d, RecoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(did, "\n"), "dropped the log") {
			t.Fatalf("recover said %q", did)
		}
		ts := startServer(t, fastConfig(d))
		if tok := grantN(t, ts, "b", 1); tok <= 5 {
			t.Fatalf("token after recover %d", tok)
		}
	})
	t.Run("recover without a floor needs --min-token", func(t *testing.T) {
		d := copyTo(t)
		os.Remove(filepath.Join(d, stateFileName))
		if _, err := Recover(d, RecoverOptions{}); err == nil || !strings.Contains(err.Error(), "min-token") {
			t.Fatalf("recover without a floor: %v", err)
		}
		if _, err := Recover(d, RecoverOptions{MinToken: 100}); err != nil {
			t.Fatal(err)
		}
		ts := startServer(t, fastConfig(d))
		if tok := grantN(t, ts, "b", 1); tok != 101 {
			t.Fatalf("token after recover --min-token 100: %d", tok)
		}
	})
}

// A data dir from before the state file (a log without checksums) starts
// and gains the file; its old entries are read as they are.
func TestLegacyDataDirStarts(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	last := grantN(t, ts, "a", 4)
	ts.stop()
	// Rewrite the log's entries without checksums, as an older server
	// wrote them, and drop the state file.
	st, err := openStores(dir, walSegmentSize, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := st.logs.FirstIndex()
	lastIdx, _ := st.logs.LastIndex()
	var plain []*raft.Log
	for i := first; i <= lastIdx; i++ {
		var l raft.Log
		if err := st.logs.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		plain = append(plain, &l)
	}
	inner := st.logs.inner
	if err := inner.DeleteRange(first, lastIdx); err != nil {
		t.Fatal(err)
	}
	if err := inner.StoreLogs(plain); err != nil {
		t.Fatal(err)
	}
	st.close()
	os.Remove(filepath.Join(dir, stateFileName))
	ts = startServer(t, fastConfig(dir))
	if tok := grantN(t, ts, "b", 1); tok != last+1 {
		t.Fatalf("token on a legacy dir %d, want %d", tok, last+1)
	}
	if s := ts.node.state.get(); s.CRCFrom != lastIdx+1 {
		t.Fatalf("legacy state %+v, want CRCFrom %d", s, lastIdx+1)
	}
}

func TestRecoverRefusesAFloorNearTheEnd(t *testing.T) {
	if _, err := Recover(t.TempDir(), RecoverOptions{MinToken: MaxFloor + 1}); err == nil {
		t.Fatal("a floor near the end of the token space was accepted")
	}
}

func TestMissingWALDirRefused(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, fastConfig(dir))
	grantN(t, ts, "a", 2)
	ts.stop()
	os.RemoveAll(filepath.Join(dir, "wal"))
	refusal(t, dir, filepath.Join(dir, "wal")+":")
}

// A damaged newest snapshot refuses the start; recover sets it aside and
// the next token is still above every token issued.
func TestDamagedSnapshotRefusedAndRecovered(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig(dir)
	cfg.SnapshotThreshold, cfg.TrailingLogs, cfg.SnapshotInterval = 16, 4, 5*time.Millisecond
	ts := startServer(t, cfg)
	var last uint64
	deadline := time.Now().Add(20 * time.Second)
	for {
		last = grantN(t, ts, fmt.Sprintf("a%d", last), 20)
		if snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots")); len(snaps) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no two snapshots")
		}
	}
	ts.stop()
	fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	list, err := fss.List()
	if err != nil || len(list) < 2 {
		t.Fatalf("snapshots %v %v", list, err)
	}
	newest := list[0].ID
	state := filepath.Join(dir, "snapshots", newest, "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	os.WriteFile(state, b, 0o600)
	refusal(t, dir, filepath.Join("snapshots", newest))
	did, err := Recover(dir, RecoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recover:\n%s", strings.Join(did, "\n"))
	if !strings.Contains(strings.Join(did, "\n"), "snapshot "+newest+" is damaged") {
		t.Fatalf("recover said %q", did)
	}
	ts = startServer(t, cfg)
	if tok := grantN(t, ts, "b", 1); tok <= last {
		t.Fatalf("token after recover %d, not above %d", tok, last)
	}
}
