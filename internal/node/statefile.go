package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// stateFileName is the data directory's durable token floor and log
// watermark, kept outside the raft log so that damage to the log can be
// told apart from a log that is merely short.
const stateFileName = "fencelock.state"

// dirState is what the state file records.
type dirState struct {
	// Ceiling is at or above every fencing token this node ever applied.
	// Tokens are reserved ahead in blocks: the ceiling is raised (and
	// fsynced) before a token above it is applied, so before it can be
	// answered to anyone.
	Ceiling uint64
	// Durable is an index this node's log has held durably: a log (or
	// snapshot) that ends before it lost entries that had been written
	// and fsynced. Raised after each append, lowered (fsynced) before the
	// log's suffix is deleted.
	Durable uint64
	// CRCFrom: every entry at this index or above carries a checksum
	// (checkedLog). 0: none is required (a log from before checksums).
	CRCFrom uint64
	// PendingFloor, set by `fencelock recover`: before it serves a grant,
	// the leader commits a token floor of this value, so that no token at
	// or below it is issued again. 0: none.
	PendingFloor uint64
}

// The file holds two slots of stateSlotLen bytes written in turn, so a
// write torn by a power loss leaves the other intact. A slot:
//
//	"FLST" | version 1 | 3 zero bytes | u64 seq | u64 ceiling | u64 durable |
//	u64 crc-from | u64 pending floor | 12 zero bytes | u32 CRC-32C of all before
//
// integers little-endian. The valid slot with the highest seq wins.
const (
	stateMagic   = "FLST"
	stateVersion = 1
	stateSlotLen = 64
	stateFileLen = 2 * stateSlotLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeStateSlot(seq uint64, s dirState) []byte {
	b := make([]byte, stateSlotLen)
	copy(b, stateMagic)
	b[4] = stateVersion
	le := binary.LittleEndian
	le.PutUint64(b[8:], seq)
	le.PutUint64(b[16:], s.Ceiling)
	le.PutUint64(b[24:], s.Durable)
	le.PutUint64(b[32:], s.CRCFrom)
	le.PutUint64(b[40:], s.PendingFloor)
	le.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return b
}

func decodeStateSlot(b []byte) (seq uint64, s dirState, ok bool) {
	if len(b) != stateSlotLen || string(b[:4]) != stateMagic || b[4] != stateVersion {
		return 0, dirState{}, false
	}
	le := binary.LittleEndian
	if le.Uint32(b[60:]) != crc32.Checksum(b[:60], castagnoli) {
		return 0, dirState{}, false
	}
	s = dirState{Ceiling: le.Uint64(b[16:]), Durable: le.Uint64(b[24:]), CRCFrom: le.Uint64(b[32:]),
		PendingFloor: le.Uint64(b[40:])}
	return le.Uint64(b[8:]), s, true
}

// errStateCorrupt: neither slot of the state file is valid.
var errStateCorrupt = errors.New("no valid record (bad checksum, size or magic)")

// parseState decodes a state file's content. It returns the slot that
// holds the winning record.
func parseState(b []byte) (s dirState, seq uint64, slot int, err error) {
	if len(b) != stateFileLen {
		return dirState{}, 0, 0, fmt.Errorf("%w: %d bytes, want %d", errStateCorrupt, len(b), stateFileLen)
	}
	found := false
	for i := range 2 {
		q, st, ok := decodeStateSlot(b[i*stateSlotLen : (i+1)*stateSlotLen])
		if ok && (!found || q > seq) {
			s, seq, slot, found = st, q, i, true
		}
	}
	if !found {
		return dirState{}, 0, 0, errStateCorrupt
	}
	return s, seq, slot, nil
}

// stateFile is the open state file. Its methods are safe for concurrent
// use: the log, the state machine and a checkpoint timer all write it.
type stateFile struct {
	mu    sync.Mutex
	f     File
	path  string
	seq   uint64
	slot  int // the slot of the last record written
	cur   dirState
	dirty bool // written since the last fsync
	err   error
}

// readStateFile reads dir's state file. A missing file is reported with
// an error matching os.ErrNotExist.
func readStateFile(fsys FS, dir string) (dirState, error) {
	b, err := fsys.ReadFile(filepath.Join(dir, stateFileName))
	if err != nil {
		return dirState{}, err
	}
	s, _, _, err := parseState(b)
	return s, err
}

// openStateFile opens dir's state file, creating it with init if it does
// not exist.
func openStateFile(fsys FS, dir string, init dirState) (*stateFile, error) {
	path := filepath.Join(dir, stateFileName)
	b, err := fsys.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		sf := &stateFile{f: f, path: path, slot: 1}
		if _, err := f.WriteAt(make([]byte, stateFileLen), 0); err != nil {
			f.Close()
			fsys.Remove(path)
			return nil, err
		}
		if err := sf.update(func(s *dirState) { *s = init }, true); err != nil {
			f.Close()
			fsys.Remove(path)
			return nil, err
		}
		if err := fsys.SyncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
		return sf, nil
	case err != nil:
		return nil, err
	}
	s, seq, slot, err := parseState(b)
	if err != nil {
		return nil, err
	}
	f, err := fsys.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	return &stateFile{f: f, path: path, seq: seq, slot: slot, cur: s}, nil
}

// get returns the current record.
func (sf *stateFile) get() dirState {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return sf.cur
}

// update changes the record and writes it to the other slot; with sync it
// is on disk when update returns. A failed write leaves the record as it
// was; a failed fsync is sticky (after one, the kernel may have dropped
// the unwritten pages and a later fsync would succeed without them):
// later calls return it.
func (sf *stateFile) update(change func(*dirState), sync bool) error {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if sf.err != nil {
		return sf.err
	}
	next := sf.cur
	change(&next)
	if next != sf.cur || sf.seq == 0 {
		slot := 1 - sf.slot
		if _, err := sf.f.WriteAt(encodeStateSlot(sf.seq+1, next), int64(slot*stateSlotLen)); err != nil {
			// The other slot still holds the last record: a later
			// update may succeed (the file is overwritten in place, so
			// a full disk does not stop it).
			return fmt.Errorf("writing %s: %w", sf.path, err)
		}
		sf.seq++
		sf.slot, sf.cur, sf.dirty = slot, next, true
	}
	if sync && sf.dirty {
		if err := sf.f.Sync(); err != nil {
			sf.err = fmt.Errorf("syncing %s: %w", sf.path, err)
			return sf.err
		}
		sf.dirty = false
	}
	return nil
}

// sync makes every write so far durable.
func (sf *stateFile) sync() error { return sf.update(func(*dirState) {}, true) }

func (sf *stateFile) close() error {
	err := sf.sync()
	return errors.Join(err, sf.f.Close())
}

// syncDir makes a new directory entry in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// StateRecord is what a data directory's state file records, for tests
// and tools that mend a stopped node's directory by hand.
type StateRecord = dirState

// DurableIndex is the index the state file of the data directory dir
// on fsys records as durably written (the watermark a log must reach at
// start), for tools and the simulation's checks.
func DurableIndex(fsys FS, dir string) (uint64, error) {
	st, err := readStateFile(fsys, dir)
	return st.Durable, err
}

// EditStateFile changes the state file of the stopped node in dir,
// fsynced (tests that damage a directory on purpose).
func EditStateFile(dir string, change func(*StateRecord)) error {
	sf, err := openStateFile(OSFS{}, dir, dirState{})
	if err != nil {
		return err
	}
	defer sf.close()
	return sf.update(change, true)
}
