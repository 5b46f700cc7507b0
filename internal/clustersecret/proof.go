package clustersecret

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"sync"
)

// The proof: the first bytes a dialer sends on a raft connection, before
// its TLS handshake, show that it holds the secret, so that the raft
// port tells a member's connection from anybody else's at once, without
// a round trip, and spends its handshake budget only on members (the
// TLS handshake then proves the secret again, and names the node). It is
// a magic, a random nonce and, for each secret the dialer holds (the
// current one twice when it holds no previous one), a tag: HMAC-SHA256
// of the magic and the nonce under a key derived from that secret. A
// port takes it when either tag is one of its secrets' and the nonce is
// not one it has seen lately. Someone who reads the raft traffic can
// replay one: it gets as far as the TLS handshake, which it cannot
// complete.

const (
	proofMagic = "FLR1"
	proofNonce = 16
	proofTag   = 16
	// ProofLen is the proof's length in bytes.
	ProofLen = len(proofMagic) + proofNonce + 2*proofTag
	// proofInfo is the HKDF info of the proof's key.
	proofInfo = "fencelock raft proof v1"
	// seenNonces is how many of the latest nonces a port remembers.
	seenNonces = 4096
)

func proofKey(s Secret) ([]byte, error) {
	k, err := hkdf.Key(sha256.New, s.b[:], nil, proofInfo, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("clustersecret: deriving the proof key: %w", err)
	}
	return k, nil
}

func proofTagOf(key, magicNonce []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(magicNonce)
	return m.Sum(nil)[:proofTag]
}

// nonceMemory is the nonces a port took lately, oldest first.
type nonceMemory struct {
	mu   sync.Mutex
	set  map[[proofNonce]byte]struct{}
	ring [][proofNonce]byte
	next int
}

// fresh records n and says whether it was not already remembered.
func (m *nonceMemory) fresh(n [proofNonce]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.set[n]; seen {
		return false
	}
	if m.set == nil {
		m.set = make(map[[proofNonce]byte]struct{}, seenNonces)
	}
	if len(m.ring) < seenNonces {
		m.ring = append(m.ring, n)
	} else {
		delete(m.set, m.ring[m.next])
		m.ring[m.next] = n
		m.next = (m.next + 1) % seenNonces
	}
	m.set[n] = struct{}{}
	return true
}

// Proof is a fresh proof to send before the TLS handshake.
func (c *Credential) Proof() ([]byte, error) {
	b := make([]byte, 0, ProofLen)
	b = append(b, proofMagic...)
	var nonce [proofNonce]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("clustersecret: a proof's nonce: %w", err)
	}
	b = append(b, nonce[:]...)
	head := b[:len(proofMagic)+proofNonce]
	b = append(b, proofTagOf(c.proofKeys[0], head)...)
	return append(b, proofTagOf(c.proofKeys[len(c.proofKeys)-1], head)...), nil
}

// ProofLen is how many bytes Proof sends and CheckProof reads.
func (c *Credential) ProofLen() int { return ProofLen }

// CheckProof says whether b is a proof of one of c's secrets, not seen
// lately.
func (c *Credential) CheckProof(b []byte) bool {
	if len(b) != ProofLen || string(b[:len(proofMagic)]) != proofMagic {
		return false
	}
	head := b[:len(proofMagic)+proofNonce]
	tags := b[len(head):]
	ok := false
	for _, k := range c.proofKeys {
		want := proofTagOf(k, head)
		if hmac.Equal(want, tags[:proofTag]) || hmac.Equal(want, tags[proofTag:]) {
			ok = true
		}
	}
	if !ok {
		return false
	}
	var n [proofNonce]byte
	copy(n[:], b[len(proofMagic):])
	return c.seen.fresh(n)
}
