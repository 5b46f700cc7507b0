package locktable

import "hash/maphash"

// keyIndex finds an entry by its key. It is a hash table whose slots hold
// only the entry's pointer (and a tag byte), hashed by entry.key: a Go map
// from the key to the entry keeps the key's string header again in every
// slot: ~54 bytes a lock at a million of them, against ~13 here
// (docs/BENCHMARKS.md, issue 45, memory per held lock, round 5).
//
// The table is split in groups of at most maxGroupSlots slots, found by
// the top bits of a key's hash (a directory, as in extendible hashing): a
// full group splits in two, so growing never rehashes more than one group
// and a call never pauses to move a million keys. A group grows by a
// quarter at a time, so that its slots stay between 65% and 81% full. In
// a group, a key sits at the first free slot from its hash on (linear
// probing), with a tag byte of seven bits of its hash, so that a probe
// reads the key of an entry only when the tags agree. The entry keeps the
// bits of its hash that place it in a group (entry.homeBits), so a group
// grows without hashing a key again; only a split does.
//
// The hash is seeded at random, per index, as a Go map's is, so that no
// one can choose keys that collide. Nothing the table answers depends on
// the seed: the index is only ever asked for one key, never walked (the
// ordered index is).
type keyIndex struct {
	seed  maphash.Seed
	dir   []*keyGroup // by the hash's top depth bits
	depth uint        // log2(len(dir))
	n     int
}

type keyGroup struct {
	depth uint     // how many top bits of the hash every key here shares
	used  int      // live slots
	dead  int      // tombstones
	tags  []uint8  // tagEmpty, tagDead, or tagLive|seven bits of the hash
	slots []*entry // each live slot's entry; nil elsewhere
}

const (
	tagEmpty = 0
	tagDead  = 1
	tagLive  = 0x80
	// tagBits low bits of the hash are the tag; the 16 above them (the
	// entry's homeBits) place the key in its group, and the top ones
	// choose the group.
	tagBits = 7

	minGroupSlots = 8
	maxGroupSlots = 1024 // a split rehashes at most this many keys
)

// groupLimit is how many slots, live and dead, a group of size slots may
// fill: 13/16 of them, so that a probe meets an empty slot soon.
func groupLimit(size int) int { return size * 13 / 16 }

// groupSize is the size of a group made to hold n keys: 70% full.
func groupSize(n int) int {
	return min(maxGroupSlots, max(minGroupSlots, (n*10/7+7)&^7))
}

func newKeyIndex() keyIndex { return newKeyIndexFor(0) }

// newKeyIndexFor is an index sized for n keys, so that filling it (a
// snapshot's restore) splits no group and grows hardly any: each is made
// 70% full for its share of n and grows past 81%.
func newKeyIndexFor(n int) keyIndex {
	depth := uint(0)
	for n>>depth > groupLimit(maxGroupSlots)*7/8 {
		depth++
	}
	dir := make([]*keyGroup, 1<<depth)
	for i := range dir {
		dir[i] = newKeyGroup(depth, groupSize(n>>depth))
	}
	return keyIndex{seed: maphash.MakeSeed(), dir: dir, depth: depth}
}

func newKeyGroup(depth uint, size int) *keyGroup {
	return &keyGroup{depth: depth, tags: make([]uint8, size), slots: make([]*entry, size)}
}

func (x *keyIndex) hash(key string) uint64 { return maphash.String(x.seed, key) }

// group is the group of the keys whose hash is h. A uint64 shifted by 64
// is 0: a directory of one group.
func (x *keyIndex) group(h uint64) *keyGroup { return x.dir[h>>(64-x.depth)] }

func tagOf(h uint64) uint8 { return tagLive | uint8(h&(tagLive-1)) }

func homeBitsOf(h uint64) uint16 { return uint16(h >> tagBits) }

// home is the slot, in a group of size slots, where the probe for a key
// whose homeBits are hb starts: hb scaled to the size.
func home(hb uint16, size int) int { return int(uint32(hb) * uint32(size) >> 16) }

// len is the number of entries indexed.
func (x *keyIndex) len() int { return x.n }

