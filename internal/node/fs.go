package node

import (
	"io"
	"io/fs"
	"os"
)

// FS is the file system a data directory lives on: the operating
// system's (OSFS, what a server runs on) or, in the deterministic
// simulation, a disk of the world's that loses, tears and flips what was
// not synced (internal/sim). Everything the node writes goes through it:
// the state file, the engine file, the data directory's lock, raft-wal's
// segments (raft-wal's own types.VFS over it, walVFS) and metadata, and
// the snapshots. Paths are the operating system's (filepath).
type FS interface {
	MkdirAll(dir string) error
	// Stat, ReadFile and OpenFile report a missing file with an error
	// matching fs.ErrNotExist; OpenFile with O_EXCL an existing one with
	// fs.ErrExist.
	Stat(path string) (fs.FileInfo, error)
	ReadDir(dir string) ([]fs.DirEntry, error) // sorted by name
	ReadFile(path string) ([]byte, error)
	OpenFile(path string, flag int, perm fs.FileMode) (File, error)
	Remove(path string) error
	RemoveAll(path string) error
	Rename(oldpath, newpath string) error
	// SyncDir makes the entries of dir durable (fsync of the directory).
	SyncDir(dir string) error
	// Lock takes dir's lock (one process per data directory).
	Lock(dir string) (unlock func() error, err error)
}

// File is an open file of an FS.
type File interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.WriterAt
	io.Closer
	Sync() error
	Size() (int64, error)
	// Allocate reserves n bytes for the file, failing (ENOSPC) when they
	// would not fit; a file system that cannot tell does nothing.
	Allocate(n int64) error
}

// OSFS is the operating system's file system.
type OSFS struct{}

var _ FS = OSFS{}

func (OSFS) MkdirAll(dir string) error                        { return os.MkdirAll(dir, 0o700) }
func (OSFS) Stat(path string) (fs.FileInfo, error)            { return os.Stat(path) }
func (OSFS) ReadDir(dir string) ([]fs.DirEntry, error)        { return os.ReadDir(dir) }
func (OSFS) ReadFile(path string) ([]byte, error)             { return os.ReadFile(path) }
func (OSFS) Remove(path string) error                         { return os.Remove(path) }
func (OSFS) RemoveAll(path string) error                      { return os.RemoveAll(path) }
func (OSFS) Rename(oldpath, newpath string) error             { return os.Rename(oldpath, newpath) }
func (OSFS) Lock(dir string) (unlock func() error, err error) { return lockDir(dir) }

func (OSFS) OpenFile(path string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// SyncDir fsyncs dir.
func (OSFS) SyncDir(dir string) error { return syncDir(dir) }

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f osFile) Allocate(n int64) error { return reserveSpace(f.File, n) }

// fsOf is cfg's file system: the operating system's unless set.
func fsOf(cfg Config) FS {
	if cfg.FS == nil {
		return OSFS{}
	}
	return cfg.FS
}

// isOS says whether fsys is the operating system's: raft-wal then runs
// as it ships (its bolt metadata) rather than over FS. (The snapshot
// store is the same over every FS: openSnapStore.)
func isOS(fsys FS) bool {
	_, ok := fsys.(OSFS)
	return ok
}
