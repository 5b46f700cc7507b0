package locktable

import (
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// indexedEntries is every entry x holds, in no particular order: the
// tests' view of the index, which the table itself never walks.
func indexedEntries(x *keyIndex) []*entry {
	var out []*entry
	seen := map[*keyGroup]bool{}
	for _, g := range x.dir {
		if seen[g] {
			continue
		}
		seen[g] = true
		for i, tag := range g.tags {
			if tag >= tagLive {
				out = append(out, g.slots[i])
			}
		}
	}
	return out
}

// checkKeyIndex fails t unless x holds exactly want, each in the group its
// hash names, with every count right.
func checkKeyIndex(t interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
}, x *keyIndex, want map[string]*entry) {
	t.Helper()
	if len(x.dir) != 1<<x.depth {
		t.Fatalf("directory of %d groups at depth %d", len(x.dir), x.depth)
	}
	seen := map[*keyGroup]bool{}
	n := 0
	for i, g := range x.dir {
		if g.depth > x.depth {
			t.Fatalf("group of depth %d in a directory of depth %d", g.depth, x.depth)
		}
		// A group of depth d fills an aligned run of 2^(depth-d) slots.
		run := 1 << (x.depth - g.depth)
		if x.dir[i-i%run] != g || x.dir[i-i%run+run-1] != g {
			t.Fatalf("directory slot %d: its group's run is broken", i)
		}
		if seen[g] {
			continue
		}
		seen[g] = true
		used, dead := 0, 0
		for j, tag := range g.tags {
			switch {
			case tag >= tagLive:
				used++
				e := g.slots[j]
				h := x.hash(e.key)
				if x.group(h) != g || tagOf(h) != tag || homeBitsOf(h) != e.homeBits {
					t.Fatalf("%q sits in the wrong group or under the wrong tag", e.key)
				}
			case tag == tagDead:
				dead++
				if g.slots[j] != nil {
					t.Fatal("a tombstone keeps its entry")
				}
			case g.slots[j] != nil:
				t.Fatal("an empty slot keeps an entry")
			}
		}
		if used != g.used || dead != g.dead || used+dead > groupLimit(len(g.tags)) {
			t.Fatalf("group counts %d used, %d dead, holds %d and %d in %d slots", g.used, g.dead, used, dead, len(g.tags))
		}
		n += used
	}
	if n != x.len() || n != len(want) {
		t.Fatalf("index holds %d entries, counts %d, want %d", n, x.len(), len(want))
	}
	for k, e := range want {
		if got := x.get(k); got != e {
			t.Fatalf("get(%q) = %p, want %p", k, got, e)
		}
	}
}

// TestKeyIndexMatchesAMap: random inserts, removals and lookups, over few
// keys (tombstones, rehashes in place) or many (groups grow and split),
// answer what a Go map answers.
func TestKeyIndexMatchesAMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		x := newKeyIndexFor(rapid.SampledFrom([]int{0, 10, 5000}).Draw(rt, "sized"))
		want := map[string]*entry{}
		space := rapid.SampledFrom([]int{4, 40, 4000}).Draw(rt, "space")
		steps := rapid.IntRange(0, 3000).Draw(rt, "steps")
		for range steps {
			// A fresh string each time: lookups go by the key's bytes.
			k := "k/" + strconv.Itoa(rapid.IntRange(0, space-1).Draw(rt, "key"))
			switch e := want[k]; {
			case rapid.IntRange(0, 9).Draw(rt, "op") < 3: // lookup
				if got := x.get(k); got != e {
					rt.Fatalf("get(%q) = %p, want %p", k, got, e)
				}
			case e == nil:
				e = &entry{key: k}
				x.insert(e)
				want[k] = e
			case rapid.Bool().Draw(rt, "impostor"):
				// Another entry of the same key is not the one indexed.
				if x.remove(&entry{key: k}) {
					rt.Fatalf("removed an entry of %q that was not indexed", k)
				}
			default:
				if !x.remove(e) {
					rt.Fatalf("remove(%q) found nothing", k)
				}
				delete(want, k)
			}
		}
		if x.remove(&entry{key: "absent"}) {
			rt.Fatal("removed an absent key")
		}
		checkKeyIndex(rt, &x, want)
	})
}

