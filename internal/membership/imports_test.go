package membership

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWorksOverTheReplicaInterface fails if membership imports an engine,
// the node layer under the engines, the service or a transport: it works
// over internal/replica and the state machine alone.
func TestWorksOverTheReplicaInterface(t *testing.T) {
	const mod = "github.com/fencelock/fencelock/"
	banned := []string{mod + "internal/node", mod + "internal/service", mod + "internal/httpapi", mod + "internal/server",
		"github.com/hashicorp/raft", "go.etcd.io/raft", "net/http"}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(".", name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if path == b || strings.HasPrefix(path, b+"/") {
					t.Errorf("%s imports %s", name, path)
				}
			}
		}
	}
}
