package client

import (
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// random is where the client draws its jitter, back-off and request ids
// from: the runtime's sources by default, or one seeded source
// (WithRandom) so that a simulation replays a client exactly.
type random struct {
	mu  sync.Mutex
	src *mrand.Rand // nil: math/rand/v2's and crypto/rand's
}

// WithRandom makes the client draw its jitter, retry back-off and request
// ids from r instead of the runtime's random sources, so that a seeded
// test or simulation (internal/sim) replays it exactly. r need not be safe
// for concurrent use: the client serialises its draws. Request ids drawn
// from r are only as unique as r's stream: give each client its own seed.
func WithRandom(r *mrand.Rand) Option { return func(c *Client) { c.rnd.src = r } }

// n is a uniform duration in [0, d): mrand.N's.
func (r *random) n(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if r.src == nil {
		return mrand.N(d)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Duration(r.src.Int64N(int64(d)))
}

// requestID is a fresh request id: 96 random bits in hex.
func (r *random) requestID() string {
	var b [12]byte
	if r.src == nil {
		_, _ = rand.Read(b[:])
	} else {
		r.mu.Lock()
		for i := range b {
			b[i] = byte(r.src.Uint32())
		}
		r.mu.Unlock()
	}
	return hex.EncodeToString(b[:])
}
