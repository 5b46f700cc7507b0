package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// snapRetain is how many snapshots a data directory keeps.
const snapRetain = 2

// openSnapStore is the data directory's snapshot store: hashicorp/raft's
// FileSnapshotStore's files and steps, over fsys (fsSnapStore), on the
// operating system's file system as on the simulation's. Its meta.json
// carries a checksum of its own (MetaCRC), which hashicorp's store does
// not write: a bit flipped in a snapshot's index or term would pass there.
// The files stay readable by hashicorp's store (it ignores the field).
func openSnapStore(fsys FS, dir string) (raft.SnapshotStore, error) {
	return newFSSnapStore(fsys, dir, snapRetain)
}

// fsSnapStore is hashicorp/raft's FileSnapshotStore (v1.7.3,
// file_snapshot.go) over an FS: the same files and the same steps, so
// that a simulated disk sees what the real store does to a real one.
// Each snapshot is a directory snapshots/TERM-INDEX-MSEC holding
// meta.json (the metadata, with a CRC-64 of the state) and state.bin,
// written under the name with .tmp appended and renamed into place once
// both are synced; the parent directory is synced then, and snapshots
// beyond the newest retain are deleted. List skips a snapshot whose
// metadata cannot be read; Open checks the state against its CRC. It
// does not record the legacy Peers field (nothing here reads it).
type fsSnapStore struct {
	fsys   FS
	path   string
	retain int
}

func newFSSnapStore(fsys FS, dir string, retain int) (*fsSnapStore, error) {
	s := &fsSnapStore{fsys: fsys, path: filepath.Join(dir, "snapshots"), retain: retain}
	if err := fsys.MkdirAll(s.path); err != nil {
		return nil, fmt.Errorf("snapshot path not accessible: %v", err)
	}
	// As the file store tests that it may write there.
	test := filepath.Join(s.path, "permTest")
	f, err := fsys.OpenFile(test, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, fmt.Errorf("permissions test failed: %v", err)
	}
	if err := errors.Join(f.Close(), fsys.Remove(test)); err != nil {
		return nil, fmt.Errorf("permissions test failed: %v", err)
	}
	return s, nil
}

// fsSnapMeta is meta.json, as the file store writes it.
type fsSnapMeta struct {
	raft.SnapshotMeta
	CRC []byte
	// MetaCRC is a CRC-64 (ECMA) of this metadata's JSON with MetaCRC
	// left out: the state's CRC does not cover the index and term, and a
	// bit flipped in them passes for another snapshot's (the simulation's
	// seed 3000926: a snapshot of entry 37 taken for one of an earlier
	// entry, so that entry 37 was in neither it nor the log). A meta that
	// fails it is unreadable; one written before it had one (none) is
	// taken as it is.
	MetaCRC []byte `json:",omitempty"`
}

var snapCRCTable = crc64.MakeTable(crc64.ECMA)

// selfCRC is the checksum MetaCRC holds.
func (m *fsSnapMeta) selfCRC() ([]byte, error) {
	c := *m
	c.MetaCRC = nil
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	h := crc64.New(snapCRCTable)
	_, _ = h.Write(b)
	return h.Sum(nil), nil
}

func (s *fsSnapStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("unsupported snapshot version %d", version)
	}
	name := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	dir := filepath.Join(s.path, name+".tmp")
	if err := s.fsys.MkdirAll(dir); err != nil {
		return nil, err
	}
	sink := &fsSnapSink{s: s, dir: dir, meta: fsSnapMeta{SnapshotMeta: raft.SnapshotMeta{Version: version, ID: name,
		Index: index, Term: term, Configuration: configuration, ConfigurationIndex: configurationIndex}}}
	if err := sink.writeMeta(); err != nil {
		return nil, err
	}
	fh, err := s.fsys.OpenFile(filepath.Join(dir, "state.bin"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, err
	}
	sink.state = fh
	sink.hash = crc64.New(snapCRCTable)
	sink.buf = bufio.NewWriter(io.MultiWriter(fh, sink.hash))
	return sink, nil
}

func (s *fsSnapStore) List() ([]*raft.SnapshotMeta, error) {
	snaps, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	var out []*raft.SnapshotMeta
	for _, m := range snaps {
		out = append(out, &m.SnapshotMeta)
		if len(out) == s.retain {
			break
		}
	}
	return out, nil
}

