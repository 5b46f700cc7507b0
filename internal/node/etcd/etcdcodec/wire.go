package etcdcodec

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/fencelock/fencelock/internal/node/raftport"
)

// The etcd engine's raft port carries raftpb messages, each a frame:
// a u32 length (big-endian) and the message's protobuf encoding. The
// connection is the raft port (raftport.Port): mutual TLS whose peer
// holds the cluster's credential, or plain TCP with InsecureRaft.
// ReadMsg refuses a message whose sender is not the one the
// connection belongs to (its from).
//
// A frame holds etcdMaxFrame bytes at most, near the largest message
// raft sends but a snapshot: an append of MaxSizePerMsg (1 MiB) of
// entries, or one entry of raftport.MaxEntry when it is larger. A snapshot
// too large for a frame travels as its data first, in chunk frames of
// etcdSnapChunk bytes (the top bit of the length set), then its MsgSnap
// without data, which takes the data of the chunks before it; a smaller
// one travels whole, as it did before chunks, so that a node of an
// earlier version still takes it. A reader holds a frame's bytes as
// they arrive, never its declared length up front, and a snapshot's
// chunks up to raftport.MaxSnapshot.
//
// etcdParser follows the same frames for the raft port (raftport.Frames),
// from the preamble and the hello on: the port refuses a declared
// length above the bounds before the reader reads a byte of it, and
// holds each message to the port's deadline.

// etcdMaxFrame bounds a frame's length.
const etcdMaxFrame = 4 << 20

// etcdSnapChunk is the size of a snapshot's chunk frames.
const etcdSnapChunk = 1 << 20

// etcdChunkBit marks, in a frame's length, a chunk of a snapshot's data.
const etcdChunkBit = 1 << 31

// etcdReadStep bounds what a reader adds to a frame's buffer at once.
const etcdReadStep = 64 << 10

// WriteMsg writes m to w (buffered: the caller flushes): one frame,
// or a snapshot's chunks and then its MsgSnap.
func WriteMsg(w *bufio.Writer, m *raftpb.Message) error {
	data := m.GetSnapshot().GetData()
	if m.GetType() == raftpb.MsgSnap && proto.Size(m) > etcdMaxFrame {
		for off := 0; off < len(data); off += etcdSnapChunk {
			chunk := data[off:min(off+etcdSnapChunk, len(data))]
			if err := etcdWriteFrame(w, etcdChunkBit|uint32(len(chunk)), chunk); err != nil {
				return err
			}
		}
		m = etcdWithoutData(m)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding a raft message: %w", err)
	}
	if len(b) > etcdMaxFrame {
		return fmt.Errorf("a raft message of %d bytes is above the limit of %d", len(b), etcdMaxFrame)
	}
	return etcdWriteFrame(w, uint32(len(b)), b)
}

func etcdWriteFrame(w *bufio.Writer, head uint32, b []byte) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], head)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// etcdWithoutData is m, a MsgSnap, without its snapshot's data: a copy
// of its fields (the ones raft shares with m are only read).
func etcdWithoutData(m *raftpb.Message) *raftpb.Message {
	out := new(raftpb.Message)
	src, dst := m.ProtoReflect(), out.ProtoReflect()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Name() != "snapshot" {
			dst.Set(fd, v)
		}
		return true
	})
	out.Snapshot = &raftpb.Snapshot{Metadata: m.GetSnapshot().GetMetadata()}
	return out
}

// ReadMsg reads one message from r: a frame, or a snapshot's chunks
// and its MsgSnap. from, when not 0, is the only sender the connection
// may carry.
func ReadMsg(r *bufio.Reader, from uint64) (*raftpb.Message, error) {
	var data []byte
	chunks := false
	for {
		var h [4]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if chunks && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		head := binary.BigEndian.Uint32(h[:])
		n := int(head &^ etcdChunkBit)
		if n > etcdMaxFrame {
			return nil, fmt.Errorf("a raft frame of %d bytes is above the limit of %d", n, etcdMaxFrame)
		}
		if head&etcdChunkBit != 0 {
			if len(data)+n > raftport.MaxSnapshot {
				return nil, fmt.Errorf("a snapshot of more than %d bytes", raftport.MaxSnapshot)
			}
			var err error
			if data, err = etcdReadFull(r, data, n); err != nil {
				return nil, err
			}
			chunks = true
			continue
		}
		b, err := etcdReadFull(r, nil, n)
		if err != nil {
			return nil, err
		}
		m := new(raftpb.Message)
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, fmt.Errorf("decoding a raft message: %w", err)
		}
		if from != 0 && m.GetFrom() != from {
			return nil, fmt.Errorf("a raft message from %x on the connection of %x", m.GetFrom(), from)
		}
		if chunks {
			if m.GetType() != raftpb.MsgSnap || m.GetSnapshot() == nil || len(m.GetSnapshot().GetData()) > 0 {
				return nil, fmt.Errorf("a %v after a snapshot's chunks", m.GetType())
			}
			m.Snapshot.Data = data
		}
		return m, nil
	}
}

