package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// raft-wal v0.4.2's segment format (segment/format.go): a 32-byte file
// header, then 8-byte-aligned frames with an 8-byte header (type, three
// reserved bytes, a little-endian length, or for a commit frame the
// CRC-32C of everything since the previous commit frame).
const (
	segFileHeaderLen  = 32
	segFrameHeaderLen = 8
	segFrameEntry     = 1
	segFrameIndex     = 2
	segFrameCommit    = 3
)

// unsealTail rewrites the last segment file of the WAL in dir (the one
// with the highest id) so that it is no longer sealed: its index frame
// and the commit frame after it become one commit frame over the same
// entries. It is the repair of a log whose metadata records its sealed
// tail as open (a compaction after a failed rotation did that, before
// healingWAL refused such compactions): raft-wal reopens such a tail as
// sealed and never rotates it, so nothing can be appended. Every entry
// stays, committed as before; the next append seals the segment again and
// rotates. The WAL must be closed. It changes nothing and says why when
// the file is not in exactly that shape.
func unsealTail(fsys FS, dir string) (string, error) {
	path, err := lastSegment(fsys, dir)
	if err != nil {
		return "", err
	}
	b, err := fsys.ReadFile(path)
	if err != nil {
		return path, err
	}
	off, batchStart := segFileHeaderLen, 0 // the first batch's CRC covers the file header
	for off+segFrameHeaderLen <= len(b) {
		typ, n := b[off], int(binary.LittleEndian.Uint32(b[off+4:off+8]))
		switch typ {
		case segFrameCommit:
			off += segFrameHeaderLen
			batchStart = off
			continue
		case segFrameEntry:
			off += segFrameHeaderLen + n + (8-n%8)%8
			continue
		case segFrameIndex:
		default:
			return path, fmt.Errorf("%s is not sealed (frame type %d at offset %d)", path, typ, off)
		}
		commit := off + segFrameHeaderLen + n + (8-n%8)%8
		if commit+segFrameHeaderLen > len(b) || b[commit] != segFrameCommit ||
			binary.LittleEndian.Uint32(b[commit+4:commit+8]) != crc32.Checksum(b[batchStart:commit], castagnoli) {
			return path, fmt.Errorf("%s: the index frame at offset %d is not followed by its commit frame", path, off)
		}
		f, err := fsys.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return path, err
		}
		patch := make([]byte, commit+segFrameHeaderLen-off)
		patch[0] = segFrameCommit
		binary.LittleEndian.PutUint32(patch[4:8], crc32.Checksum(b[batchStart:off], castagnoli))
		_, werr := f.WriteAt(patch, int64(off))
		serr := f.Sync()
		cerr := f.Close()
		return path, errors.Join(werr, serr, cerr)
	}
	return path, fmt.Errorf("%s is not sealed", path)
}

// lastSegment is the path of the segment file with the highest id
// (names are BASEINDEX-ID.wal, the id in hex).
func lastSegment(fsys FS, dir string) (string, error) {
	names, err := walFiles(fsys, dir)
	if err != nil {
		return "", err
	}
	best, bestID := "", int64(-1)
	for _, name := range names {
		p := filepath.Join(dir, name)
		_, idHex, ok := strings.Cut(strings.TrimSuffix(name, ".wal"), "-")
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(idHex, 16, 64)
		if err == nil && id > bestID {
			best, bestID = p, id
		}
	}
	if best == "" {
		return "", fmt.Errorf("no log segment in %s", dir)
	}
	return best, nil
}
