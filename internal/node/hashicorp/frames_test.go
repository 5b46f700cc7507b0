package hashicorp

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/node/raftport"
)

// hcEncode is what hashicorp/raft's network transport writes for a
// request: the RPC's type byte, then the request in msgpack, as
// sendRPC encodes it.
func hcEncode(t testing.TB, typ byte, req any) []byte {
	t.Helper()
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	w.WriteByte(typ)
	if err := codec.NewEncoder(w, hcHandle()).Encode(req); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	return b.Bytes()
}

// hcHandle is the msgpack handle hashicorp/raft's transport encodes
// with (times as their binary encoding).
func hcHandle() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	return h
}

// hcEncodeAnswer is an answer as the transport writes it: the error
// string, then the response.
func hcEncodeAnswer(t testing.TB, errStr string, resp any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := codec.NewEncoder(&b, hcHandle())
	if err := enc.Encode(errStr); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(resp); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// parseAll feeds b to p in pieces of random sizes and answers where
// each message ended and the bytes streamed.
func parseAll(t *testing.T, p raftport.FrameParser, b []byte, rnd *rand.Rand) (ends []int, streamed int, err error) {
	t.Helper()
	off := 0
	for off < len(b) {
		n := min(1+rnd.IntN(700), len(b)-off)
		piece := b[off : off+n]
		for len(piece) > 0 {
			took, s, end, err := p.Parse(piece)
			if err != nil {
				return ends, streamed, err
			}
			if took <= 0 || took > len(piece) {
				t.Fatalf("the parser took %d of %d bytes", took, len(piece))
			}
			streamed += s
			off += took
			piece = piece[took:]
			if end {
				ends = append(ends, off)
			}
		}
	}
	return ends, streamed, nil
}

// Every RPC hashicorp/raft's transport sends, as it encodes them, is
// followed to its exact end, whatever the pieces its bytes arrive in:
// an append with entries of the largest command and a timestamp, a
// heartbeat, votes, and an InstallSnapshot whose data is streamed, not
// held; and answers, two values each.
func TestHashicorpFramesFollowRaftsRPCs(t *testing.T) {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")}
	big := bytes.Repeat([]byte("x"), 1_300_000)
	var ents []*raft.Log
	for i := range 3 {
		ents = append(ents, &raft.Log{Index: uint64(10 + i), Term: 3, Type: raft.LogCommand, Data: big, AppendedAt: time.Now()})
	}
	snapData := bytes.Repeat([]byte("s"), 70_000)
	var stream []byte
	var wantEnds []int
	add := func(b []byte) {
		stream = append(stream, b...)
		wantEnds = append(wantEnds, len(stream))
	}
	add(hcEncode(t, hcRPCAppendEntries, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, Entries: ents, LeaderCommitIndex: 9}))
	add(hcEncode(t, hcRPCAppendEntries, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 3}))
	add(hcEncode(t, 1, &raft.RequestVoteRequest{RPCHeader: hdr, Term: 4, LastLogIndex: 12, LastLogTerm: 3}))
	add(hcEncode(t, hcRPCMax, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 5, LastLogIndex: 12, LastLogTerm: 3}))
	add(hcEncode(t, 3, &raft.TimeoutNowRequest{RPCHeader: hdr}))
	add(append(hcEncode(t, hcRPCInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: 1, Term: 5,
		LastLogIndex: 12, LastLogTerm: 3, Configuration: []byte("conf"), ConfigurationIndex: 1, Size: int64(len(snapData))}), snapData...))
	add(hcEncode(t, hcRPCInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: hdr, Term: 5, Size: 0}))
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		ends, streamed, err := parseAll(t, hcFrames.Accepted(), stream, rnd)
		if err != nil {
			t.Fatal(err)
		}
		if !equalInts(ends, wantEnds) || streamed != len(snapData) {
			t.Fatalf("messages ended at %v, streamed %d; want %v and %d", ends, streamed, wantEnds, len(snapData))
		}
	}

	var answers []byte
	wantEnds = nil
	for _, a := range [][]byte{
		hcEncodeAnswer(t, "", &raft.AppendEntriesResponse{RPCHeader: hdr, Term: 3, LastLog: 12, Success: true}),
		hcEncodeAnswer(t, "a term raft must not take", nil),
		hcEncodeAnswer(t, "", &raft.RequestVoteResponse{RPCHeader: hdr, Term: 4, Granted: true}),
	} {
		answers = append(answers, a...)
		wantEnds = append(wantEnds, len(answers))
	}
	ends, _, err := parseAll(t, hcFrames.Dialed(), answers, rnd)
	if err != nil || !equalInts(ends, wantEnds) {
		t.Fatalf("answers ended at %v (%v), want %v", ends, err, wantEnds)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// What no member sends is refused when it is declared, before its
// bytes: a string of 1 GiB (the finding's half-sent append), an array
// of 2^32 items, nesting deeper than any RPC, an RPC type raft does not
// have, a snapshot above the state machine's largest.
func TestHashicorpFramesRefuseWhatNoMemberSends(t *testing.T) {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1")}
	ae := hcEncode(t, hcRPCAppendEntries, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 3})
	// A 1 GiB string as the value of the first key: the map's header,
	// the first key, then str32 with its length.
	gib := append([]byte{hcRPCAppendEntries, 0x81, 0xa4, 'D', 'a', 't', 'a', 0xdb, 0x40, 0, 0, 0}, "only these"...)
	for name, b := range map[string][]byte{
		"a string of 1 GiB":                   gib,
		"a byte array of 16 MiB":              {hcRPCAppendEntries, 0x81, 0xa1, 'E', 0xc6, 0x01, 0, 0, 0},
		"an array of 2^32-1 items":            {hcRPCAppendEntries, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"a map of 65535 entries":              {hcRPCAppendEntries, 0xde, 0xff, 0xff},
		"nesting 17 deep":                     append([]byte{hcRPCAppendEntries}, bytes.Repeat([]byte{0x91}, 17)...),
		"an RPC type raft does not have":      {102},
		"a byte msgpack does not use":         {hcRPCAppendEntries, 0xc1},
		"an extension of 4 GiB":               {hcRPCAppendEntries, 0xc9, 0xff, 0xff, 0xff, 0xff, 1},
		"an InstallSnapshot of 2 GiB":         hcEncode(t, hcRPCInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: hdr, Term: 3, Size: 2 << 30}),
		"an InstallSnapshot of negative size": hcEncode(t, hcRPCInstallSnapshot, &raft.InstallSnapshotRequest{RPCHeader: hdr, Term: 3, Size: -1}),
	} {
		p := hcFrames.Accepted()
		// An append that ends first: the connection was a member's
		// until then.
		if _, _, end, err := p.Parse(ae); err != nil || !end {
			t.Fatalf("%s: the append before it: end %v, %v", name, end, err)
		}
		_, _, err := parseAll(t, p, b, rand.New(rand.NewPCG(3, 4)))
		if err == nil {
			t.Errorf("%s: taken", name)
		}
	}
	if _, _, err := parseAll(t, hcFrames.Dialed(), []byte{0xdb, 0x40, 0, 0, 0}, rand.New(rand.NewPCG(5, 6))); err == nil {
		t.Error("an answer of 1 GiB: taken")
	}
}

