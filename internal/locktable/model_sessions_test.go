package locktable

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// smodel is a naive reference for sessions, multi-key acquire and
// lock-delay: plain maps, every rule written out. The test ticks the table
// whenever time advances, so every call meets a table with nothing due and
// the model needs only Tick's order: leases and sessions by expiry (a
// lease first at the same instant; leases by key, sessions by id), then
// ended lock-delays by key, then late waiters by key.
type smodel struct {
	leases   map[string]sLease
	queues   map[string][]sWaiter
	sessions map[uint64]*sSession
	delayed  map[string]Time
	last     uint64
	lastSess uint64
	evs      []string
}

type sLease struct {
	holder string
	token  uint64
	since  Time
	expiry Time // own leases
	ttl    Duration
	sess   uint64
	delay  Duration
}

type sWaiter struct {
	holder   string
	ttl      Duration
	since    Time
	deadline Time
	sess     uint64
	delay    Duration
}

type sSession struct {
	holder string
	ttl    Duration
	expiry Time
}

func newSModel() *smodel {
	return &smodel{leases: map[string]sLease{}, queues: map[string][]sWaiter{}, sessions: map[uint64]*sSession{}, delayed: map[string]Time{}}
}

func (m *smodel) ev(kind, key, holder string, token uint64) {
	m.evs = append(m.evs, fmt.Sprintf("%s %s %s %d", kind, key, holder, token))
}

func (m *smodel) end(l sLease) Time {
	if l.sess != 0 {
		return m.sessions[l.sess].expiry
	}
	return l.expiry
}

func (m *smodel) live(key string, now Time) (sLease, bool) {
	l, ok := m.leases[key]
	return l, ok && now < m.end(l)
}

func (m *smodel) inDelay(key string, now Time) bool {
	u, ok := m.delayed[key]
	return ok && now < u
}

func (m *smodel) grant(key, holder string, now Time, ttl Duration, since Time, sess uint64, delay Duration) uint64 {
	m.last++
	if sess != 0 {
		ttl = m.sessions[sess].ttl
	}
	m.leases[key] = sLease{holder: holder, token: m.last, since: now, expiry: now + Time(ttl), ttl: ttl, sess: sess, delay: delay}
	var q []sWaiter
	for _, w := range m.queues[key] {
		if w.holder != holder {
			q = append(q, w)
		}
	}
	m.setQueue(key, q)
	delete(m.delayed, key)
	m.ev("granted", key, holder, m.last)
	return m.last
}

func (m *smodel) setQueue(key string, q []sWaiter) {
	if len(q) == 0 {
		delete(m.queues, key)
	} else {
		m.queues[key] = q
	}
}

func (m *smodel) late(w sWaiter, now Time) bool {
	return now >= w.deadline || (w.sess != 0 && now >= m.sessions[w.sess].expiry)
}

func (m *smodel) handOff(key string, now Time) {
	var q []sWaiter
	for _, w := range m.queues[key] {
		if m.late(w, now) {
			m.ev("wait-dropped", key, w.holder, 0)
		} else {
			q = append(q, w)
		}
	}
	m.setQueue(key, q)
	if len(q) > 0 && !m.inDelay(key, now) {
		m.grant(key, q[0].holder, now, q[0].ttl, q[0].since, q[0].sess, q[0].delay)
	}
}

func (m *smodel) expire(key string, now Time) {
	l := m.leases[key]
	m.ev("expired", key, l.holder, l.token)
	if until := m.end(l) + Time(l.delay); l.delay > 0 && until > now {
		m.delayed[key] = until
	}
	delete(m.leases, key)
}

func (m *smodel) endSession(id uint64, now Time, expired bool) {
	s := m.sessions[id]
	var waits, locks []string
	for k, q := range m.queues {
		for _, w := range q {
			if w.sess == id {
				waits = append(waits, k)
			}
		}
	}
	for k, l := range m.leases {
		if l.sess == id {
			locks = append(locks, k)
		}
	}
	sort.Strings(waits)
	sort.Strings(locks)
	for _, k := range waits {
		var q []sWaiter
		for _, w := range m.queues[k] {
			if w.sess == id {
				m.ev("wait-dropped", k, w.holder, 0)
			} else {
				q = append(q, w)
			}
		}
		m.setQueue(k, q)
	}
	for _, k := range locks {
		if expired {
			m.expire(k, now)
		} else {
			l := m.leases[k]
			m.ev("released", k, s.holder, l.token)
			delete(m.leases, k)
		}
	}
	delete(m.sessions, id)
	for _, k := range locks {
		m.handOff(k, now)
	}
}

