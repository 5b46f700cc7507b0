package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The replication engines a data directory can be written by. Their logs
// share a format on disk (etcd_entry.go) but not a meaning: a node of one
// engine must never read the other's, so the directory records its engine
// at the first start.
const (
	EngineHashicorp = "hashicorp"
	EngineEtcd      = "etcd"
)

// engineFileName records which engine wrote a data directory.
const engineFileName = "fencelock.engine"

// checkEngine refuses dir when it records an engine other than engine,
// and records engine when it records none. A directory without the file
// that already holds a log was written before engines were recorded, by
// the hashicorp node (hasLog says so).
func checkEngine(dir, engine string, hasLog bool) error {
	path := filepath.Join(dir, engineFileName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		got := strings.TrimSpace(string(b))
		if got != engine {
			return fmt.Errorf("node: the data directory %s was written by the %s engine; this server runs the %s engine (start it with --engine %s, or use another data directory)",
				dir, got, engine, got)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("node: reading %s: %w", path, err)
	case hasLog && engine != EngineHashicorp:
		return fmt.Errorf("node: the data directory %s was written by the %s engine; this server runs the %s engine (start it with --engine %s, or use another data directory)",
			dir, EngineHashicorp, engine, EngineHashicorp)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(engine+"\n"), 0o600); err != nil {
		return fmt.Errorf("node: recording the engine: %w", err)
	}
	f, err := os.Open(tmp)
	if err != nil {
		return fmt.Errorf("node: recording the engine: %w", err)
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return fmt.Errorf("node: recording the engine: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("node: recording the engine: %w", err)
	}
	return syncDir(dir)
}

// dirHasLog says whether dir holds a raft log already (segments or
// raft-wal's metadata), for checkEngine: read before the stores are
// opened, which create both.
func dirHasLog(dir string) (bool, error) {
	walDir := filepath.Join(dir, "wal")
	segs, err := walFiles(walDir)
	if err != nil {
		return false, fmt.Errorf("node: data dir: %w", err)
	}
	if len(segs) > 0 {
		return true, nil
	}
	_, err = os.Stat(filepath.Join(walDir, walMetaFile))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("node: data dir: %w", err)
}

// claimEngine refuses dir (locked) when another engine wrote it, and
// records engine when none is recorded.
func claimEngine(dir, engine string) error {
	has, err := dirHasLog(dir)
	if err != nil {
		return err
	}
	return checkEngine(dir, engine, has)
}

// dirEngine is the engine dir records; "" when it records none.
func dirEngine(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, engineFileName))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}
