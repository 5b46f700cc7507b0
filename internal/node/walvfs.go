package node

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/raft-wal/types"
)

// walVFS is raft-wal's file system over an FS that is not the operating
// system's, doing what raft-wal's own (raft-wal/fs) does: a segment is
// preallocated when created, and its directory is synced with its first
// sync; a deleted one's directory is synced at once.
type walVFS struct{ fsys FS }

var _ types.VFS = walVFS{}

func (v walVFS) ListDir(dir string) ([]string, error) {
	ents, err := v.fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (v walVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.fsys.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if size > 0 {
		if size > math.MaxInt32 {
			f.Close()
			return nil, fmt.Errorf("maximum file size is %d bytes", math.MaxInt32)
		}
		if err := f.Allocate(int64(size)); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &walNewFile{File: f, fsys: v.fsys, dir: dir}, nil
}

func (v walVFS) Delete(dir, name string) error {
	if err := v.fsys.Remove(filepath.Join(dir, name)); err != nil {
		return err
	}
	return v.fsys.SyncDir(dir)
}

func (v walVFS) OpenReader(dir, name string) (types.ReadableFile, error) {
	return v.fsys.OpenFile(filepath.Join(dir, name), os.O_RDONLY, 0)
}

func (v walVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	return v.fsys.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
}

// walNewFile is a segment walVFS created: its first sync syncs its
// directory too, which makes the file's entry durable.
type walNewFile struct {
	File
	fsys FS
	dir  string

	mu     sync.Mutex
	synced bool
}

func (f *walNewFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.synced {
		return nil
	}
	if err := f.fsys.SyncDir(f.dir); err != nil {
		return err
	}
	f.synced = true
	return nil
}

// walMeta is raft-wal's metadata (its segment list, and the stable
// store's keys: term, vote, the etcd engine's hard state) in a file of
// an FS that is not the operating system's, where bolt (raft-wal's own
// MetaStore) cannot run. It keeps bolt's promise: each change replaces
// the whole record atomically and durably before it returns — written
// to a temporary file, synced, renamed over walMetaFile, the directory
// synced. The record carries a CRC-32C; one that does not match is
// wal.ErrCorrupt.
type walMeta struct {
	fsys FS
	dir  string

	mu  sync.Mutex
	rec walMetaRecord
}

var _ types.MetaStore = (*walMeta)(nil)

type walMetaRecord struct {
	State  types.PersistentState
	Stable map[string][]byte
}

const walMetaMagic = "FLWM"

func (m *walMeta) Load(dir string) (types.PersistentState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dir = dir
	b, err := m.fsys.ReadFile(filepath.Join(dir, walMetaFile))
	if errors.Is(err, fs.ErrNotExist) {
		m.rec = walMetaRecord{Stable: map[string][]byte{}}
		return m.rec.State, m.writeLocked(m.rec)
	}
	if err != nil {
		return types.PersistentState{}, err
	}
	if len(b) < len(walMetaMagic)+4 || string(b[:len(walMetaMagic)]) != walMetaMagic ||
		binary.LittleEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], castagnoli) {
		return types.PersistentState{}, fmt.Errorf("%w: %s: no valid record", types.ErrCorrupt, walMetaFile)
	}
	var rec walMetaRecord
	if err := json.Unmarshal(b[len(walMetaMagic):len(b)-4], &rec); err != nil {
		return types.PersistentState{}, fmt.Errorf("%w: %s: %v", types.ErrCorrupt, walMetaFile, err)
	}
	if rec.Stable == nil {
		rec.Stable = map[string][]byte{}
	}
	m.rec = rec
	return rec.State, nil
}

// writeLocked replaces the file with rec, durably; m.rec becomes rec
// only then.
func (m *walMeta) writeLocked(rec walMetaRecord) error {
	body, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b := append([]byte(walMetaMagic), body...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	path := filepath.Join(m.dir, walMetaFile)
	if err := writeSynced(m.fsys, path+".tmp", b); err != nil {
		return err
	}
	if err := m.fsys.Rename(path+".tmp", path); err != nil {
		return err
	}
	if err := m.fsys.SyncDir(m.dir); err != nil {
		return err
	}
	m.rec = rec
	return nil
}

func (m *walMeta) CommitState(st types.PersistentState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := m.rec
	rec.State = st
	return m.writeLocked(rec)
}

func (m *walMeta) GetStable(key []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.rec.Stable[string(key)]
	if !ok {
		return nil, nil
	}
	return append([]byte(nil), v...), nil
}

func (m *walMeta) SetStable(key, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec := walMetaRecord{State: m.rec.State, Stable: make(map[string][]byte, len(m.rec.Stable)+1)}
	for k, v := range m.rec.Stable {
		rec.Stable[k] = v
	}
	if value == nil {
		delete(rec.Stable, string(key))
	} else {
		rec.Stable[string(key)] = append([]byte(nil), value...)
	}
	return m.writeLocked(rec)
}

func (m *walMeta) Close() error { return nil }