func (m *smodel) tick(now Time) {
	for {
		lk, lt, lok := "", Time(0), false
		for k, l := range m.leases {
			if l.sess == 0 && l.expiry <= now && (!lok || l.expiry < lt || (l.expiry == lt && k < lk)) {
				lk, lt, lok = k, l.expiry, true
			}
		}
		var sid uint64
		st, sok := Time(0), false
		for id, s := range m.sessions {
			if s.expiry <= now && (!sok || s.expiry < st || (s.expiry == st && id < sid)) {
				sid, st, sok = id, s.expiry, true
			}
		}
		switch {
		case lok && (!sok || lt <= st):
			m.expire(lk, now)
			m.handOff(lk, now)
		case sok:
			m.endSession(sid, now, true)
		default:
			var ended []string
			for k, u := range m.delayed {
				if u <= now {
					ended = append(ended, k)
				}
			}
			sort.Strings(ended)
			for _, k := range ended {
				delete(m.delayed, k)
				if _, held := m.leases[k]; !held && len(m.queues[k]) > 0 {
					m.handOff(k, now)
				}
			}
			var keys []string
			for k := range m.queues {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				var q []sWaiter
				for _, w := range m.queues[k] {
					if m.late(w, now) {
						m.ev("wait-dropped", k, w.holder, 0)
					} else {
						q = append(q, w)
					}
				}
				m.setQueue(k, q)
			}
			return
		}
	}
}

// check is why holder cannot have key: "" (it can), "held", "delay".
func (m *smodel) check(key, holder string, now Time) string {
	if l, ok := m.live(key, now); ok && l.holder != holder {
		return "held"
	}
	if m.inDelay(key, now) {
		return "delay"
	}
	return ""
}

func (m *smodel) session(id uint64, holder string) bool {
	s := m.sessions[id]
	return s != nil && s.holder == holder
}

func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrHeld):
		return "held"
	case errors.Is(err, ErrLockDelay):
		return "delay"
	case errors.Is(err, ErrNoSession):
		return "nosession"
	case errors.Is(err, ErrSessionLock):
		return "sessionlock"
	case errors.Is(err, ErrInvalidKey):
		return "input"
	}
	return err.Error()
}

var sessKeys = []string{"a", "b", "c", "d", "e"}