// etcdReadFull appends n bytes of r to b, growing it as they arrive.
func etcdReadFull(r io.Reader, b []byte, n int) ([]byte, error) {
	for n > 0 {
		k := min(n, etcdReadStep)
		start := len(b)
		b = slices.Grow(b, k)[:start+k]
		if _, err := io.ReadFull(r, b[start:]); err != nil {
			return nil, fmt.Errorf("reading a raft frame: %w", io.ErrUnexpectedEOF)
		}
		n -= k
	}
	return b, nil
}

// Frames are the etcd engine's frames for the raft port: those of
// the connections it accepts (it reads nothing from those it dials).
var Frames = raftport.Frames{
	Accepted: func() raftport.FrameParser { return &etcdParser{} },
	MaxHeld:  etcdMaxFrame + 4,
	// A snapshot's chunks are streamed past the port's budget, but the
	// reader holds them until the MsgSnap (raft takes a snapshot whole):
	// they must come at 4 MiB/s, a gigabyte in four minutes. The writer
	// gives a snapshot a minute (etcdSnapTimeout).
	MinRate: 4 << 20,
}

// etcdParser follows an accepted connection: the preamble and the hello
// (one message), then frames, a snapshot's chunks and its MsgSnap being
// one message whose chunks are streamed.
type etcdParser struct {
	stage int     // 0: preamble; 1, 2: the hello's fields; 3: frames; 4: not this protocol
	pre   int     // bytes of the preamble read
	hdr   [4]byte // a length being read
	have  int     // its bytes read
	left  int     // bytes still to come of what the length said
	chunk bool    // they are a chunk's
	snap  int     // chunk bytes of the snapshot in progress
}

func (p *etcdParser) Parse(b []byte) (took, streamed int, end bool, err error) {
	for took < len(b) {
		switch p.stage {
		case 4:
			// Bytes of another protocol (a node of the other engine?):
			// the transport refuses them at the preamble, and says so.
			return len(b), 0, false, nil
		case 0:
			k := min(len(Preamble)-p.pre, len(b)-took)
			if !bytes.Equal(b[took:took+k], Preamble[p.pre:p.pre+k]) {
				p.stage = 4
				continue
			}
			p.pre += k
			took += k
			if p.pre == len(Preamble) {
				p.stage = 1
			}
			continue
		}
		if p.left > 0 {
			k := min(p.left, len(b)-took)
			p.left -= k
			took += k
			if p.chunk {
				streamed += k
			}
			if p.left > 0 {
				continue
			}
			if p.stage < 3 {
				if p.stage++; p.stage == 3 {
					return took, streamed, true, nil // the hello ended
				}
				continue
			}
			if !p.chunk {
				p.snap = 0
				return took, streamed, true, nil
			}
			continue
		}
		// A length: the hello's u16, or a frame's u32.
		want := 4
		if p.stage < 3 {
			want = 2
		}
		k := copy(p.hdr[p.have:want], b[took:])
		p.have += k
		took += k
		if p.have < want {
			continue
		}
		p.have = 0
		if p.stage < 3 {
			n := int(binary.BigEndian.Uint16(p.hdr[:2]))
			if n > etcdMaxHelloField {
				return 0, 0, false, fmt.Errorf("a hello field of %d bytes is above the limit of %d", n, etcdMaxHelloField)
			}
			if p.left = n; n == 0 {
				if p.stage++; p.stage == 3 {
					return took, streamed, true, nil
				}
			}
			continue
		}
		head := binary.BigEndian.Uint32(p.hdr[:])
		n := int(head &^ etcdChunkBit)
		p.chunk = head&etcdChunkBit != 0
		if n > etcdMaxFrame {
			return 0, 0, false, fmt.Errorf("a raft frame of %d bytes is above the limit of %d", n, etcdMaxFrame)
		}
		if p.chunk {
			if p.snap += n; p.snap > raftport.MaxSnapshot {
				return 0, 0, false, fmt.Errorf("a snapshot of more than %d bytes", raftport.MaxSnapshot)
			}
		}
		if p.left = n; n == 0 && !p.chunk {
			p.snap = 0
			return took, streamed, true, nil
		}
	}
	return took, streamed, false, nil
}
