package hashicorp

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/fencelock/fencelock/internal/fsm"
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
