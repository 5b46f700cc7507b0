package etcdcodec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fencelock/fencelock/internal/node"
	"github.com/hashicorp/raft"
)

// etcdSnapMagic starts the data of a snapshot as raft carries it.
const etcdSnapMagic = "FLE1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapHeader is the start of a snapshot's data as raft carries it:
// the magic, the number of members, for each its node ID and raft
// address (uvarint-length-prefixed), and a CRC-32C of all before. The
// state machine's snapshot follows, with its own checksum.
func SnapHeader(cs *raftpb.ConfState, names map[uint64]node.Peer) ([]byte, error) {
	conf, err := Configuration(cs, names)
	if err != nil {
		return nil, err
	}
	b := []byte(etcdSnapMagic)
	b = binary.AppendUvarint(b, uint64(len(conf.Servers)))
	for _, s := range conf.Servers {
		b = binary.AppendUvarint(b, uint64(len(s.ID)))
		b = append(b, s.ID...)
		b = binary.AppendUvarint(b, uint64(len(s.Address)))
		b = append(b, s.Address...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// DecodeSnap splits a snapshot's data into the members' names and
// the state machine's snapshot (a part of data, not a copy).
func DecodeSnap(data []byte) (map[uint64]node.Peer, []byte, error) {
	bad := func(why string) (map[uint64]node.Peer, []byte, error) {
		return nil, nil, fmt.Errorf("the snapshot's data is damaged: %s", why)
	}
	if !bytes.HasPrefix(data, []byte(etcdSnapMagic)) {
		return bad("no magic")
	}
	rest := data[len(etcdSnapMagic):]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, false
		}
		rest = rest[n:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := next()
		if !ok || n > uint64(len(rest)) {
			return "", false
		}
		s := string(rest[:n])
		rest = rest[n:]
		return s, true
	}
	count, ok := next()
	if !ok || count > uint64(len(rest)) {
		return bad("the member count")
	}
	names := make(map[uint64]node.Peer, count)
	for range count {
		id, ok1 := str()
		addr, ok2 := str()
		if !ok1 || !ok2 || id == "" {
			return bad("a member's name")
		}
		names[ID(id)] = node.Peer{ID: id, RaftAddr: addr}
	}
	head := len(data) - len(rest)
	if len(rest) < 4 || binary.LittleEndian.Uint32(rest) != crc32.Checksum(data[:head], castagnoli) {
		return bad("the names' checksum")
	}
	return names, rest[4:], nil
}

// SnapReadError is a snapshot the store could not give back.
type SnapReadError struct {
	ID  string
	Err error
}

func (e *SnapReadError) Error() string {
	return fmt.Sprintf("opening the snapshot %s: %v", e.ID, e.Err)
}
func (e *SnapReadError) Unwrap() error { return e.Err }

// LoadSnap reads the newest snapshot of store, through its checksum
// (openStores has already refused a data dir whose newest one is
// damaged): nil when there is none. names are the members' names, and
// fsmData the state machine's snapshot, a part of the snapshot's data.
func LoadSnap(store raft.SnapshotStore) (snap *raftpb.Snapshot, names map[uint64]node.Peer, fsmData []byte, err error) {
	list, err := store.List()
	if err != nil || len(list) == 0 {
		return nil, nil, nil, err
	}
	meta, rc, err := store.Open(list[0].ID)
	if err != nil {
		return nil, nil, nil, &SnapReadError{ID: list[0].ID, Err: err}
	}
	defer rc.Close()
	cs, names := ConfState(meta.Configuration)
	head, err := SnapHeader(cs, names)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the snapshot %s: %w", meta.ID, err)
	}
	buf := bytes.NewBuffer(make([]byte, 0, len(head)+int(max(meta.Size, 0))))
	buf.Write(head)
	if _, err := io.Copy(buf, rc); err != nil {
		return nil, nil, nil, fmt.Errorf("reading the snapshot %s: %w", meta.ID, err)
	}
	snap = &raftpb.Snapshot{Data: buf.Bytes(), Metadata: &raftpb.SnapshotMetadata{
		ConfState: cs, Index: proto.Uint64(meta.Index), Term: proto.Uint64(meta.Term)}}
	return snap, names, buf.Bytes()[len(head):], nil
}
