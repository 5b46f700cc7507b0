package hashicorp

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"math"
	"testing"
	"testing/iotest"

	"github.com/hashicorp/raft"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/node/raftport"
)

// An InstallSnapshot's data reaches raft's store only if it restores:
// a good snapshot passes byte for byte, however it is read; a damaged
// one, or one longer than it declared, ends the copy with errBadSnap
// where raft would see its end (raft then cancels the snapshot), and is
// counted once.
func TestCheckedSnapshot(t *testing.T) {
	good, err := fsm.New(nil).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, good...)
	bad[len(bad)/2] ^= 0xff
	for _, c := range []struct {
		name string
		data []byte
		size int64
		ok   bool
	}{
		{"a good snapshot", good, int64(len(good)), true},
		{"a damaged one", bad, int64(len(bad)), false},
		{"one longer than declared", good, int64(len(good)) - 1, false},
		{"nothing", nil, 0, false},
	} {
		refused := 0
		cs := &checkedSnapshot{r: iotest.OneByteReader(bytes.NewReader(c.data)), size: c.size, refused: func(error) { refused++ }}
		var got bytes.Buffer
		_, err := io.Copy(&got, cs)
		if c.ok {
			if err != nil || !bytes.Equal(got.Bytes(), c.data) || refused != 0 {
				t.Errorf("%s: copied %d of %d bytes, %v, %d refusals", c.name, got.Len(), len(c.data), err, refused)
			}
			continue
		}
		if !errors.Is(err, errBadSnap) || refused != 1 {
			t.Errorf("%s: copied %d of %d bytes, %v, %d refusals; want errBadSnap, one refusal", c.name, got.Len(), len(c.data), err, refused)
		}
	}
}

// A refused AppendEntries sent down hashicorp/raft's in-memory pipeline
// (the tests' clusters) is answered with an error and an empty answer:
// the pipeline copies the answer before it looks at the error, and a
// nil one crashed the process.
func TestGuardAnswersAPipelinedRefusal(t *testing.T) {
	_, a := raft.NewInmemTransport("a")
	_, b := raft.NewInmemTransport("b")
	a.Connect("b", b)
	b.Connect("a", a)
	g := raftport.NewTermGuard(slog.New(slog.DiscardHandler), nil)
	gb := guardTransport(b, g, func() uint64 { return 1 })
	defer gb.(io.Closer).Close()
	p, err := a.AppendEntriesPipeline("b", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: math.MaxUint64}, &raft.AppendEntriesResponse{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Error(); !errors.Is(err, raftport.ErrTerm) {
		t.Fatalf("a pipelined append of term 2^64-1: %v, want ErrTerm", err)
	}
	if g.Count() != 1 {
		t.Fatalf("refused %d, want 1", g.Count())
	}
}
