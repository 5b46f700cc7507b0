// Package simrand is the simulated world's randomness: each draw a
// function of the world's seed and of what it is about (and, for the
// draws of goroutines the scheduler runs in either order, of the virtual
// instant), never of the order in which another part of the world drew.
package simrand

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// Draw is a random stream for one decision of a world of seed, keyed by
// what it is about (key) and which of such decisions it is (n), so that
// what one part draws depends on nothing another does.
func Draw(seed uint64, key string, n uint64) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s#%d", key, n)
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// Stream is a seeded random source of its own for one part of a world of
// seed that draws in an order of its own (an actor, a client library).
func Stream(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// Instants draws for the decisions of a world's processes that several
// of their goroutines make: each keyed by what it is about, the virtual
// instant, and how many such decisions were made at that instant before.
// Two goroutines that the scheduler runs in either order at one instant
// may swap their draws there, but never shift the draws of any later
// instant.
type Instants struct {
	seed   uint64
	mu     sync.Mutex
	counts map[string]instantCount
}

type instantCount struct {
	at time.Time
	n  uint64
}

// NewInstants is the instants' draws of a world of seed.
func NewInstants(seed uint64) *Instants {
	return &Instants{seed: seed, counts: map[string]instantCount{}}
}

// Draw is a random stream for one decision about key, now.
func (i *Instants) Draw(key string) *rand.Rand {
	now := time.Now()
	i.mu.Lock()
	c := i.counts[key]
	if !c.at.Equal(now) {
		c = instantCount{at: now}
	}
	c.n++
	i.counts[key] = c
	i.mu.Unlock()
	return Draw(i.seed, fmt.Sprintf("%s@%d", key, now.UnixNano()), c.n)
}

// instantSource is a rand.Source for a client library's jitter and
// request ids, whose goroutines draw from it in whatever order the
// scheduler runs them. Each draw is keyed by the virtual instant, the
// code that draws (the functions on the caller's stack, by name: the
// same in every build) and how many draws that code made at that
// instant before: so a goroutine's draws do not move another's, at that
// instant or any later one, unless the two run the same code at the
// same instant.
type instantSource struct {
	seed, key uint64
	mu        sync.Mutex
	at        time.Time
	n         map[uint64]uint64 // draws at this instant, by the caller's stack
}

// Source is a random source named name of a world of seed whose draws
// are keyed by the virtual instant and the code that draws (instantSource).
func Source(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return rand.New(&instantSource{seed: seed, key: h.Sum64(), n: map[uint64]uint64{}})
}

func (s *instantSource) Uint64() uint64 {
	var pcs [12]uintptr
	stack := s.key
	for _, pc := range pcs[:runtime.Callers(2, pcs[:])] {
		stack = splitmix(stack ^ funcKey(pc))
	}
	now := time.Now()
	s.mu.Lock()
	if !now.Equal(s.at) {
		s.at = now
		clear(s.n)
	}
	s.n[stack]++
	n := s.n[stack]
	s.mu.Unlock()
	return splitmix(splitmix(splitmix(s.seed^stack)^uint64(now.UnixNano())) ^ n)
}

// funcKeys caches funcKey.
var funcKeys sync.Map // uintptr -> uint64

// funcKey is a hash of the name of the function pc is in: the same in
// every build, where pc itself moves with any change to the code.
func funcKey(pc uintptr) uint64 {
	if k, ok := funcKeys.Load(pc); ok {
		return k.(uint64)
	}
	h := fnv.New64a()
	if f := runtime.FuncForPC(pc); f != nil {
		_, _ = h.Write([]byte(f.Name()))
	}
	k := h.Sum64()
	funcKeys.Store(pc, k)
	return k
}

// splitmix is SplitMix64's finaliser.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Between draws a duration from lo up to (not including) hi.
func Between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// Pick draws an index of weights, each as often as its weight.
func Pick(r *rand.Rand, weights []int) int {
	total := 0
	for _, x := range weights {
		total += x
	}
	x := r.IntN(total)
	for k, n := range weights {
		if x < n {
			return k
		}
		x -= n
	}
	return len(weights) - 1
}