// The parser agrees with msgpack's own decoder on where a value ends:
// a value it takes ends where msgpack's does, and one it waits for the
// end of is one msgpack cannot decode yet.
func FuzzHashicorpFramesAgreeWithMsgpack(f *testing.F) {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("a")}
	f.Add(hcEncode(f, 0, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 3, Entries: []*raft.Log{{Index: 1, Term: 1, Data: []byte("d"), AppendedAt: time.Unix(1, 2)}}})[1:])
	f.Add(hcEncode(f, 0, &raft.RequestVoteRequest{RPCHeader: hdr, Term: 3})[1:])
	f.Add([]byte{0xc7, 2, 5, 1, 2, 0xd8, 1})
	f.Add([]byte{0x92, 0xcb, 1, 2, 3, 4, 5, 6, 7, 8, 0xd3, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s mpScanner
		k, done, err := s.feed(b)
		if err != nil {
			return // refused, and the connection cut: msgpack reads no more of it
		}
		dec := codec.NewDecoderBytes(b, &codec.MsgpackHandle{})
		var v any
		derr := dec.Decode(&v)
		switch {
		case done && derr == nil:
			if got := dec.NumBytesRead(); got != k {
				t.Fatalf("the value ends after %d bytes; msgpack read %d", k, got)
			}
		case !done:
			if k != len(b) {
				t.Fatalf("not done, but took %d of %d bytes", k, len(b))
			}
			if derr == nil {
				t.Fatalf("msgpack decoded a value whose end the parser still waits for (%d bytes)", len(b))
			}
		}
		// done with derr set: msgpack refuses some well-framed values
		// (a map key it cannot hash, a string that is not UTF-8 into
		// an interface): framing is all the parser follows.
	})
}
