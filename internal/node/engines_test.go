package node_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/node/etcd"
	"github.com/fencelock/fencelock/internal/node/hashicorp"
)

func etcdTestConfig(dir, id string) node.Config {
	return node.Config{
		DataDir: dir, NodeID: id,
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}
}

func hashicorpTestConfig(dir string) node.Config {
	return node.Config{
		DataDir: dir, NodeID: "a",
		HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond, SnapshotInterval: time.Minute,
		SnapshotThreshold: 8192, TrailingLogs: 10240,
		Logger: slog.New(slog.DiscardHandler),
	}
}

// openEtcdLeader opens a node alone on the etcd engine over dir and waits
// until it leads.
func openEtcdLeader(t *testing.T, dir string) *etcd.Node {
	t.Helper()
	n, err := etcd.Open(etcdTestConfig(dir, "a"), fsm.New(nil))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case lead := <-n.Leadership():
		if !lead {
			t.Fatal("the node alone did not lead")
		}
	case <-time.After(20 * time.Second):
		n.Close()
		t.Fatal("the node alone never led")
	}
	return n
}

// A data dir belongs to the engine that first started on it: each
// engine refuses the other's, naming both, and leaves it as it was.
func TestEtcdNodeRefusesTheOtherEngine(t *testing.T) {
	// hashicorpDir is a data dir a hashicorp node ran on and closed.
	hashicorpDir := func(t *testing.T) string {
		t.Helper()
		dir := t.TempDir()
		hn, err := hashicorp.Open(hashicorpTestConfig(dir), fsm.New(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := hn.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	wantRefusal := func(t *testing.T, err error, dir, wrote string) {
		t.Helper()
		if err == nil {
			t.Fatalf("started on a data dir of the %s engine", wrote)
		}
		if !strings.Contains(err.Error(), "written by the "+wrote+" engine") || !strings.Contains(err.Error(), "--engine "+wrote) {
			t.Fatalf("refusal %v does not name the %s engine", err, wrote)
		}
		b, rerr := os.ReadFile(filepath.Join(dir, "fencelock.engine"))
		if rerr == nil && strings.TrimSpace(string(b)) != wrote {
			t.Fatalf("the refusal changed the engine file to %q", b)
		}
	}
	t.Run("etcd on a hashicorp dir", func(t *testing.T) {
		dir := hashicorpDir(t)
		_, err := etcd.Open(etcdTestConfig(dir, "a"), fsm.New(nil))
		wantRefusal(t, err, dir, node.EngineHashicorp)
	})
	t.Run("etcd on a hashicorp dir from before the engine file", func(t *testing.T) {
		dir := hashicorpDir(t)
		if err := os.Remove(filepath.Join(dir, "fencelock.engine")); err != nil {
			t.Fatal(err)
		}
		_, err := etcd.Open(etcdTestConfig(dir, "a"), fsm.New(nil))
		wantRefusal(t, err, dir, node.EngineHashicorp)
		if _, err := os.Stat(filepath.Join(dir, "fencelock.engine")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refusal wrote an engine file: %v", err)
		}
	})
	t.Run("hashicorp on an etcd dir", func(t *testing.T) {
		dir := t.TempDir()
		n := openEtcdLeader(t, dir)
		data, err := fsm.Encode(fsm.Command{Op: fsm.OpAcquire, Key: "k", Holder: "h", TTL: locktable.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := n.Propose(data, time.Second); err != nil || res.Err != nil {
			t.Fatalf("acquire: %v %+v", err, res)
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = hashicorp.Open(hashicorpTestConfig(dir), fsm.New(nil), nil)
		wantRefusal(t, err, dir, node.EngineEtcd)
		// and the etcd engine still starts on it
		openEtcdLeader(t, dir).Close()
	})
}

// A flipped byte in the engine file is damage, not an engine the
// operator asked for: each engine refuses the directory with one line
// that names the file and says how to mend it, and the mended file
// starts again.
func TestEngineFileDamagedRefused(t *testing.T) {
	dir := t.TempDir()
	n := openEtcdLeader(t, dir)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "fencelock.engine")
	b, err := os.ReadFile(file)
	if err != nil || string(b) != "etcd\n" {
		t.Fatalf("engine file %q %v", b, err)
	}
	b[2] ^= 0x40 // "et#d"
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	opens := map[string]func() error{
		node.EngineEtcd: func() error {
			n, err := etcd.Open(etcdTestConfig(dir, "a"), fsm.New(nil))
			if err == nil {
				n.Close()
			}
			return err
		},
		node.EngineHashicorp: func() error {
			n, err := hashicorp.Open(hashicorpTestConfig(dir), fsm.New(nil), nil)
			if err == nil {
				n.Close()
			}
			return err
		},
	}
	for _, engine := range []string{node.EngineEtcd, node.EngineHashicorp} {
		err := opens[engine]()
		var de *node.DataDirError
		if !errors.As(err, &de) || de.File != file {
			t.Fatalf("%s on a damaged engine file: %v, want a *node.DataDirError naming %s", engine, err, file)
		}
		msg := err.Error()
		for _, want := range []string{"data directory " + dir + " is damaged", file, `"et#d"`, "echo etcd > " + file} {
			if !strings.Contains(msg, want) {
				t.Fatalf("%s: refusal %q does not say %q", engine, msg, want)
			}
		}
		if strings.Contains(msg, "\n") || strings.Contains(msg, "--engine et#d") || strings.Contains(msg, "recover") {
			t.Fatalf("%s: refusal %q: want one line, no engine named from the damage, no recover", engine, msg)
		}
		if got, _ := os.ReadFile(file); string(got) != string(b) {
			t.Fatalf("%s: the refusal changed the engine file to %q", engine, got)
		}
	}
	if _, err := node.Recover(dir, node.RecoverOptions{}); err == nil || !strings.Contains(err.Error(), file) ||
		!strings.Contains(err.Error(), "names no engine") {
		t.Fatalf("recover on a damaged engine file: %v", err)
	}
	// The repair it names.
	if err := os.WriteFile(file, []byte("etcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	openEtcdLeader(t, dir).Close()
}
