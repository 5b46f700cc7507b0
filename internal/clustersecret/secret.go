// Package clustersecret is a cluster's raft credential: a random
// 256-bit secret every member holds (fencelock cluster secret makes one,
// fencelock server --cluster-secret-file gives it to a node), and the
// mutual TLS the raft port runs with it.
//
// Nothing of the secret crosses the wire. Every node derives from it the
// same certificate authority (HKDF-SHA256 to an Ed25519 seed, a fixed
// self-signed certificate), mints at start a certificate of its own
// under it (a fresh key, naming its node ID, for serverAuth and
// clientAuth), and takes as a peer only a TLS 1.3 handshake whose
// certificate chains to that authority and names a member
// (tlsconfig.CheckNode). A process without the secret cannot make such a
// certificate, so it is refused at the handshake, before the engine
// reads a byte; everything after the handshake is TLS's, encrypted and
// authenticated.
//
// A second, previous secret may be accepted besides the current one, for
// a rolling rotation: the node trusts both authorities and presents, with
// its certificate, the current authority signed by the previous one, so
// that nodes still on the previous secret alone accept it too.
package clustersecret

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Size is the secret's length in bytes: 256 bits.
const Size = 32

// Secret is a cluster secret. Its bytes are not printed by %v: use
// Encode to write it out, Fingerprint to name it.
type Secret struct {
	b [Size]byte
}

// prefix starts every encoded secret: the format's name and version.
const prefix = "fls1_"

// checkLen is the checksum appended before encoding, so that a secret
// damaged in a copy is refused instead of taken for another one.
const checkLen = 4

var encoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// New returns a new random secret.
func New() (Secret, error) {
	var s Secret
	if _, err := rand.Read(s.b[:]); err != nil {
		return Secret{}, fmt.Errorf("clustersecret: reading random bytes: %w", err)
	}
	return s, nil
}

// Encode is s as a line a human can copy: fls1_ and 58 characters of
// lowercase base32 (the secret and a checksum of it), no newline.
func (s Secret) Encode() string {
	sum := sha256.Sum256(s.b[:])
	return prefix + strings.ToLower(encoding.EncodeToString(append(s.b[:], sum[:checkLen]...)))
}

// String names s by its fingerprint, never its bytes.
func (s Secret) String() string { return "cluster secret " + s.Fingerprint() }

// ErrMalformed: the text is not a secret Encode wrote.
var ErrMalformed = errors.New("not a fencelock cluster secret")

// Parse reads a secret Encode wrote; spaces around it are ignored.
func Parse(text string) (Secret, error) {
	t := strings.TrimSpace(text)
	rest, ok := strings.CutPrefix(t, prefix)
	if !ok {
		return Secret{}, fmt.Errorf("%w: it does not start with %q", ErrMalformed, prefix)
	}
	raw, err := encoding.DecodeString(strings.ToUpper(rest))
	if err != nil || len(raw) != Size+checkLen {
		return Secret{}, fmt.Errorf("%w: %d characters after %q, want %d of base32", ErrMalformed, len(rest), prefix,
			encoding.EncodedLen(Size+checkLen))
	}
	var s Secret
	copy(s.b[:], raw)
	if sum := sha256.Sum256(s.b[:]); !bytes.Equal(sum[:checkLen], raw[Size:]) {
		return Secret{}, fmt.Errorf("%w: its checksum does not match (a character changed in a copy?)", ErrMalformed)
	}
	return s, nil
}

// ReadFile reads the secret in the file path. The file must be readable
// by its owner only (mode 0600 or 0400): a secret others can read is no
// credential. An empty or malformed file is refused. Each error is one
// line naming the file.
func ReadFile(path string) (Secret, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Secret{}, fmt.Errorf("cluster secret file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Secret{}, fmt.Errorf("cluster secret file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return Secret{}, fmt.Errorf("cluster secret file %s has mode %#o: group or others may use it; chmod 600 %s", path, uint32(perm), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Secret{}, fmt.Errorf("cluster secret file: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return Secret{}, fmt.Errorf("cluster secret file %s is empty; 'fencelock cluster secret' makes a secret", path)
	}
	s, err := Parse(string(b))
	if err != nil {
		return Secret{}, fmt.Errorf("cluster secret file %s: %w ('fencelock cluster secret' makes one)", path, err)
	}
	return s, nil
}
