package locktable

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// model is a deliberately naive reference for Table: plain maps and slices,
// no heap, no index, every rule written out the long way.
type model struct {
	leases map[string]Lease
	queues map[string][]waiter
	last   uint64
}

func newModel() *model {
	return &model{leases: map[string]Lease{}, queues: map[string][]waiter{}}
}

func (m *model) grant(key, holder string, now Time, ttl Duration, since Time, evs *[]string) Lease {
	m.last++
	l := Lease{Key: key, Holder: holder, Token: m.last, Granted: now, Expiry: now + Time(ttl), TTL: ttl}
	m.leases[key] = l
	var q []waiter
	for _, w := range m.queues[key] {
		if w.holder != holder {
			q = append(q, w)
		}
	}
	m.setQueue(key, q)
	*evs = append(*evs, fmt.Sprintf("granted %s %s %d", key, holder, l.Token))
	return l
}

func (m *model) setQueue(key string, q []waiter) {
	if len(q) == 0 {
		delete(m.queues, key)
	} else {
		m.queues[key] = q
	}
}

// handOff: the key has no live lease; drop late waiters, grant the head.
func (m *model) handOff(key string, now Time, evs *[]string) {
	var q []waiter
	for _, w := range m.queues[key] {
		if now >= w.deadline {
			*evs = append(*evs, fmt.Sprintf("wait-dropped %s %s 0", key, w.holder))
		} else {
			q = append(q, w)
		}
	}
	m.setQueue(key, q)
	if len(q) > 0 {
		m.grant(key, q[0].holder, now, q[0].ttl, q[0].since, evs)
	}
}

func (m *model) settle(key string, now Time, evs *[]string) {
	if len(m.queues[key]) == 0 {
		return
	}
	l, held := m.leases[key]
	if held && now < l.Expiry {
		return
	}
	if held {
		*evs = append(*evs, fmt.Sprintf("expired %s %s %d", key, l.Holder, l.Token))
		delete(m.leases, key)
	}
	m.handOff(key, now, evs)
}

func (m *model) live(key string, now Time) (Lease, bool) {
	l, ok := m.leases[key]
	return l, ok && now < l.Expiry
}

func (m *model) acquire(key, holder string, now Time, ttl Duration, evs *[]string) (uint64, bool) {
	m.settle(key, now, evs)
	if l, ok := m.live(key, now); ok && l.Holder != holder {
		return 0, false
	}
	return m.grant(key, holder, now, ttl, now, evs).Token, true
}

// renew is acquire for the holder of a live lease only; it settles
// nothing, so a refusal reports no event.
func (m *model) renew(key, holder string, now Time, ttl Duration, evs *[]string) (uint64, bool) {
	if l, ok := m.live(key, now); !ok || l.Holder != holder {
		return 0, false
	}
	return m.acquire(key, holder, now, ttl, evs)
}

func (m *model) wait(key, holder string, now Time, ttl Duration, deadline Time, evs *[]string) (uint64, bool, bool) {
	m.settle(key, now, evs)
	if l, ok := m.live(key, now); !ok || l.Holder == holder {
		return m.grant(key, holder, now, ttl, now, evs).Token, true, false
	}
	if now >= deadline {
		return 0, false, true
	}
	q := m.queues[key]
	for i := range q {
		if q[i].holder == holder {
			q[i].ttl, q[i].deadline = ttl, deadline
			return 0, false, false
		}
	}
	m.queues[key] = append(q, waiter{holder: holder, ttl: ttl, since: now, deadline: deadline})
	*evs = append(*evs, fmt.Sprintf("wait-joined %s %s 0", key, holder))
	return 0, false, false
}

func (m *model) release(key, holder string, now Time, evs *[]string) bool {
	m.settle(key, now, evs)
	l, ok := m.live(key, now)
	if !ok || l.Holder != holder {
		return false
	}
	*evs = append(*evs, fmt.Sprintf("released %s %s %d", key, holder, l.Token))
	delete(m.leases, key)
	m.handOff(key, now, evs)
	return true
}

