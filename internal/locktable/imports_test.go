package locktable

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreIsPure fails if the core imports a clock, the network, a
// goroutine-coordination package, logging or raft: the state machine must
// behave identically on every replica and in every replay.
func TestCoreIsPure(t *testing.T) {
	allowed := map[string]bool{
		"container/heap": true, "encoding/binary": true, "errors": true, "fmt": true,
		"hash/crc32": true, "maps": true, "math": true, "slices": true, "sort": true, "strings": true,
		// The key index behind List. A B-tree is a pure data structure: it
		// reads no clock, does no I/O, starts no goroutine and orders keys
		// deterministically; its only imports are fmt, io, sort,
		// strings and sync (a free list it keeps under a mutex, which a
		// table, used from one goroutine, never contends).
		"github.com/google/btree": true,
		// The key index's hash (keyindex.go). Its seed is random, as a Go
		// map's is, so that no one can choose keys that collide; nothing
		// the table answers depends on it, because the index is only ever
		// asked for one key, never walked. It reads no clock, does no I/O
		// and starts no goroutine.
		"hash/maphash": true,
		// The bounds-checked field reader the snapshot decoder shares with
		// the log's and the binary calls' decoders. It is ours, so it is
		// held to this same list below.
		binreadPath: true,
		// The simulation's planted bugs: On is false in every build but
		// the simulation's own (go test -tags simbugs), and imports
		// nothing then either.
		"github.com/fencelock/fencelock/internal/plant": true,
		// The snapshot's byte format, a package of the core's own: held
		// to this same list below.
		snapshotPath: true,
	}
	checkImports(t, ".", allowed)
	checkImports(t, filepath.Join("..", "binread"), allowed)
	checkImports(t, "snapshot", allowed)
}

const (
	binreadPath  = "github.com/fencelock/fencelock/internal/binread"
	snapshotPath = "github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// checkImports fails t for each import of the package in dir that allowed
// does not list.
func checkImports(t *testing.T, dir string, allowed map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q; the core may not (add it to the allow-list only if it reads no clock, does no I/O and starts no goroutine)", filepath.Join(dir, name), path)
			}
		}
	}
}