// snapshots are the readable snapshots, newest first.
func (s *fsSnapStore) snapshots() ([]*fsSnapMeta, error) {
	ents, err := s.fsys.ReadDir(s.path)
	if err != nil {
		return nil, err
	}
	var metas []*fsSnapMeta
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		m, err := s.readMeta(e.Name())
		if err != nil || m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax {
			continue
		}
		metas = append(metas, m)
	}
	slices.SortFunc(metas, func(a, b *fsSnapMeta) int {
		switch {
		case a.Term != b.Term:
			return cmpDesc(a.Term, b.Term)
		case a.Index != b.Index:
			return cmpDesc(a.Index, b.Index)
		}
		return strings.Compare(b.ID, a.ID)
	})
	return metas, nil
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

// errSnapCorrupt: a snapshot's file does not match its checksum.
var errSnapCorrupt = errors.New("fails its checksum")

func (s *fsSnapStore) readMeta(name string) (*fsSnapMeta, error) {
	b, err := s.fsys.ReadFile(filepath.Join(s.path, name, "meta.json"))
	if err != nil {
		return nil, err
	}
	m := &fsSnapMeta{}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(m); err != nil {
		return nil, err
	}
	if len(m.MetaCRC) > 0 {
		want, err := m.selfCRC()
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(want, m.MetaCRC) {
			return nil, fmt.Errorf("snapshot %s: meta.json %w", name, errSnapCorrupt)
		}
	}
	return m, nil
}

func (s *fsSnapStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	m, err := s.readMeta(id)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.fsys.ReadFile(filepath.Join(s.path, id, "state.bin"))
	if err != nil {
		return nil, nil, err
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	h.Write(b)
	if !bytes.Equal(m.CRC, h.Sum(nil)) {
		return nil, nil, fmt.Errorf("state.bin %w", errSnapCorrupt)
	}
	return &m.SnapshotMeta, io.NopCloser(bytes.NewReader(b)), nil
}

// reap deletes the snapshots beyond the newest retain.
func (s *fsSnapStore) reap() error {
	snaps, err := s.snapshots()
	if err != nil {
		return err
	}
	for i := s.retain; i < len(snaps); i++ {
		if err := s.fsys.RemoveAll(filepath.Join(s.path, snaps[i].ID)); err != nil {
			return err
		}
	}
	return nil
}

type fsSnapSink struct {
	s      *fsSnapStore
	dir    string
	meta   fsSnapMeta
	state  File
	hash   hash.Hash64
	buf    *bufio.Writer
	closed bool
}

func (k *fsSnapSink) ID() string                  { return k.meta.ID }
func (k *fsSnapSink) Write(b []byte) (int, error) { return k.buf.Write(b) }

func (k *fsSnapSink) Close() error {
	if k.closed {
		return nil
	}
	k.closed = true
	if err := k.finalize(); err != nil {
		if derr := k.s.fsys.RemoveAll(k.dir); derr != nil {
			return derr
		}
		return err
	}
	if err := k.writeMeta(); err != nil {
		return err
	}
	if err := k.s.fsys.Rename(k.dir, strings.TrimSuffix(k.dir, ".tmp")); err != nil {
		return err
	}
	if err := k.s.fsys.SyncDir(k.s.path); err != nil {
		return err
	}
	return k.s.reap()
}

func (k *fsSnapSink) Cancel() error {
	if k.closed {
		return nil
	}
	k.closed = true
	if err := k.finalize(); err != nil {
		return err
	}
	return k.s.fsys.RemoveAll(k.dir)
}

func (k *fsSnapSink) finalize() error {
	if err := k.buf.Flush(); err != nil {
		return err
	}
	if err := k.state.Sync(); err != nil {
		return err
	}
	size, statErr := k.state.Size()
	if err := k.state.Close(); err != nil {
		return err
	}
	if statErr != nil {
		return statErr
	}
	k.meta.Size = size
	k.meta.CRC = k.hash.Sum(nil)
	return nil
}

func (k *fsSnapSink) writeMeta() error {
	f, err := k.s.fsys.OpenFile(filepath.Join(k.dir, "meta.json"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	defer f.Close()
	sum, err := k.meta.selfCRC()
	if err != nil {
		return err
	}
	k.meta.MetaCRC = sum
	w := bufio.NewWriter(f)
	if err := json.NewEncoder(w).Encode(&k.meta); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Sync()
}