func (m *model) extend(key, holder string, token uint64, now Time, ttl Duration, evs *[]string) bool {
	m.settle(key, now, evs)
	l, ok := m.live(key, now)
	if !ok || l.Holder != holder || l.Token != token {
		return false
	}
	l.Expiry, l.TTL = now+Time(ttl), ttl
	m.leases[key] = l
	return true
}

func (m *model) tick(now Time, evs *[]string) {
	for {
		// The earliest due lease by (expiry, key), one at a time, because a
		// hand-off inside the loop changes what is due.
		var due []Lease
		for _, l := range m.leases {
			if l.Expiry <= now {
				due = append(due, l)
			}
		}
		if len(due) == 0 {
			break
		}
		sort.Slice(due, func(i, j int) bool {
			if due[i].Expiry != due[j].Expiry {
				return due[i].Expiry < due[j].Expiry
			}
			return due[i].Key < due[j].Key
		})
		l := due[0]
		*evs = append(*evs, fmt.Sprintf("expired %s %s %d", l.Key, l.Holder, l.Token))
		delete(m.leases, l.Key)
		m.handOff(l.Key, now, evs)
	}
	var keys []string
	for k := range m.queues {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var q []waiter
		for _, w := range m.queues[k] {
			if now >= w.deadline {
				*evs = append(*evs, fmt.Sprintf("wait-dropped %s %s 0", k, w.holder))
			} else {
				q = append(q, w)
			}
		}
		m.setQueue(k, q)
	}
}

var (
	modelKeys    = []string{"a", "b", "c"}
	modelHolders = []string{"h1", "h2", "h3", "h4"}
)