// TestKeyIndexGrowsAndEmpties takes a hundred thousand keys (hundreds of
// splits), removes every other, takes them again, then removes them all.
func TestKeyIndexGrowsAndEmpties(t *testing.T) {
	x := newKeyIndex()
	want := map[string]*entry{}
	const n = 100000
	key := func(i int) string { return "w4/" + strconv.Itoa(i) }
	for i := range n {
		e := &entry{key: key(i)}
		x.insert(e)
		want[e.key] = e
	}
	checkKeyIndex(t, &x, want)
	if x.depth < 6 {
		t.Fatalf("%d keys in a directory of depth %d: the groups did not split", n, x.depth)
	}
	for i := 0; i < n; i += 2 {
		x.remove(want[key(i)])
		delete(want, key(i))
	}
	checkKeyIndex(t, &x, want)
	for i := 0; i < n; i += 2 {
		e := &entry{key: key(i)}
		x.insert(e)
		want[e.key] = e
	}
	checkKeyIndex(t, &x, want)
	for i := range n {
		if !x.remove(want[key(i)]) {
			t.Fatalf("remove(%q) found nothing", key(i))
		}
		delete(want, key(i))
	}
	checkKeyIndex(t, &x, want)
	if x.get(key(1)) != nil {
		t.Fatal("an emptied index still finds a key")
	}
}

// TestKeyIndexSizedForARestore: an index sized for n keys (a snapshot's)
// takes them without a split, and with hardly a group grown: a group is
// sized for its share of the keys at 70% full, and grows only past 81%,
// four standard deviations of its share above the mean at the most.
func TestKeyIndexSizedForARestore(t *testing.T) {
	for _, n := range []int{0, 1, 700, 5000, 300000} {
		x := newKeyIndexFor(n)
		depth, sizes := x.depth, map[*keyGroup]int{}
		for _, g := range x.dir {
			sizes[g] = len(g.tags)
		}
		want := map[string]*entry{}
		for i := range n {
			e := &entry{key: "restored/" + strconv.Itoa(i)}
			x.insert(e)
			want[e.key] = e
		}
		if x.depth != depth {
			t.Fatalf("%d keys: the directory grew from depth %d to %d", n, depth, x.depth)
		}
		grown := 0
		for g, size := range sizes {
			if len(g.tags) != size {
				grown++
			}
		}
		if grown*20 > len(sizes) {
			t.Fatalf("%d keys: %d of %d groups grew", n, grown, len(sizes))
		}
		checkKeyIndex(t, &x, want)
	}
}

// BenchmarkKeyIndexFill indexes 100,000 entries one by one (a log's
// replay, a fill), beside a Go map from the key doing the same.
func BenchmarkKeyIndexFill(b *testing.B) {
	es := make([]*entry, 100000)
	for i := range es {
		es[i] = &entry{key: "flbench/1765000000000000000/w4/" + strconv.Itoa(i)}
	}
	b.Run("index", func(b *testing.B) {
		for range b.N {
			x := newKeyIndex()
			for _, e := range es {
				x.insert(e)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(es)), "ns/key")
	})
	b.Run("map", func(b *testing.B) {
		for range b.N {
			m := map[string]*entry{}
			for _, e := range es {
				m[e.key] = e
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(es)), "ns/key")
	})
}

// BenchmarkKeyIndexGet looks keys up in an index of one, 32 and 20,000
// keys, beside a Go map from the key.
func BenchmarkKeyIndexGet(b *testing.B) {
	for _, n := range []int{1, 32, 20000} {
		keys := make([]string, n)
		x, m := newKeyIndex(), map[string]*entry{}
		for i := range keys {
			keys[i] = "jobs/nightly/" + strconv.Itoa(i)
			e := &entry{key: keys[i]}
			x.insert(e)
			m[keys[i]] = e
		}
		b.Run(strconv.Itoa(n)+"/index", func(b *testing.B) {
			for i := range b.N {
				if x.get(keys[i%n]) == nil {
					b.Fatal("missing")
				}
			}
		})
		b.Run(strconv.Itoa(n)+"/map", func(b *testing.B) {
			for i := range b.N {
				if m[keys[i%n]] == nil {
					b.Fatal("missing")
				}
			}
		})
	}
}