// get is key's entry, nil when it has none.
func (x *keyIndex) get(key string) *entry {
	h := x.hash(key)
	g, tag := x.group(h), tagOf(h)
	for i := home(homeBitsOf(h), len(g.tags)); ; {
		switch t := g.tags[i]; {
		case t == tagEmpty:
			return nil
		case t == tag && g.slots[i].key == key:
			return g.slots[i]
		}
		if i++; i == len(g.tags) {
			i = 0
		}
	}
}

// insert indexes e, whose key has no entry yet.
func (x *keyIndex) insert(e *entry) {
	h := x.hash(e.key)
	g := x.group(h)
	for g.used+g.dead+1 > groupLimit(len(g.tags)) {
		switch size := len(g.tags); {
		case g.used+1 <= groupLimit(size)/2:
			g.rehash(size) // mostly tombstones
		case size < maxGroupSlots:
			g.rehash(min(maxGroupSlots, (size*5/4+7)&^7))
		default:
			x.split(g, h)
		}
		g = x.group(h)
	}
	e.homeBits = homeBitsOf(h)
	g.put(e, tagOf(h))
	x.n++
}

// put places e, under tag, in g's first free slot from its home on. g
// has room.
func (g *keyGroup) put(e *entry, tag uint8) {
	i := home(e.homeBits, len(g.tags))
	for g.tags[i] >= tagLive {
		if i++; i == len(g.tags) {
			i = 0
		}
	}
	if g.tags[i] == tagDead {
		g.dead--
	}
	g.tags[i], g.slots[i] = tag, e
	g.used++
}

// remove forgets e if it is its key's entry, and reports whether it was.
func (x *keyIndex) remove(e *entry) bool {
	h := x.hash(e.key)
	g, tag := x.group(h), tagOf(h)
	i := home(homeBitsOf(h), len(g.tags))
	for g.tags[i] != tag || g.slots[i] != e {
		if g.tags[i] == tagEmpty {
			return false
		}
		if i++; i == len(g.tags) {
			i = 0
		}
	}
	g.slots[i] = nil
	g.used--
	x.n--
	// The slot stays a tombstone while a probe may pass through it to a
	// key further on: while the next slot is not empty. Tombstones just
	// before an empty slot end no probe's way either.
	next := i + 1
	if next == len(g.tags) {
		next = 0
	}
	if g.tags[next] != tagEmpty {
		g.tags[i] = tagDead
		g.dead++
		return true
	}
	g.tags[i] = tagEmpty
	for {
		if i--; i < 0 {
			i = len(g.tags) - 1
		}
		if g.tags[i] != tagDead {
			return true
		}
		g.tags[i] = tagEmpty
		g.dead--
	}
}

// rehash moves g's live entries into size fresh slots.
func (g *keyGroup) rehash(size int) {
	tags, slots := g.tags, g.slots
	g.tags, g.slots = make([]uint8, size), make([]*entry, size)
	g.used, g.dead = 0, 0
	for i, t := range tags {
		if t >= tagLive {
			g.put(slots[i], t)
		}
	}
}

// split divides g in two by the next bit of the hash; h is the hash of a
// key of g's.
func (x *keyIndex) split(g *keyGroup, h uint64) {
	if g.depth == x.depth {
		dir := make([]*keyGroup, 2*len(x.dir))
		for i := range dir {
			dir[i] = x.dir[i>>1]
		}
		x.dir, x.depth = dir, x.depth+1
	}
	d := g.depth + 1
	bit := uint64(1) << (64 - d)
	upper := make([]bool, len(g.tags)) // the slots whose key's next bit is 1
	n := 0
	for i, t := range g.tags {
		if t >= tagLive {
			upper[i] = x.hash(g.slots[i].key)&bit != 0
			if !upper[i] {
				n++
			}
		}
	}
	halves := [2]*keyGroup{newKeyGroup(d, groupSize(n)), newKeyGroup(d, groupSize(g.used-n))}
	for i, t := range g.tags {
		if t >= tagLive {
			half := 0
			if upper[i] {
				half = 1
			}
			halves[half].put(g.slots[i], t)
		}
	}
	// g's directory slots are the run whose top g.depth bits are h's: the
	// first half of the run takes the keys whose next bit is 0.
	run := 1 << (x.depth - g.depth)
	first := int(h>>(64-g.depth)) << (x.depth - g.depth)
	for i := range run {
		x.dir[first+i] = halves[i/(run/2)]
	}
}
