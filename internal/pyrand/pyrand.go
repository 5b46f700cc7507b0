// Package pyrand reproduces the stream of CPython's random.Random so that a
// Go program seeded like a Python script draws exactly the same numbers.
//
// The generator is MT19937 seeded the way CPython seeds it from an integer
// (init_by_array over the 32-bit words of |seed|), and the derived methods
// follow CPython 3.11's Lib/random.py step for step, including the order of
// the floating-point operations, because the lab's figures depend on
// comparisons that one ulp can flip.
//
// One step is not Python's own: expovariate takes a logarithm, and CPython
// asks the platform C library for it. Go's math.Log is within one ulp of
// glibc's and equal to it on most inputs; build with -tags pyrand_libm (cgo)
// to call the C library instead and match CPython on the same machine bit for
// bit. Either way the lab's figures come out the same, because a one-ulp
// difference would have to land exactly on a comparison's threshold to flip
// it; the golden tests in package lab pin those figures under both builds.
package pyrand

import (
	"errors"
	"math/bits"
)

const (
	stateWords = 624
	shiftWords = 397
	matrixA    = 0x9908b0df
	upperMask  = 0x80000000
	lowerMask  = 0x7fffffff
)

// ErrBadArgument reports an argument CPython would answer with ValueError.
var ErrBadArgument = errors.New("pyrand: bad argument")

// Rand is one generator. It is not safe for concurrent use, like CPython's
// Random is not across threads without the GIL.
type Rand struct {
	mt  [stateWords]uint32
	idx int
}

// New returns a generator in the state random.Random(seed) starts in.
func New(seed int64) *Rand {
	// abs without overflow: the magnitude of MinInt64 fits in a uint64.
	mag := uint64(seed)
	if seed < 0 {
		mag = -mag
	}
	return NewFromKey(keyWords(mag))
}

// keyWords splits a magnitude into little-endian 32-bit words, as CPython
// does before init_by_array; zero still contributes one word.
func keyWords(mag uint64) []uint32 {
	if mag>>32 != 0 {
		return []uint32{uint32(mag), uint32(mag >> 32)}
	}
	return []uint32{uint32(mag)}
}

// NewFromKey seeds from an explicit init_by_array key: the little-endian
// 32-bit words of a seed too large for an int64. An empty key is treated as
// the single word 0, which is what CPython does for a seed of 0.
func NewFromKey(key []uint32) *Rand {
	if len(key) == 0 {
		key = []uint32{0}
	}
	r := &Rand{}
	r.initGenrand(19650218)
	mt := &r.mt
	i, j := 1, 0
	for k := max(stateWords, len(key)); k > 0; k-- {
		mt[i] = (mt[i] ^ ((mt[i-1] ^ (mt[i-1] >> 30)) * 1664525)) + key[j] + uint32(j)
		i++
		j++
		if i >= stateWords {
			mt[0] = mt[stateWords-1]
			i = 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for k := stateWords - 1; k > 0; k-- {
		mt[i] = (mt[i] ^ ((mt[i-1] ^ (mt[i-1] >> 30)) * 1566083941)) - uint32(i)
		i++
		if i >= stateWords {
			mt[0] = mt[stateWords-1]
			i = 1
		}
	}
	mt[0] = 0x80000000 // guarantees a non-zero state
	return r
}

func (r *Rand) initGenrand(s uint32) {
	r.mt[0] = s
	for i := 1; i < stateWords; i++ {
		r.mt[i] = 1812433253*(r.mt[i-1]^(r.mt[i-1]>>30)) + uint32(i)
	}
	r.idx = stateWords
}

// Uint32 returns the next raw 32-bit output (CPython's genrand_uint32).
func (r *Rand) Uint32() uint32 {
	if r.idx >= stateWords {
		r.twist()
	}
	y := r.mt[r.idx]
	r.idx++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func (r *Rand) twist() {
	mt := &r.mt
	for k := 0; k < stateWords; k++ {
		y := (mt[k] & upperMask) | (mt[(k+1)%stateWords] & lowerMask)
		v := mt[(k+shiftWords)%stateWords] ^ (y >> 1)
		if y&1 != 0 {
			v ^= matrixA
		}
		mt[k] = v
	}
	r.idx = 0
}

// Random returns a float in [0, 1) with 53 random bits, as random.random().
func (r *Rand) Random() float64 {
	a := r.Uint32() >> 5 // 27 bits
	b := r.Uint32() >> 6 // 26 bits
	return (float64(a)*67108864.0 + float64(b)) * (1.0 / 9007199254740992.0)
}

// Expovariate mirrors random.expovariate(lambd): -log(1 - random()) / lambd.
// Pass lambd already computed the way the Python computes it (1 / mean is a
// run-time float division there, not an exact constant). A zero lambd gives
// an infinity where Python raises ZeroDivisionError.
func (r *Rand) Expovariate(lambd float64) float64 {
	return -log(1.0-r.Random()) / lambd
}

// Uniform mirrors random.uniform(a, b): a + (b-a) * random().
func (r *Rand) Uniform(a, b float64) float64 {
	return a + (b-a)*r.Random()
}

// Getrandbits mirrors random.getrandbits(k) for 0 <= k <= 64: whole 32-bit
// words least significant first, the last one trimmed from the top.
func (r *Rand) Getrandbits(k int) (uint64, error) {
	if k < 0 || k > 64 {
		return 0, ErrBadArgument
	}
	if k == 0 {
		return 0, nil
	}
	if k <= 32 {
		return uint64(r.Uint32() >> (32 - k)), nil
	}
	lo := uint64(r.Uint32())
	hi := uint64(r.Uint32() >> (64 - k))
	return lo | hi<<32, nil
}

// randbelow is CPython's _randbelow_with_getrandbits: draw bit_length(n)
// bits and reject until the value is below n.
func (r *Rand) randbelow(n uint64) uint64 {
	k := bits.Len64(n)
	for {
		v, _ := r.Getrandbits(k) // k <= 64 always
		if v < n {
			return v
		}
	}
}

// Randrange mirrors random.randrange(start, stop) with the default step.
func (r *Rand) Randrange(start, stop int64) (int64, error) {
	if stop <= start {
		return 0, ErrBadArgument
	}
	width := uint64(stop) - uint64(start)
	return start + int64(r.randbelow(width)), nil
}

// Randint mirrors random.randint(a, b), both ends included. The one range
// it refuses is all of int64, whose width needs a 65-bit draw.
func (r *Rand) Randint(a, b int64) (int64, error) {
	if b < a {
		return 0, ErrBadArgument
	}
	width := uint64(b) - uint64(a) + 1
	if width == 0 {
		return 0, ErrBadArgument
	}
	return a + int64(r.randbelow(width)), nil
}

// Choice returns an index into a sequence of length n the way
// random.choice picks one: seq[_randbelow(len(seq))].
func (r *Rand) Choice(n int) (int, error) {
	if n <= 0 {
		return 0, ErrBadArgument // CPython: IndexError on an empty sequence
	}
	return int(r.randbelow(uint64(n))), nil
}
