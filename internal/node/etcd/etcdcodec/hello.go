package etcdcodec

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/fencelock/fencelock/internal/node"
)

// Preamble opens every connection of the etcd engine's raft port.
var Preamble = []byte("fencelock-etcd-raft/1\n")

// Hello is what a dialer says after the preamble: its node ID and
// raft address, each a u16 length (big-endian) and its bytes.
func Hello(p node.Peer) []byte {
	b := make([]byte, 0, 4+len(p.ID)+len(p.RaftAddr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.ID)))
	b = append(b, p.ID...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.RaftAddr)))
	return append(b, p.RaftAddr...)
}

// etcdMaxHelloField bounds a hello's node ID and address.
const etcdMaxHelloField = 1024

func ReadHello(r *bufio.Reader) (node.Peer, error) {
	var f [2]string
	for i := range f {
		var h [2]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return node.Peer{}, err
		}
		n := binary.BigEndian.Uint16(h[:])
		if n > etcdMaxHelloField {
			return node.Peer{}, fmt.Errorf("a hello field of %d bytes is above the limit of %d", n, etcdMaxHelloField)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return node.Peer{}, err
		}
		f[i] = string(b)
	}
	if f[0] == "" {
		return node.Peer{}, errors.New("a hello without a node ID")
	}
	return node.Peer{ID: f[0], RaftAddr: f[1]}, nil
}
