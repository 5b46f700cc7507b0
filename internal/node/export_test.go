package node

import (
	"log/slog"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Internals for the tests of package node_test, which run the node under
// the real server.

const (
	StateFileName = stateFileName
	WALMetaFile   = walMetaFile
	TokenBlock    = tokenBlock
)

type DirState = dirState

func ReadStateFile(dir string) (dirState, error) { return readStateFile(OSFS{}, dir) }

// SetState changes the state file of the stopped node in dir.
var SetState = EditStateFile

// RewriteWithoutChecksums rewrites the log of the stopped node in dir as
// a server from before checksums wrote it, and answers its last index.
func RewriteWithoutChecksums(dir string) (uint64, error) {
	st, err := openStores(OSFS{}, dir, EngineHashicorp, WALSegmentSize, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, err
	}
	defer st.close()
	first, _ := st.logs.FirstIndex()
	last, _ := st.logs.LastIndex()
	var plain []*raft.Log
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := st.logs.GetLog(i, &l); err != nil {
			return 0, err
		}
		plain = append(plain, &l)
	}
	inner := st.logs.inner
	if err := inner.DeleteRange(first, last); err != nil {
		return 0, err
	}
	return last, inner.StoreLogs(plain)
}
