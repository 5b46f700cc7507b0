package hashicorp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/internal/node/raftport"
)

// How hashicorp/raft's network transport frames its RPCs, for the raft
// port to follow them as they are read (raftport.Frames). A request is a
// byte naming the RPC, then the request as a msgpack value; an
// InstallSnapshot's is followed by the snapshot's bytes, as many as its
// Size field says. An answer is two msgpack values: an error string and
// the response. Nothing gives a length up front, and msgpack's decoder
// grows its buffer as a declared string's bytes arrive, so the parser
// follows msgpack itself (mpScanner): a string, byte array or extension
// longer than any log entry, an array or map with more items than any
// RPC has, nesting deeper than any RPC's, is refused when it is
// declared, before a byte of it is read.

// The RPC types of hashicorp/raft's network transport (net_transport.go).
const (
	hcRPCAppendEntries   = 0
	hcRPCInstallSnapshot = 2
	hcRPCMax             = 4 // rpcRequestPreVote
)

// Bounds of what a hashicorp RPC holds.
const (
	hcMaxField = raftport.MaxEntry // a string, byte array or extension: an entry's data at most
	hcMaxItems = 1024              // an array's or map's: raft sends 64 entries at most (MaxAppendEntries)
	hcMaxDepth = 16                // an entry in an append is at depth 3
	// hcMaxHeld: the largest append, MaxAppendEntries entries of
	// MaxEntry, with room.
	hcMaxHeld = 64*raftport.MaxEntry + 1<<20
)

// hcFrames are the hashicorp engine's frames: requests on the
// connections the port accepts, answers on those it dials.
var hcFrames = raftport.Frames{
	Accepted: func() raftport.FrameParser { return &hcRequests{} },
	Dialed:   func() raftport.FrameParser { return &hcAnswers{} },
	MaxHeld:  hcMaxHeld,
}

// hcRequests follows the requests on an accepted connection.
type hcRequests struct {
	typ     int  // the RPC in progress
	started bool // its type byte was read
	scan    mpScanner
	stream  int64 // snapshot bytes still to come
}

func (r *hcRequests) Parse(p []byte) (took, streamed int, end bool, err error) {
	for took < len(p) {
		switch {
		case !r.started:
			if p[took] > hcRPCMax {
				return 0, 0, false, fmt.Errorf("an RPC of unknown type %d", p[took])
			}
			r.typ, r.started = int(p[took]), true
			r.scan = mpScanner{wantSize: p[took] == hcRPCInstallSnapshot}
			took++
		case r.stream > 0:
			k := int(min(r.stream, int64(len(p)-took)))
			r.stream -= int64(k)
			took += k
			streamed += k
			if r.stream == 0 {
				r.started = false
				return took, streamed, true, nil
			}
		default:
			k, done, err := r.scan.feed(p[took:])
			if err != nil {
				return 0, 0, false, err
			}
			took += k
			if !done {
				continue
			}
			if r.typ == hcRPCInstallSnapshot {
				size := r.scan.size
				if !r.scan.sized || size < 0 || size > raftport.MaxSnapshot {
					return 0, 0, false, fmt.Errorf("an InstallSnapshot of size %d (sized %v), above %d", size, r.scan.sized, raftport.MaxSnapshot)
				}
				if size > 0 {
					r.stream = size
					continue
				}
			}
			r.started = false
			return took, streamed, true, nil
		}
	}
	return took, streamed, false, nil
}

// hcAnswers follows the answers on a dialed connection: two values each.
type hcAnswers struct {
	scan mpScanner
	n    int // values of the answer in progress already read
}

func (a *hcAnswers) Parse(p []byte) (took, streamed int, end bool, err error) {
	for took < len(p) {
		k, done, err := a.scan.feed(p[took:])
		if err != nil {
			return 0, 0, false, err
		}
		took += k
		if done {
			a.scan = mpScanner{}
			if a.n++; a.n == 2 {
				a.n = 0
				return took, 0, true, nil
			}
		}
	}
	return took, 0, false, nil
}

