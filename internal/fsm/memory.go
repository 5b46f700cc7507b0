package fsm

import (
	"container/heap"
	"strings"

	"github.com/fencelock/fencelock/internal/locktable"
)

// memory holds the remembered requests (dedupe.go): by id, in the order
// they were made (oldest first), and by owner (locktable.OwnerOf of the
// holder; with ACLs on, the principal whose holder it is).
//
// What it forgets, past RememberFor of cluster time and as it fills,
// depends on the rules the log has reached. Until an entry marked
// ByOwner (a leader of this version marks what it proposes until one has
// applied), the whole memory holds
// RememberCount requests and the oldest go first, as entries written
// before the change were applied: a log replayed from an older snapshot
// decides every retry as it was decided the first time. From that entry
// on, each owner has RememberCount of its own and loses only its own
// oldest when it makes more, and past RememberTotal in all the owner
// with the most gives up its oldest: another principal's calls, however
// many, cannot push out a request of an owner that has fewer than they.
type memory struct {
	seen       map[string]*remembered
	head, tail *remembered // oldest first
	n          int
	owners     map[string]*ownerMemory
	big        ownerHeap // owners, the one with the most first
	byOwner    bool
}

// ownerMemory is one owner's share of the memory.
type ownerMemory struct {
	name       string
	n          int
	head, tail *remembered // oldest first
	index      int         // in memory.big
}

func newMemory() memory {
	return memory{seen: map[string]*remembered{}, owners: map[string]*ownerMemory{}}
}

// Len is the number of requests remembered.
func (m *memory) Len() int { return m.n }

func (m *memory) get(id string) (*remembered, bool) {
	r, ok := m.seen[id]
	return r, ok
}

// idOwner is the owner of the holder that starts a request id.
func idOwner(id string) string {
	holder, _, _ := strings.Cut(id, "\x00")
	return locktable.OwnerOf(holder)
}

// add appends r, whose id is not remembered, as the newest.
func (m *memory) add(r *remembered) {
	m.seen[r.id] = r
	r.prev, r.next = m.tail, nil
	if m.tail != nil {
		m.tail.next = r
	} else {
		m.head = r
	}
	m.tail = r
	m.n++
	name := idOwner(r.id)
	o := m.owners[name]
	if o == nil {
		o = &ownerMemory{name: strings.Clone(name)}
		m.owners[o.name] = o
		heap.Push(&m.big, o)
	}
	r.owner = o
	r.oprev, r.onext = o.tail, nil
	if o.tail != nil {
		o.tail.onext = r
	} else {
		o.head = r
	}
	o.tail = r
	o.n++
	heap.Fix(&m.big, o.index)
}

// remove drops r, which is remembered.
func (m *memory) remove(r *remembered) {
	if m.seen[r.id] == r {
		delete(m.seen, r.id)
	}
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		m.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		m.tail = r.prev
	}
	m.n--
	o := r.owner
	if r.oprev != nil {
		r.oprev.onext = r.onext
	} else {
		o.head = r.onext
	}
	if r.onext != nil {
		r.onext.oprev = r.oprev
	} else {
		o.tail = r.oprev
	}
	o.n--
	if o.n == 0 {
		heap.Remove(&m.big, o.index)
		delete(m.owners, o.name)
	} else {
		heap.Fix(&m.big, o.index)
	}
	r.prev, r.next, r.oprev, r.onext, r.owner = nil, nil, nil, nil, nil
}

// trim forgets what the rules say is too many or too old at now, and
// returns what it forgot; o is the owner just added to (nil: none).
func (m *memory) trim(o *ownerMemory, now locktable.Time) []*remembered {
	var gone []*remembered
	drop := func(r *remembered) {
		m.remove(r)
		gone = append(gone, r)
	}
	if m.byOwner {
		for o != nil && o.n > RememberCount {
			drop(o.head)
		}
		for m.n > RememberTotal {
			drop(m.big[0].head)
		}
	} else {
		for m.n > RememberCount {
			drop(m.head)
		}
	}
	for m.head != nil && m.head.at <= now-locktable.Time(RememberFor) {
		drop(m.head)
	}
	return gone
}

// ownerHeap orders owners by how many requests they have, most first,
// then by name, so that every replica picks the same one.
type ownerHeap []*ownerMemory

func (h ownerHeap) Len() int { return len(h) }
func (h ownerHeap) Less(i, j int) bool {
	if h[i].n != h[j].n {
		return h[i].n > h[j].n
	}
	return h[i].name < h[j].name
}
func (h ownerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *ownerHeap) Push(x any) {
	o := x.(*ownerMemory)
	o.index = len(*h)
	*h = append(*h, o)
}
func (h *ownerHeap) Pop() any {
	old := *h
	o := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return o
}