// TestSessionsMatchModel drives the table and smodel with the same random
// calls (sessions with many locks expiring or closing, multi-key acquires
// against single-key contenders and waiters, lock-delays) and compares
// every answer, every event and every observable after each step.
func TestSessionsMatchModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb, m := New(), newSModel()
		var got []string
		tb.SetObserver(func(ev Event) {
			if ev.Kind == EventWaitJoined || ev.Kind == EventWaitLeft {
				return // the queue's own events (watches): TestTableMatchesModel checks them
			}
			got = append(got, fmt.Sprintf("%s %s %s %d", ev.Kind, ev.Key, ev.Holder, ev.Token))
		})
		now := Time(0)
		key := rapid.SampledFrom(sessKeys)
		holder := rapid.SampledFrom([]string{"h1", "h2", "h3"})
		ttl := func(rt *rapid.T) Duration { return Duration(rapid.IntRange(1, 8).Draw(rt, "ttl")) }
		opts := func(rt *rapid.T, h string) Options {
			var o Options
			var own []uint64 // the holder's live sessions, in id order
			for id := uint64(1); id <= m.lastSess; id++ {
				if m.session(id, h) {
					own = append(own, id)
				}
			}
			switch u := rapid.IntRange(0, 5).Draw(rt, "under"); {
			case u == 5 && m.lastSess > 0: // any id: another's, ended, unknown
				o.Session = uint64(rapid.IntRange(1, int(m.lastSess)+1).Draw(rt, "session"))
			case u >= 2 && len(own) > 0:
				o.Session = rapid.SampledFrom(own).Draw(rt, "own")
			}
			if rapid.IntRange(0, 3).Draw(rt, "delayed") == 0 {
				o.LockDelay = Duration(rapid.IntRange(1, 4).Draw(rt, "delay"))
			}
			return o
		}
		rt.Repeat(map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) {
				now += Time(rapid.IntRange(0, 3).Draw(rt, "dt"))
				tb.Tick(now)
				m.tick(now)
			},
			"open": func(rt *rapid.T) {
				h, d := holder.Draw(rt, "holder"), ttl(rt)
				s, err := tb.OpenSession(h, now, d)
				m.lastSess++
				m.sessions[m.lastSess] = &sSession{holder: h, ttl: d, expiry: now + Time(d)}
				if err != nil || s.ID != m.lastSess {
					rt.Fatalf("open: %+v %v, want id %d", s, err, m.lastSess)
				}
			},
			"keepalive": func(rt *rapid.T) {
				h := holder.Draw(rt, "holder")
				id := uint64(rapid.IntRange(0, int(m.lastSess)+1).Draw(rt, "id"))
				_, err := tb.ExtendSession(id, h, now)
				ok := m.session(id, h)
				if ok {
					m.sessions[id].expiry = now + Time(m.sessions[id].ttl)
				}
				if ok != (err == nil) {
					rt.Fatalf("extend session %d %s: %v, model %v", id, h, err, ok)
				}
			},
			"close": func(rt *rapid.T) {
				h := holder.Draw(rt, "holder")
				id := uint64(rapid.IntRange(0, int(m.lastSess)+1).Draw(rt, "id"))
				_, err := tb.CloseSession(id, h, now)
				ok := m.session(id, h)
				if ok {
					m.endSession(id, now, false)
				}
				if ok != (err == nil) {
					rt.Fatalf("close session %d %s: %v, model %v", id, h, err, ok)
				}
			},
			"acquire": func(rt *rapid.T) {
				k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
				o := opts(rt, h)
				l, err := tb.AcquireWith(k, h, now, d, o)
				want := ""
				if o.Session != 0 && !m.session(o.Session, h) {
					want = "nosession"
				} else {
					want = m.check(k, h, now)
				}
				var tok uint64
				if want == "" {
					tok = m.grant(k, h, now, d, now, o.Session, o.LockDelay)
				}
				if errKind(err) != want || l.Token != tok {
					rt.Fatalf("acquire %s %s %+v at %d: %+v %v, model %d %q", k, h, o, now, l, err, tok, want)
				}
			},
			"acquire-all": func(rt *rapid.T) {
				ks := rapid.SliceOfN(key, 1, 4).Draw(rt, "keys")
				h, d := holder.Draw(rt, "holder"), ttl(rt)
				o := opts(rt, h)
				ls, err := tb.AcquireAll(ks, h, now, d, o)
				want, dup := "", map[string]bool{}
				for _, k := range ks {
					if dup[k] {
						want = "input"
					}
					dup[k] = true
				}
				if want == "" && o.Session != 0 && !m.session(o.Session, h) {
					want = "nosession"
				}
				for _, k := range ks {
					if want == "" {
						want = m.check(k, h, now)
					}
				}
				if errKind(err) != want {
					rt.Fatalf("acquire-all %v %s %+v at %d: %v, model %q", ks, h, o, now, err, want)
				}
				if want == "" {
					for i, k := range ks {
						if tok := m.grant(k, h, now, d, now, o.Session, o.LockDelay); ls[i].Token != tok {
							rt.Fatalf("acquire-all %v: token %d for %s, model %d", ks, ls[i].Token, k, tok)
						}
					}
				}
			},
			"wait": func(rt *rapid.T) {
				k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
				o := opts(rt, h)
				deadline := now + Time(rapid.IntRange(0, 10).Draw(rt, "patience"))
				l, granted, err := tb.WaitWith(k, h, now, d, deadline, WaitLimits{}, o)
				want, mg := "", false
				var tok uint64
				switch {
				case o.Session != 0 && !m.session(o.Session, h):
					want = "nosession"
				case m.check(k, h, now) == "":
					tok, mg = m.grant(k, h, now, d, now, o.Session, o.LockDelay), true
				case now >= deadline:
					want = m.check(k, h, now)
				default:
					q, found := m.queues[k], false
					for i := range q {
						if q[i].holder == h {
							q[i].ttl, q[i].deadline, q[i].sess, q[i].delay = d, deadline, o.Session, o.LockDelay
							found = true
						}
					}
					if !found {
						m.queues[k] = append(q, sWaiter{holder: h, ttl: d, since: now, deadline: deadline, sess: o.Session, delay: o.LockDelay})
					}
				}
				if errKind(err) != want || granted != mg || l.Token != tok {
					rt.Fatalf("wait %s %s %+v at %d: %+v %v %v, model %d %v %q", k, h, o, now, l, granted, err, tok, mg, want)
				}
			},
			"release": func(rt *rapid.T) {
				k, h := key.Draw(rt, "key"), holder.Draw(rt, "holder")
				ok, err := tb.Release(k, h, now)
				l, live := m.live(k, now)
				want := live && l.holder == h
				if want {
					m.ev("released", k, h, l.token)
					delete(m.leases, k)
					m.handOff(k, now)
				}
				if err != nil || ok != want {
					rt.Fatalf("release %s %s at %d: %v %v, model %v", k, h, now, ok, err, want)
				}
			},
			"extend": func(rt *rapid.T) {
				k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
				l, live := m.live(k, now)
				tok := l.token
				_, err := tb.Extend(k, h, tok, now, d)
				want := "notheld"
				switch {
				case live && l.holder == h && l.sess != 0:
					want = "sessionlock"
				case live && l.holder == h:
					want = ""
					l.expiry, l.ttl = now+Time(d), d
					m.leases[k] = l
				}
				if got := errKind(err); got != want && !(want == "notheld" && errors.Is(err, ErrNotHeld)) {
					rt.Fatalf("extend %s %s at %d: %v, model %q", k, h, now, err, want)
				}
			},
			"cancel": func(rt *rapid.T) {
				k, h := key.Draw(rt, "key"), holder.Draw(rt, "holder")
				was := false
				var q []sWaiter
				for _, w := range m.queues[k] {
					if w.holder == h {
						was = true
					} else {
						q = append(q, w)
					}
				}
				m.setQueue(k, q)
				if tb.CancelWait(k, h) != was {
					rt.Fatalf("cancel %s %s: want %v", k, h, was)
				}
			},
			"snapshot": func(rt *rapid.T) {
				b, err := tb.MarshalBinary()
				if err != nil {
					rt.Fatal(err)
				}
				fresh := New()
				if err := fresh.UnmarshalBinary(b); err != nil {
					rt.Fatalf("restore: %v", err)
				}
				if b2, _ := fresh.MarshalBinary(); !bytes.Equal(b, b2) {
					rt.Fatal("encoding is not stable across a restore")
				}
				fresh.SetObserver(tb.observe)
				tb = fresh
			},
			"": func(rt *rapid.T) {
				checkOwners(rt, tb)
				if fmt.Sprint(got) != fmt.Sprint(m.evs) {
					rt.Fatalf("events:\n table %v\n model %v", got, m.evs)
				}
				if tb.LastToken() != m.last {
					rt.Fatalf("last token %d, model %d", tb.LastToken(), m.last)
				}
				for _, k := range sessKeys {
					ml, mok := m.live(k, now)
					tl, tok := tb.Get(k, now)
					if mok != tok || (mok && (tl.Holder != ml.holder || tl.Token != ml.token || tl.Expiry != m.end(ml))) {
						rt.Fatalf("get %s at %d: table %+v %v, model %+v %v", k, now, tl, tok, ml, mok)
					}
					for tokn := uint64(1); tokn <= m.last; tokn++ {
						rec, has := m.leases[k]
						want := has && rec.token == tokn
						if tb.IsValidToken(k, tokn) != want || tb.Check(k, tokn, now) != (want && now < m.end(rec)) {
							rt.Fatalf("IsValidToken/Check(%s, %d) at %d, want %v", k, tokn, now, want)
						}
					}
					var mq []string
					for _, w := range m.queues[k] {
						mq = append(mq, w.holder)
					}
					if fmt.Sprint(tb.Waiters(k)) != fmt.Sprint(mq) {
						rt.Fatalf("queue %s: table %v, model %v", k, tb.Waiters(k), mq)
					}
					mu, md := m.delayed[k]
					md = md && now < mu
					tu, td := tb.LockDelay(k, now)
					if md != td || (md && mu != tu) {
						rt.Fatalf("lock-delay %s at %d: table %d %v, model %d %v", k, now, tu, td, mu, md)
					}
				}
				if tb.SessionCount() != len(m.sessions) {
					rt.Fatalf("sessions: table %d, model %d", tb.SessionCount(), len(m.sessions))
				}
				for id, s := range m.sessions {
					ts, ok := tb.GetSession(id, now)
					var keys []string
					for k, l := range m.leases {
						if l.sess == id {
							keys = append(keys, k)
						}
					}
					sort.Strings(keys)
					if !ok || ts.Expiry != s.expiry || ts.Holder != s.holder || fmt.Sprint(tb.SessionKeys(id)) != fmt.Sprint(keys) {
						rt.Fatalf("session %d: table %+v %v keys %v, model %+v keys %v", id, ts, ok, tb.SessionKeys(id), s, keys)
					}
				}
			},
		})
	})
}

