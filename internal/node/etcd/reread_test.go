package etcd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node"
	"github.com/fencelock/fencelock/internal/sim/disk"
)

// A read that comes back with a flipped bit after the start's checks
// read the log whole (a failing disk, or one bad read) is refused as
// damage: one line naming the data directory, the segment and what to
// do, not an engine error without a file (a checksum mismatch, or
// raft-wal's bare "WAL is corrupt"). The disk itself is whole, so the next start, as the line says,
// serves again.
func TestSteppedNodeRefusesAFlippedSecondRead(t *testing.T) {
	const key = "a key that is easy to find in the segment"
	synctest.Test(t, func(t *testing.T) {
		d := disk.New(1)
		s, err := rereadNode(d.FS(), fsm.New(nil))
		if err != nil {
			t.Fatal(err)
		}
		lead(t, s)
		var token uint64
		for i := range 40 { // past the first 4 KiB segment
			token = grant(t, s, fmt.Sprint(key, i))
		}
		s.Close()

		ents, err := d.FS().ReadDir("/data/wal")
		if err != nil {
			t.Fatal(err)
		}
		var seg string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".wal") {
				seg = path.Join("/data/wal", e.Name())
				break
			}
		}
		b, err := d.FS().ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		at := int64(bytes.Index(b, []byte(key)))
		if seg == "" || at < 0 {
			t.Fatalf("segment %q, key at %d", seg, at)
		}
		fl := &flipFS{FS: d.FS(), path: seg, at: at}
		n, err := rereadNode(fl, fsm.New(nil))
		if err == nil {
			n.Close()
		}
		if !fl.flipped {
			t.Fatalf("no read of %s after the checks covered byte %d (start: %v)", seg, at, err)
		}
		var de *node.DataDirError
		if !errors.As(err, &de) || de.File != seg {
			t.Fatalf("start on a flipped second read: %v, want a *node.DataDirError naming %s", err, seg)
		}
		msg := err.Error()
		for _, want := range []string{"data directory /data is damaged", seg, "read back differently", "start it again"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("refusal %q does not say %q", msg, want)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Fatalf("refusal %q is not one line", msg)
		}

		f := fsm.New(nil)
		s, err = rereadNode(d.FS(), f)
		if err != nil {
			t.Fatalf("the start after a flipped read: %v", err)
		}
		defer s.Close()
		lead(t, s)
		if got := f.LastToken(); got != token {
			t.Fatalf("started again with tokens up to %d, want %d", got, token)
		}
	})
}

// rereadNode opens a stepped node alone over fsys, with a log of several
// segments and no snapshot, so that the engine reads a sealed segment
// again after the start's checks did.
func rereadNode(fsys node.FS, f *fsm.FSM) (*Stepped, error) {
	return OpenStepped(node.Config{DataDir: "/data", FS: fsys, NodeID: "a", ElectionTimeout: 500 * time.Millisecond,
		HeartbeatTimeout: 500 * time.Millisecond, WALSegmentSize: 4 << 10, SnapshotThreshold: 1 << 20,
		Logger: slog.New(slog.DiscardHandler), AsyncLogWrites: testAsync()}, f, SteppedConfig{Send: func([]Message) {}, Seed: 1 << 40})
}

// flipFS flips byte at of the file path in the first read that covers it
// once the start's tail scan has read a segment whole (ReadFile): the
// checks before saw the byte as written, the engine's own reading after
// them does not.
type flipFS struct {
	node.FS
	path string
	at   int64

	mu             sync.Mutex
	armed, flipped bool
}

func (f *flipFS) ReadFile(name string) ([]byte, error) {
	b, err := f.FS.ReadFile(name)
	if strings.HasSuffix(name, ".wal") {
		f.mu.Lock()
		f.armed = true
		f.mu.Unlock()
	}
	return b, err
}

func (f *flipFS) OpenFile(name string, flag int, perm fs.FileMode) (node.File, error) {
	h, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || name != f.path {
		return h, err
	}
	return &flipFile{File: h, fs: f}, nil
}

type flipFile struct {
	node.File
	fs *flipFS
}

func (h *flipFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := h.File.ReadAt(b, off)
	f := h.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed && !f.flipped && off <= f.at && f.at < off+int64(n) {
		b[f.at-off] ^= 0xff
		f.flipped = true
	}
	return n, err
}