// mpScanner follows one msgpack value as its bytes arrive, holding
// nothing of it but a header's few bytes: where it ends, and, with
// wantSize, the integer under the key "Size" of the map it is (an
// InstallSnapshotRequest's).
type mpScanner struct {
	open []uint64 // items still to come in each open array or map (a map's: keys and values)
	hdr  [9]byte  // a header being read: its format byte, then its length or value
	have int      // bytes of hdr read
	need int      // bytes of hdr it takes; 0: between items
	skip uint64   // payload bytes still to come of a string, byte array or extension

	wantSize bool
	topIdx   uint64 // items of the top map done: even ones are keys
	key      []byte // the top map's key in progress, while it may be "Size"
	keyIsStr bool
	atSize   bool // the next top-map item is the value under "Size"
	sized    bool
	size     int64
}

var errMsgpack = errors.New("msgpack")

// feed takes bytes of the value; done says the value ended after the
// first k of them.
func (s *mpScanner) feed(p []byte) (k int, done bool, err error) {
	for k < len(p) {
		if s.skip > 0 {
			n := int(min(s.skip, uint64(len(p)-k)))
			if s.keyIsStr {
				s.key = append(s.key, p[k:k+n]...)
			}
			s.skip -= uint64(n)
			k += n
			if s.skip == 0 {
				if s.item() {
					return k, true, nil
				}
			}
			continue
		}
		if s.need == 0 {
			s.hdr[0], s.have = p[k], 1
			k++
			s.need = mpHeaderLen(s.hdr[0])
			if s.need == 0 {
				return 0, false, fmt.Errorf("%w: the format byte 0x%02x", errMsgpack, s.hdr[0])
			}
		}
		n := copy(s.hdr[s.have:s.need], p[k:])
		s.have += n
		k += n
		if s.have < s.need {
			continue
		}
		s.need = 0
		end, err := s.header()
		if err != nil {
			return 0, false, err
		}
		if end {
			return k, true, nil
		}
	}
	return k, false, nil
}

// mpHeaderLen is how many bytes a header takes with its format byte b:
// the byte, and a length or a value that follows it; 0 for a byte
// msgpack does not use.
func mpHeaderLen(b byte) int {
	switch {
	case b <= 0x7f, b >= 0xe0, b >= 0x80 && b <= 0xbf: // fixint, fixmap, fixarray, fixstr
		return 1
	}
	switch b {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return 1
	case 0xc4, 0xd9, 0xcc, 0xd0: // bin8, str8, uint8, int8
		return 2
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext1..16: the type
		return 2
	case 0xc5, 0xda, 0xcd, 0xd1, 0xdc, 0xde: // 16-bit lengths and values
		return 3
	case 0xc7: // ext8: length, type
		return 3
	case 0xc8: // ext16: length, type
		return 4
	case 0xc6, 0xdb, 0xce, 0xd2, 0xca, 0xdd, 0xdf: // 32-bit lengths and values
		return 5
	case 0xc9: // ext32: length, type
		return 6
	case 0xcf, 0xd3, 0xcb: // 64-bit values
		return 9
	}
	return 0
}

