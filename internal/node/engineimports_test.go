package node_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Each raft engine is a room of its own: no package outside the engines
// imports hashicorp/raft or etcd-io/raft, neither engine imports the
// other, and the shared node package (and the etcd engine, over the same
// stores) names hashicorp/raft only for the types of the data
// directory's format — raft-wal's log store and the file snapshot store —
// never its engine. An engine's subpackages are part of its room (the
// etcd engine's encodings, etcdcodec, and its raft-port transport,
// etcdport, import etcd-io/raft as the engine does). The
// raft port (internal/node/raftport) sits below both engines and the
// node package: it imports neither of them nor any raft. Test files may
// speak raw raft (they play attackers and peers).
func TestEngineImports(t *testing.T) {
	const (
		mod       = "github.com/fencelock/fencelock/"
		hashicorp = "github.com/hashicorp/raft"
		etcd      = "go.etcd.io/raft/v3"
	)
	storageOnly := []string{"Log", "LogCommand", "LogStore", "MonotonicLogStore", "StableStore", "SnapshotStore",
		"SnapshotSink", "SnapshotMeta", "FileSnapshotStore", "NewFileSnapshotStoreWithLogger", "NewInmemStore",
		"InmemStore", "NewInmemSnapshotStore", "SnapshotVersion", "SnapshotVersionMin", "SnapshotVersionMax", "Configuration", "Server", "ServerID",
		"ServerAddress", "ServerSuffrage", "Voter", "Nonvoter",
		"Transport", // the snapshot store's Create asks for one, to encode peers
	}
	allowed := map[string]map[string][]string{ // package -> import -> identifiers (nil: any)
		"internal/node":           {hashicorp: storageOnly},
		"internal/node/hashicorp": {hashicorp: nil},
		"internal/node/etcd": {hashicorp: storageOnly, etcd: nil, etcd + "/raftpb": nil,
			etcd + "/confchange": nil, etcd + "/tracker": nil}, // a snapshot's configuration checked as raft would
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	subRooms := map[string]bool{} // engine subpackages walked, as rooms of their engine
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		room := rel // an engine's subpackage is in the engine's room
		for _, e := range []string{"internal/node/hashicorp", "internal/node/etcd"} {
			if strings.HasPrefix(rel, e+"/") {
				room = e
				subRooms[rel] = true
			}
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		names := map[string]string{} // local name -> engine import
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			isEngine := p == hashicorp || p == etcd || strings.HasPrefix(p, etcd+"/")
			switch {
			case strings.HasPrefix(p+"/", mod+"internal/node/hashicorp/") && room == "internal/node/etcd",
				strings.HasPrefix(p+"/", mod+"internal/node/etcd/") && room == "internal/node/hashicorp":
				t.Errorf("%s imports the other engine, %s", path, p)
			case strings.HasPrefix(p+"/", mod+"internal/node/") && rel == "internal/node/raftport":
				t.Errorf("%s imports %s; the raft port sits below the node packages", path, p)
				continue
			case !isEngine:
				continue
			}
			idents, ok := allowed[room][p]
			if !ok {
				t.Errorf("%s imports %s; only the engines may", path, p)
				continue
			}
			if idents != nil {
				local := filepath.Base(p)
				if imp.Name != nil {
					local = imp.Name.Name
				}
				names[local] = p
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || names[x.Name] == "" {
				return true
			}
			if !slices.Contains(allowed[room][names[x.Name]], sel.Sel.Name) {
				t.Errorf("%s uses %s.%s: only the storage types of the data directory's format may be named here", path, x.Name, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files; the walk missed the tree", checked)
	}
	for _, sub := range []string{"internal/node/etcd/etcdcodec", "internal/node/etcd/etcdport"} {
		if !subRooms[sub] {
			t.Errorf("the walk did not check %s in the etcd engine's room", sub)
		}
	}
}
