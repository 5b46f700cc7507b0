package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The replication engines a data directory can be written by. Their logs
// share a format on disk (internal/node/etcd/etcdcodec) but not a
// meaning: a node of one engine must never read the other's, so the
// directory records its engine at the first start.
const (
	EngineHashicorp = "hashicorp"
	EngineEtcd      = "etcd"
)

// engineFileName records which engine wrote a data directory.
const engineFileName = "fencelock.engine"

// checkEngine refuses dir when it records an engine other than engine,
// and records engine when it records none. A directory without the file
// that already holds a log was written before engines were recorded, by
// the hashicorp node (hasLog says so). A file that names no engine is
// damage (*DataDirError).
func checkEngine(fsys FS, dir, engine string, hasLog bool) error {
	path := filepath.Join(dir, engineFileName)
	b, err := fsys.ReadFile(path)
	switch {
	case err == nil:
		got := strings.TrimSpace(string(b))
		if got != EngineHashicorp && got != EngineEtcd {
			// The file is written once, whole, through a rename: what
			// names no engine was damaged after, and only the operator
			// knows which engine ran here.
			d := damage(dir, engineFileName, "reads %q, which names no engine (%s or %s)", got, EngineHashicorp, EngineEtcd)
			d.Repair = fmt.Sprintf("Write the engine this directory's node runs into it (`echo %s > %s` for --engine %s, "+
				"`echo %s > %s` for the default) and start it again", EngineEtcd, path, EngineEtcd, EngineHashicorp, path)
			return d
		}
		if got != engine {
			return fmt.Errorf("node: the data directory %s was written by the %s engine; this server runs the %s engine (start it with --engine %s, or use another data directory)",
				dir, got, engine, got)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("node: reading %s: %w", path, err)
	case hasLog && engine != EngineHashicorp:
		return fmt.Errorf("node: the data directory %s was written by the %s engine; this server runs the %s engine (start it with --engine %s, or use another data directory)",
			dir, EngineHashicorp, engine, EngineHashicorp)
	}
	tmp := path + ".tmp"
	if err := writeSynced(fsys, tmp, []byte(engine+"\n")); err != nil {
		return fmt.Errorf("node: recording the engine: %w", err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("node: recording the engine: %w", err)
	}
	return fsys.SyncDir(dir)
}

// writeSynced writes b as the whole of the file at path, fsynced.
func writeSynced(fsys FS, path string, b []byte) error {
	f, err := fsys.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// dirHasLog says whether dir holds a raft log already (segments or
// raft-wal's metadata), for checkEngine: read before the stores are
// opened, which create both.
func dirHasLog(fsys FS, dir string) (bool, error) {
	walDir := filepath.Join(dir, "wal")
	segs, err := walFiles(fsys, walDir)
	if err != nil {
		return false, fmt.Errorf("node: data dir: %w", err)
	}
	if len(segs) > 0 {
		return true, nil
	}
	_, err = fsys.Stat(filepath.Join(walDir, walMetaFile))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("node: data dir: %w", err)
}

// claimEngine refuses dir (locked) when another engine wrote it, and
// records engine when none is recorded.
func claimEngine(fsys FS, dir, engine string) error {
	has, err := dirHasLog(fsys, dir)
	if err != nil {
		return err
	}
	return checkEngine(fsys, dir, engine, has)
}

// dirEngine is the engine dir records; "" when it records none.
func dirEngine(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, engineFileName))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}
