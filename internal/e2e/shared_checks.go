package e2e

import (
	"fmt"
	"sort"
	"time"
)

// Hold is one semaphore permit or read/write hold as its client saw it:
// from the moment Acquire returned it to the moment the client stopped
// counting on it (it began the release, or declared the lease lost). That
// span lies inside the server's grant: the grant committed before Acquire
// returned, and a lease the client has not declared lost is still the
// server's (the client declares it lost 0.89×TTL after its last confirmed
// extension was sent, the server waits a whole TTL).
type Hold struct {
	Key        string
	Holder     string
	Token      uint64
	Write      bool // a read/write lock's writer
	Start, End time.Duration
	Lost       bool
}

// CheckShared checks holds of semaphores (permits[key] = N) and read/write
// locks (keys absent from permits): never more than N holds of a
// semaphore at once, never a writer beside another hold, and every token
// granted once.
func CheckShared(holds []Hold, permits map[string]int) []Violation {
	var out []Violation
	tokens := map[uint64]Hold{}
	byKey := map[string][]Hold{}
	for _, h := range holds {
		if o, dup := tokens[h.Token]; dup {
			out = append(out, Violation{"tokens", fmt.Sprintf("token %d granted to %s on %s and to %s on %s", h.Token, o.Holder, o.Key, h.Holder, h.Key)})
		}
		tokens[h.Token] = h
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		type edge struct {
			at    time.Duration
			start bool
			h     Hold
		}
		var es []edge
		for _, h := range byKey[k] {
			if h.End <= h.Start {
				continue // never held in the client's eyes
			}
			es = append(es, edge{h.Start, true, h}, edge{h.End, false, h})
		}
		// At one instant, ends come before starts: a hand-off touches.
		sort.Slice(es, func(i, j int) bool {
			if es[i].at != es[j].at {
				return es[i].at < es[j].at
			}
			return !es[i].start && es[j].start
		})
		live := map[uint64]Hold{}
		n, limited := permits[k]
		for _, e := range es {
			if !e.start {
				delete(live, e.h.Token)
				continue
			}
			live[e.h.Token] = e.h
			writers := 0
			for _, h := range live {
				if h.Write {
					writers++
				}
			}
			switch {
			case limited && len(live) > n:
				out = append(out, Violation{"permits", fmt.Sprintf("%s: %d holds of a %d-permit semaphore at %v: %v", k, len(live), n, e.at, holdList(live))})
			case !limited && writers > 0 && len(live) > 1:
				out = append(out, Violation{"rwlock", fmt.Sprintf("%s: a writer beside %d other holds at %v: %v", k, len(live)-1, e.at, holdList(live))})
			}
		}
	}
	return out
}

func holdList(live map[uint64]Hold) string {
	var s []string
	for _, h := range live {
		mode := "r"
		if h.Write {
			mode = "w"
		}
		s = append(s, fmt.Sprintf("%s/%d%s[%v,%v]", h.Holder, h.Token, mode, h.Start.Round(time.Millisecond), h.End.Round(time.Millisecond)))
	}
	sort.Strings(s)
	return fmt.Sprint(s)
}