// TestTableMatchesModel drives the table and the model with the same random
// calls and compares every answer, every event and every observable after
// each step. Times are small integers so that now == expiry and now ==
// deadline happen often.
func TestTableMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb, m := New(), newModel()
		var got, want []string
		tb.SetObserver(func(ev Event) {
			got = append(got, fmt.Sprintf("%s %s %s %d", ev.Kind, ev.Key, ev.Holder, ev.Token))
		})
		now := Time(0)
		key := rapid.SampledFrom(modelKeys)
		holder := rapid.SampledFrom(modelHolders)
		ttl := func(rt *rapid.T) Duration { return Duration(rapid.IntRange(1, 6).Draw(rt, "ttl")) }

		rt.Repeat(map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) {
				now += Time(rapid.IntRange(0, 4).Draw(rt, "dt"))
			},
			"acquire": func(rt *rapid.T) {
				k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
				l, err := tb.Acquire(k, h, now, d)
				tok, ok := m.acquire(k, h, now, d, &want)
				if ok != (err == nil) || (ok && l.Token != tok) || (!ok && !errors.Is(err, ErrHeld)) {
					rt.Fatalf("acquire %s %s at %d: table %+v %v, model %d %v", k, h, now, l, err, tok, ok)
				}
			},
			"renew": func(rt *rapid.T) {
				k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
				l, err := tb.Renew(k, h, now, d)
				tok, ok := m.renew(k, h, now, d, &want)
				if ok != (err == nil) || (ok && l.Token != tok) || (!ok && !errors.Is(err, ErrNotHeld)) {
					rt.Fatalf("renew %s %s at %d: table %+v %v, model %d %v", k, h, now, l, err, tok, ok)
				}
			},
			"wait": func(rt *rapid.T) {
				k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
				deadline := NoDeadline
				if rapid.Bool().Draw(rt, "bounded") {
					deadline = now + Time(rapid.IntRange(0, 8).Draw(rt, "patience"))
				}
				l, granted, err := tb.Wait(k, h, now, d, deadline)
				tok, mg, refused := m.wait(k, h, now, d, deadline, &want)
				if granted != mg || (granted && l.Token != tok) || refused != errors.Is(err, ErrHeld) {
					rt.Fatalf("wait %s %s at %d: table %+v %v %v, model %d %v %v", k, h, now, l, granted, err, tok, mg, refused)
				}
			},
			"cancel": func(rt *rapid.T) {
				k, h := key.Draw(rt, "key"), holder.Draw(rt, "holder")
				was := false
				var q []waiter
				for _, w := range m.queues[k] {
					if w.holder == h {
						was = true
						want = append(want, fmt.Sprintf("wait-left %s %s 0", k, h))
					} else {
						q = append(q, w)
					}
				}
				m.setQueue(k, q)
				if tb.CancelWait(k, h) != was {
					rt.Fatalf("cancel %s %s: want %v", k, h, was)
				}
			},
			"release": func(rt *rapid.T) {
				k, h := key.Draw(rt, "key"), holder.Draw(rt, "holder")
				ok, err := tb.Release(k, h, now)
				if err != nil || ok != m.release(k, h, now, &want) {
					rt.Fatalf("release %s %s at %d: %v %v", k, h, now, ok, err)
				}
			},
			"extend": func(rt *rapid.T) {
				k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
				tok := uint64(rapid.IntRange(0, int(m.last)+1).Draw(rt, "token"))
				if l, ok := m.leases[k]; ok && rapid.Bool().Draw(rt, "current") {
					tok = l.Token
				}
				_, err := tb.Extend(k, h, tok, now, d)
				if ok := m.extend(k, h, tok, now, d, &want); ok != (err == nil) {
					rt.Fatalf("extend %s %s %d at %d: table %v, model %v", k, h, tok, now, err, ok)
				}
			},
			"tick": func(rt *rapid.T) {
				tb.Tick(now)
				m.tick(now, &want)
			},
			"snapshot": func(rt *rapid.T) {
				// Replace the table by its own decoded snapshot: the rest of
				// the run then checks that restore lost nothing.
				b, err := tb.MarshalBinary()
				if err != nil {
					rt.Fatal(err)
				}
				fresh := New()
				if err := fresh.UnmarshalBinary(b); err != nil {
					rt.Fatalf("restore: %v", err)
				}
				b2, _ := fresh.MarshalBinary()
				if !bytes.Equal(b, b2) {
					rt.Fatal("encoding is not stable across a restore")
				}
				fresh.SetObserver(tb.observe)
				tb = fresh
			},
			"": func(rt *rapid.T) {
				checkOwners(rt, tb)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					rt.Fatalf("events:\n table %v\n model %v", got, want)
				}
				keys := map[string]bool{}
				for k := range m.leases {
					keys[k] = true
				}
				for k := range m.queues {
					keys[k] = true
				}
				if tb.Len() != len(keys) {
					rt.Fatalf("table keeps %d keys, model %d", tb.Len(), len(keys))
				}
				if tb.LastToken() != m.last {
					rt.Fatalf("last token %d, model %d", tb.LastToken(), m.last)
				}
				for _, k := range modelKeys {
					ml, mok := m.live(k, now)
					tl, tok := tb.Get(k, now)
					if mok != tok || (mok && ml != tl) {
						rt.Fatalf("get %s at %d: table %+v %v, model %+v %v", k, now, tl, tok, ml, mok)
					}
					for tokn := uint64(0); tokn <= m.last+1; tokn++ {
						mrec, has := m.leases[k]
						wantValid := has && mrec.Token == tokn
						if tb.IsValidToken(k, tokn) != wantValid {
							rt.Fatalf("IsValidToken(%s, %d) != %v", k, tokn, wantValid)
						}
						if tb.Check(k, tokn, now) != (wantValid && now < mrec.Expiry) {
							rt.Fatalf("Check(%s, %d, %d) wrong", k, tokn, now)
						}
					}
					var mq []string
					for _, w := range m.queues[k] {
						mq = append(mq, w.holder)
					}
					if fmt.Sprint(tb.Waiters(k)) != fmt.Sprint(mq) {
						rt.Fatalf("queue %s: table %v, model %v", k, tb.Waiters(k), mq)
					}
				}
				// At no time are there two live holders: trivially one record
				// per key, but tokens must also be distinct across keys.
				seen := map[uint64]string{}
				for _, l := range tb.List("", now, 0) {
					if other, dup := seen[l.Token]; dup {
						rt.Fatalf("token %d live on %s and %s", l.Token, other, l.Key)
					}
					seen[l.Token] = l.Key
				}
			},
		})
	})
}
