// Package walseg reads raft-wal's log segments for a node's restart: a
// segment filer that is raft-wal's own but for its readers, which read a
// sealed segment's index once and its frames in windows, and the tail
// segment's committed frames the same way, instead of one 64 KiB read per
// entry. Whatever they do not find as expected they leave to raft-wal's
// reader. internal/node opens every log through NewFiler.
package walseg

import "github.com/hashicorp/raft-wal/types"

// NewFiler is the segment filer of the raft-wal log in dir, over vfs.
func NewFiler(dir string, vfs types.VFS) types.SegmentFiler { return newSealedFiler(dir, vfs) }
