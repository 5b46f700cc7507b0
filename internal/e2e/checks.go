package e2e

import (
	"fmt"
	"sort"
	"time"
)

// Violation is one broken property, with the operations that show it.
type Violation struct {
	Check string // "tokens", "held", "expiry", "lease", "linearizable"
	Msg   string
}

func (v Violation) String() string { return v.Check + ": " + v.Msg }

// definite reports whether the op has a definite answer.
func (o Op) definite() bool { return o.Output.Result != Unknown }

// grants returns the acknowledged grants of ops.
func grants(ops []Op) []Op {
	var out []Op
	for _, o := range ops {
		if o.Input.Kind.isGrant() && o.Output.Result == OK {
			out = append(out, o)
		}
	}
	return out
}

// CheckTokens checks the global token counter as clients saw it: no token
// was acknowledged to two operations (on any keys, to any holders), and an
// acknowledged grant answered before another was invoked carries the
// smaller token.
func CheckTokens(ops []Op) []Violation {
	var vs []Violation
	gs := grants(ops)
	first := map[uint64]Op{}
	for _, g := range gs {
		if g.Output.Token == 0 {
			vs = append(vs, Violation{"tokens", fmt.Sprintf("grant with token 0: %v", g)})
			continue
		}
		if p, dup := first[g.Output.Token]; dup {
			vs = append(vs, Violation{"tokens", fmt.Sprintf("token %d acknowledged twice: %v and %v", g.Output.Token, p, g)})
			continue
		}
		first[g.Output.Token] = g
	}
	// Real-time order: sorted by response, the largest token answered
	// before each invocation must be below the token that invocation got.
	byReturn := append([]Op(nil), gs...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	prefixMax := make([]Op, len(byReturn))
	for i, g := range byReturn {
		prefixMax[i] = g
		if i > 0 && prefixMax[i-1].Output.Token > g.Output.Token {
			prefixMax[i] = prefixMax[i-1]
		}
	}
	for _, g := range gs {
		n := sort.Search(len(byReturn), func(i int) bool { return byReturn[i].Return >= g.Call })
		if n == 0 {
			continue
		}
		if p := prefixMax[n-1]; p.Output.Token >= g.Output.Token && p.ID != g.ID {
			vs = append(vs, Violation{"tokens", fmt.Sprintf("token %d granted after token %d had been answered: %v after %v", g.Output.Token, p.Output.Token, g, p)})
		}
	}
	return vs
}

// Final is what the healed cluster answered for one key: Found false for
// not_found.
type Final struct {
	Found  bool
	Holder string
	Token  uint64
}

// mayEnd reports whether o could end or supersede the grant g on its key:
// a release by g's holder, or another grant to it (a renewal takes a new
// token); an Unknown or phantom one included.
func mayEnd(o, g Op) bool {
	if o.Input.Holder != g.Input.Holder {
		return false // nobody else can end g, not legally
	}
	switch o.Input.Kind {
	case Release:
		return o.Output.Result != OK || o.Output.Bool
	case Acquire, Wait, PhantomGrant:
		return o.Output.Result != Refused
	case PhantomRelease:
		return true
	}
	return false
}

// CheckHeld checks that what the cluster answers after the faults healed
// keeps every acknowledged grant that nothing could have ended: no release
// of it was attempted and no other grant on the key could have been made
// after it. final has the answers per key; keys not in final are not
// checked against it. Keys whose leases expire within the run are skipped.
func CheckHeld(ops []Op, final map[string]Final) []Violation {
	var vs []Violation
	byKey := map[string][]Op{}
	for _, o := range ops {
		if !o.Input.Expires {
			byKey[o.Input.Key] = append(byKey[o.Input.Key], o)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		kops := byKey[key]
		var standing []Op
		for _, g := range kops {
			if !g.Input.Kind.isGrant() || g.Output.Result != OK {
				continue
			}
			ended := false
			for _, e := range kops {
				if e.ID == g.ID || !mayEnd(e, g) {
					continue
				}
				// e can take effect after g unless it was answered before
				// g was invoked.
				if !e.definite() || e.Return >= g.Call {
					if g.Input.Kind == Wait && (e.ID == g.ID+1 || e.ID == g.ID+2) {
						continue // g's own phantoms: an earlier copy of g, never g
					}
					ended = true
					break
				}
			}
			if !ended {
				standing = append(standing, g)
			}
		}
		if len(standing) > 1 {
			vs = append(vs, Violation{"held", fmt.Sprintf("%s: %d grants acknowledged and never ended, so all held at once: %v and %v", key, len(standing), standing[0], standing[1])})
			continue
		}
		f, ok := final[key]
		if len(standing) == 1 && ok {
			g := standing[0]
			if !f.Found || f.Holder != g.Input.Holder || f.Token != g.Output.Token {
				vs = append(vs, Violation{"held", fmt.Sprintf("%s: acknowledged grant %v lost: after the faults the cluster answers %+v", key, g, f)})
			}
		}
	}
	return vs
}

// CheckExpiry checks that no holder was granted a key while an earlier
// holder's lease on it could still have been alive: for acknowledged
// grants g1 and g2 on one key, g2 with the larger token to another holder,
// and no release attempted by g1's holder, g2 must have been answered at
// least g1's TTL after g1 was invoked (the server granted g1 no earlier
// than that invocation and measures the TTL from then). Measured on the
// client's clock, which is conservative: the cluster's clock cannot run
// faster than a lease's TTL has been on the client.
func CheckExpiry(ops []Op) []Violation {
	var vs []Violation
	released := map[[2]string]time.Duration{} // (key, holder) -> earliest release call
	for _, o := range ops {
		if o.Input.Kind == Release || o.Input.Kind == PhantomRelease {
			k := [2]string{o.Input.Key, o.Input.Holder}
			if t, ok := released[k]; !ok || o.Call < t {
				released[k] = o.Call
			}
		}
	}
	byKey := map[string][]Op{}
	for _, g := range grants(ops) {
		byKey[g.Input.Key] = append(byKey[g.Input.Key], g)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		gs := byKey[key]
		sort.Slice(gs, func(i, j int) bool { return gs[i].Output.Token < gs[j].Output.Token })
		for i, g1 := range gs {
			if _, rel := released[[2]string{key, g1.Input.Holder}]; rel {
				continue
			}
			for _, g2 := range gs[i+1:] {
				if g2.Input.Holder == g1.Input.Holder {
					continue
				}
				if g2.Return < g1.Call+g1.Input.TTL {
					vs = append(vs, Violation{"expiry", fmt.Sprintf("%s: granted to %s %v after %s asked for a %v lease (never released): %v after %v",
						key, g2.Input.Holder, g2.Return-g1.Call, g1.Input.Holder, g1.Input.TTL, g2, g1)})
				}
				break // the next holder bounds the ones after it
			}
		}
	}
	return vs
}

// LeaseRecord is what a lease handle held through a fault (client.Lease,
// its keep-alive running) showed, and what the healed cluster answered
// for its key.
type LeaseRecord struct {
	Holder  string
	Token   uint64
	Lost    error         // the handle's Err() after the fault healed; nil: held
	Sent    time.Duration // send time of its last confirmed grant or extension
	FaultAt time.Duration
	Final   Final // the healed cluster's answer for the key (when not Lost)
}

// CheckLease checks a lease held while a majority stayed up: it was not
// lost, its keep-alive confirmed an extension sent after the fault (so the
// fault was one it had to ride through), and the healed cluster still
// answers it under its token.
func CheckLease(l LeaseRecord) []Violation {
	switch {
	case l.Lost != nil:
		return []Violation{{"lease", fmt.Sprintf("a lease held with its keep-alive running while a majority was up was lost: %v", l.Lost)}}
	case l.Sent < l.FaultAt:
		return []Violation{{"lease", fmt.Sprintf("the lease's keep-alive confirmed no extension sent after the fault (last at %v, fault at %v)", l.Sent, l.FaultAt)}}
	case !l.Final.Found || l.Final.Holder != l.Holder || l.Final.Token != l.Token:
		return []Violation{{"lease", fmt.Sprintf("the lease handle holds token %d but the healed cluster answers %+v", l.Token, l.Final)}}
	}
	return nil
}