// header acts on the header just read: a scalar ends an item, a string
// or extension starts its payload, an array or map opens. end says the
// whole value ended.
func (s *mpScanner) header() (end bool, err error) {
	b, h := s.hdr[0], s.hdr[1:s.have]
	var payload, count uint64
	container, isMap := false, false
	switch {
	case b >= 0xa0 && b <= 0xbf:
		payload = uint64(b & 0x1f)
	case b >= 0x90 && b <= 0x9f:
		count, container = uint64(b&0x0f), true
	case b >= 0x80 && b <= 0x8f:
		count, container, isMap = uint64(b&0x0f), true, true
	case b == 0xc4 || b == 0xd9:
		payload = uint64(h[0])
	case b == 0xc5 || b == 0xda:
		payload = uint64(binary.BigEndian.Uint16(h))
	case b == 0xc6 || b == 0xdb:
		payload = uint64(binary.BigEndian.Uint32(h))
	case b == 0xc7:
		payload = uint64(h[0])
	case b == 0xc8:
		payload = uint64(binary.BigEndian.Uint16(h))
	case b == 0xc9:
		payload = uint64(binary.BigEndian.Uint32(h))
	case b >= 0xd4 && b <= 0xd8:
		payload = 1 << (b - 0xd4)
	case b == 0xdc:
		count, container = uint64(binary.BigEndian.Uint16(h)), true
	case b == 0xdd:
		count, container = uint64(binary.BigEndian.Uint32(h)), true
	case b == 0xde:
		count, container, isMap = uint64(binary.BigEndian.Uint16(h)), true, true
	case b == 0xdf:
		count, container, isMap = uint64(binary.BigEndian.Uint32(h)), true, true
	}
	if container {
		if count > hcMaxItems {
			return false, fmt.Errorf("%w: an array or map of %d items, above %d", errMsgpack, count, hcMaxItems)
		}
		if len(s.open) >= hcMaxDepth {
			return false, fmt.Errorf("%w: nested deeper than %d", errMsgpack, hcMaxDepth)
		}
		if count == 0 {
			return s.item(), nil
		}
		if isMap {
			count *= 2
		}
		s.open = append(s.open, count)
		return false, nil
	}
	if payload == 0 && b >= 0xc7 && b <= 0xc9 {
		// msgpack's decoder reads a value more after an empty
		// extension: no member sends one.
		return false, fmt.Errorf("%w: an empty extension", errMsgpack)
	}
	if payload > hcMaxField {
		return false, fmt.Errorf("%w: a string, byte array or extension of %d bytes, above %d", errMsgpack, payload, hcMaxField)
	}
	isStr := b >= 0xa0 && b <= 0xbf || b >= 0xd9 && b <= 0xdb
	s.keyIsStr = s.wantSize && len(s.open) == 1 && s.topIdx%2 == 0 && isStr && payload <= 8
	s.key = s.key[:0]
	if payload > 0 {
		s.skip = payload
		return false, nil
	}
	if s.atSize {
		s.size, s.sized = mpInt(b, h)
	}
	return s.item(), nil
}

// mpInt is the integer of a header, if it is one.
func mpInt(b byte, h []byte) (int64, bool) {
	switch {
	case b <= 0x7f:
		return int64(b), true
	case b >= 0xe0:
		return int64(int8(b)), true
	case b == 0xcc:
		return int64(h[0]), true
	case b == 0xcd:
		return int64(binary.BigEndian.Uint16(h)), true
	case b == 0xce:
		return int64(binary.BigEndian.Uint32(h)), true
	case b == 0xcf:
		v := binary.BigEndian.Uint64(h)
		return int64(v), v <= 1<<62
	case b == 0xd0:
		return int64(int8(h[0])), true
	case b == 0xd1:
		return int64(int16(binary.BigEndian.Uint16(h))), true
	case b == 0xd2:
		return int64(int32(binary.BigEndian.Uint32(h))), true
	case b == 0xd3:
		return int64(binary.BigEndian.Uint64(h)), true
	}
	return 0, false
}

// item ends an item: the innermost open array or map has one fewer to
// come, and closes when it has none, which ends an item of the one
// around it. It says whether the whole value ended.
func (s *mpScanner) item() bool {
	defer func() { s.keyIsStr = false }()
	for len(s.open) > 0 {
		top := len(s.open) - 1
		if top == 0 && s.wantSize {
			// An item of the top map: a key "Size" makes the next
			// its value.
			s.atSize = s.topIdx%2 == 0 && s.keyIsStr && string(s.key) == "Size"
			s.topIdx++
		}
		s.open[top]--
		if s.open[top] > 0 {
			return false
		}
		s.open = s.open[:top]
	}
	return true
}