// TestSessionsLazyInvariants drives the table without ticking on every
// advance, so that dead sessions are found by whichever call touches one
// of their locks first, and checks what must hold however that happens:
// a session's locks are all alive or all dead at any instant; once one of
// them expires, none of them is still the key's record after that call;
// tokens only go up.
func TestSessionsLazyInvariants(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb := New()
		type grant struct {
			key   string
			token uint64
		}
		owned := map[uint64][]grant{} // session -> its grants, as answered
		sessOf := map[uint64]uint64{} // token -> session
		var expiredSessions []uint64
		var last uint64
		tb.SetObserver(func(ev Event) {
			if ev.Kind == EventGranted {
				if ev.Token <= last {
					rt.Fatalf("token %d after %d", ev.Token, last)
				}
				last = ev.Token
			}
			if ev.Kind == EventExpired {
				if s, ok := sessOf[ev.Token]; ok {
					expiredSessions = append(expiredSessions, s)
				}
			}
		})
		now := Time(0)
		var ids []uint64
		key := rapid.SampledFrom([]string{"a", "b", "c", "d"})
		holder := rapid.SampledFrom([]string{"h1", "h2"})
		rt.Repeat(map[string]func(*rapid.T){
			"advance": func(rt *rapid.T) { now += Time(rapid.IntRange(0, 4).Draw(rt, "dt")) },
			"tick":    func(rt *rapid.T) { tb.Tick(now) },
			"open": func(rt *rapid.T) {
				s, err := tb.OpenSession(holder.Draw(rt, "holder"), now, Duration(rapid.IntRange(1, 8).Draw(rt, "ttl")))
				if err != nil {
					rt.Fatal(err)
				}
				ids = append(ids, s.ID)
			},
			"keepalive": func(rt *rapid.T) {
				if len(ids) > 0 {
					tb.ExtendSession(rapid.SampledFrom(ids).Draw(rt, "id"), holder.Draw(rt, "holder"), now)
				}
			},
			"acquire": func(rt *rapid.T) {
				h := holder.Draw(rt, "holder")
				var o Options
				if len(ids) > 0 && rapid.Bool().Draw(rt, "under") {
					o.Session = rapid.SampledFrom(ids).Draw(rt, "id")
				}
				ks := rapid.SliceOfNDistinct(key, 1, 3, func(k string) string { return k }).Draw(rt, "keys")
				ls, err := tb.AcquireAll(ks, h, now, Duration(rapid.IntRange(1, 6).Draw(rt, "ttl")), o)
				if err == nil && o.Session != 0 {
					for _, l := range ls {
						owned[o.Session] = append(owned[o.Session], grant{l.Key, l.Token})
						sessOf[l.Token] = o.Session
					}
				}
			},
			"wait": func(rt *rapid.T) {
				h := holder.Draw(rt, "holder")
				var o Options
				if len(ids) > 0 && rapid.Bool().Draw(rt, "under") {
					o.Session = rapid.SampledFrom(ids).Draw(rt, "id")
				}
				k := key.Draw(rt, "key")
				l, granted, err := tb.WaitWith(k, h, now, 3, now+Time(rapid.IntRange(0, 8).Draw(rt, "patience")), WaitLimits{}, o)
				if err == nil && granted && o.Session != 0 {
					owned[o.Session] = append(owned[o.Session], grant{l.Key, l.Token})
					sessOf[l.Token] = o.Session
				}
			},
			"release": func(rt *rapid.T) { tb.Release(key.Draw(rt, "key"), holder.Draw(rt, "holder"), now) },
			"close": func(rt *rapid.T) {
				if len(ids) > 0 {
					tb.CloseSession(rapid.SampledFrom(ids).Draw(rt, "id"), holder.Draw(rt, "holder"), now)
				}
			},
			"": func(rt *rapid.T) {
				checkOwners(rt, tb)
				for _, s := range expiredSessions {
					for _, g := range owned[s] {
						if tb.IsValidToken(g.key, g.token) {
							rt.Fatalf("session %d expired, but its lock %s/%d is still the record", s, g.key, g.token)
						}
					}
				}
				expiredSessions = expiredSessions[:0]
				for _, id := range ids {
					_, alive := tb.GetSession(id, now)
					for _, k := range tb.SessionKeys(id) {
						if _, live := tb.Get(k, now); live != alive {
							rt.Fatalf("session %d alive %v at %d, its lock %s live %v", id, alive, now, k, live)
						}
					}
				}
			},
		})
	})
}
