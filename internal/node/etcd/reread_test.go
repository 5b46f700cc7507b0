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

// A read that comes back with a flipped bit when the engine loads what
// the start's checks read whole a moment before (a failing disk, or one
// bad read) is refused as damage: one line naming the data directory,
// the file and what to do, not an engine error without a file (a
// checksum mismatch, or raft-wal's bare "WAL is corrupt"). The disk
// itself is whole, so the next start, as the line says, serves again.
func TestSteppedNodeRefusesAFlippedSecondRead(t *testing.T) {
	const key = "a key that is easy to find in the segment"
	for _, part := range []string{"log entry", "snapshot"} {
		t.Run(part, func(t *testing.T) {
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
				if part == "snapshot" {
					if err := s.SnapshotNow(true); err != nil {
						t.Fatal(err)
					}
				}
				s.Close()

				var file string
				var at int64
				if part == "log entry" {
					file = firstFile(t, d, "/data/wal", ".wal")
					b, err := d.FS().ReadFile(file)
					if err != nil {
						t.Fatal(err)
					}
					at = int64(bytes.Index(b, []byte(key)))
				} else {
					file = path.Join(firstFile(t, d, "/data/snapshots", ""), "state.bin")
					b, err := d.FS().ReadFile(file)
					if err != nil {
						t.Fatal(err)
					}
					at = int64(len(b) / 2)
				}
				if at < 0 {
					t.Fatalf("%s: nothing to flip", file)
				}
				fl := &flipFS{FS: d.FS(), path: file, at: at}
				n, err := rereadNode(fl, fsm.New(nil))
				if err == nil {
					n.Close()
				}
				if !fl.flipped {
					t.Fatalf("no read of %s after the checks covered byte %d (start: %v)", file, at, err)
				}
				want := file
				if part == "snapshot" {
					want = path.Dir(file)
				}
				var de *node.DataDirError
				if !errors.As(err, &de) || de.File != want {
					t.Fatalf("start on a flipped second read: %v, want a *node.DataDirError naming %s", err, want)
				}
				msg := err.Error()
				for _, w := range []string{"data directory /data is damaged", want, "read back differently", "start it again"} {
					if !strings.Contains(msg, w) {
						t.Fatalf("refusal %q does not say %q", msg, w)
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
		})
	}
}

// firstFile is the path of the first entry of dir on d whose name ends
// in suffix.
func firstFile(t *testing.T, d *disk.Disk, dir, suffix string) string {
	t.Helper()
	ents, err := d.FS().ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			return path.Join(dir, e.Name())
		}
	}
	t.Fatalf("nothing ending in %q in %s", suffix, dir)
	return ""
}

// rereadNode opens a stepped node alone over fsys, with a log of several
// segments and no snapshot unless asked, so that the engine reads a
// sealed segment again after the start's checks did.
func rereadNode(fsys node.FS, f *fsm.FSM) (*Stepped, error) {
	return OpenStepped(node.Config{DataDir: "/data", FS: fsys, NodeID: "a", ElectionTimeout: 500 * time.Millisecond,
		HeartbeatTimeout: 500 * time.Millisecond, WALSegmentSize: 4 << 10, SnapshotThreshold: 1 << 20, TrailingLogs: 1 << 20,
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == f.path && f.armed && !f.flipped && f.at < int64(len(b)) {
		b[f.at] ^= 0xff
		f.flipped = true
	}
	if strings.HasSuffix(name, ".wal") {
		f.armed = true
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
