package locktable

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// mhModel is a naive reference for semaphores and read/write locks, with
// plain exclusive leases beside them (no exclusive queues) so that kind
// mismatches in both directions are exercised: lists and maps, no heap,
// no index, every rule spelt out.
type mhModel struct {
	keys  map[string]*mhKey
	excl  map[string]Lease
	last  uint64
	evs   []string
	queue int
}

type mhKey struct {
	kind    Kind
	permits int
	holders []Lease // token order; Lease.Write marks a writer
	waiters []mhWait
}

type mhWait struct {
	holder   string
	write    bool
	ttl      Duration
	since    Time
	deadline Time
}

func (m *mhModel) ev(kind, key, holder string, tok uint64) {
	m.evs = append(m.evs, fmt.Sprintf("%s %s %s %d", kind, key, holder, tok))
}

func (k *mhKey) fits(write bool) bool {
	if k.kind == Semaphore {
		return len(k.holders) < k.permits
	}
	if write {
		return len(k.holders) == 0
	}
	for _, h := range k.holders {
		if h.Write {
			return false
		}
	}
	return true
}

func (m *mhModel) grant(name string, k *mhKey, holder string, write bool, now Time, ttl Duration) Lease {
	return m.grantSlot(name, k, holder, write, now, ttl, k.lowestFree())
}

// lowestFree: the first permit, counting from 1, that no holder has.
func (k *mhKey) lowestFree() int {
	if k.kind != Semaphore {
		return 0
	}
	for s := 1; ; s++ {
		taken := false
		for _, h := range k.holders {
			taken = taken || h.Slot == s
		}
		if !taken {
			return s
		}
	}
}

func (m *mhModel) grantSlot(name string, k *mhKey, holder string, write bool, now Time, ttl Duration, slot int) Lease {
	m.last++
	l := Lease{Key: name, Holder: holder, Token: m.last, Granted: now, Expiry: now + Time(ttl), TTL: ttl, Kind: k.kind, Write: write, Slot: slot}
	if k.kind == Semaphore {
		l.Permits = k.permits
	}
	k.holders = append(k.holders, l)
	var ws []mhWait
	for _, w := range k.waiters {
		if w.holder != holder {
			ws = append(ws, w)
		} else {
			m.queue--
		}
	}
	k.waiters = ws
	m.ev("granted", name, holder, l.Token)
	return l
}

func (m *mhModel) handOff(name string, k *mhKey, now Time) {
	var ws []mhWait
	for _, w := range k.waiters {
		if now >= w.deadline {
			m.ev("wait-dropped", name, w.holder, 0)
			m.queue--
		} else {
			ws = append(ws, w)
		}
	}
	k.waiters = ws
	for len(k.waiters) > 0 && k.fits(k.waiters[0].write) {
		w := k.waiters[0]
		m.grant(name, k, w.holder, w.write, now, w.ttl)
	}
}

func (m *mhModel) tidy(name string) {
	if k := m.keys[name]; k != nil && len(k.holders) == 0 && len(k.waiters) == 0 {
		delete(m.keys, name)
	}
}

func (m *mhModel) settle(name string, now Time) {
	k := m.keys[name]
	if k == nil {
		return
	}
	var hs []Lease
	expired := false
	for _, h := range k.holders {
		if now >= h.Expiry {
			m.ev("expired", name, h.Holder, h.Token)
			expired = true
		} else {
			hs = append(hs, h)
		}
	}
	k.holders = hs
	if expired || len(k.waiters) > 0 {
		m.handOff(name, k, now)
	}
	m.tidy(name)
}

func (m *mhModel) holderAt(k *mhKey, holder string) int {
	for i, h := range k.holders {
		if h.Holder == holder {
			return i
		}
	}
	return -1
}

// acquire answers granted, queued, or the refusal's sentinel.
func (m *mhModel) acquire(name, holder string, s Shared, now Time, ttl Duration, deadline Time, lim WaitLimits) (uint64, bool, error) {
	if l, ok := m.excl[name]; ok {
		if now < l.Expiry {
			return 0, false, ErrKindMismatch
		}
		m.ev("expired", name, l.Holder, l.Token)
		delete(m.excl, name)
	}
	m.settle(name, now)
	k := m.keys[name]
	if k != nil && (k.kind != s.Kind || (k.kind == Semaphore && k.permits != s.Permits)) {
		return 0, false, ErrKindMismatch
	}
	if k == nil {
		k = &mhKey{kind: s.Kind, permits: s.Permits}
		m.keys[name] = k
	}
	if i := m.holderAt(k, holder); i >= 0 {
		if k.kind == ReadWrite && s.Write && !k.holders[i].Write && len(k.holders) > 1 {
			return 0, false, ErrHeld
		}
		slot := k.holders[i].Slot
		k.holders = append(k.holders[:i:i], k.holders[i+1:]...)
		l := m.grantSlot(name, k, holder, s.Write, now, ttl, slot)
		m.handOff(name, k, now)
		return l.Token, true, nil
	}
	if len(k.waiters) == 0 && k.fits(s.Write) {
		return m.grant(name, k, holder, s.Write, now, ttl).Token, true, nil
	}
	if now >= deadline {
		m.tidy(name)
		return 0, false, ErrHeld
	}
	for i := range k.waiters {
		if k.waiters[i].holder == holder {
			k.waiters[i].ttl, k.waiters[i].deadline, k.waiters[i].write = ttl, deadline, s.Write
			m.handOff(name, k, now)
			if j := m.holderAt(k, holder); j >= 0 {
				return k.holders[j].Token, true, nil
			}
			return 0, false, nil
		}
	}
	if (lim.PerKey > 0 && len(k.waiters) >= lim.PerKey) || (lim.Total > 0 && m.queue >= lim.Total) {
		m.tidy(name)
		return 0, false, ErrTooManyWaiters
	}
	k.waiters = append(k.waiters, mhWait{holder: holder, write: s.Write, ttl: ttl, since: now, deadline: deadline})
	m.queue++
	m.ev("wait-joined", name, holder, 0)
	return 0, false, nil
}

func (m *mhModel) acquireExclusive(name, holder string, now Time, ttl Duration) (uint64, error) {
	m.settle(name, now)
	if m.keys[name] != nil {
		return 0, ErrKindMismatch
	}
	if l, ok := m.excl[name]; ok && now < l.Expiry && l.Holder != holder {
		return 0, ErrHeld
	}
	m.last++
	m.excl[name] = Lease{Key: name, Holder: holder, Token: m.last, Granted: now, Expiry: now + Time(ttl), TTL: ttl}
	m.ev("granted", name, holder, m.last)
	return m.last, nil
}

func (m *mhModel) release(name, holder string, token uint64, now Time) bool {
	if l, ok := m.excl[name]; ok {
		if now < l.Expiry && l.Holder == holder && (token == 0 || token == l.Token) {
			m.ev("released", name, holder, l.Token)
			delete(m.excl, name)
			return true
		}
		return false
	}
	m.settle(name, now)
	k := m.keys[name]
	if k == nil {
		return false
	}
	i := m.holderAt(k, holder)
	if i < 0 || (token != 0 && k.holders[i].Token != token) {
		return false
	}
	m.ev("released", name, holder, k.holders[i].Token)
	k.holders = append(k.holders[:i:i], k.holders[i+1:]...)
	m.handOff(name, k, now)
	m.tidy(name)
	return true
}

func (m *mhModel) extend(name, holder string, token uint64, now Time, ttl Duration) bool {
	if l, ok := m.excl[name]; ok {
		if now < l.Expiry && l.Holder == holder && token == l.Token {
			l.Expiry, l.TTL = now+Time(ttl), ttl
			m.excl[name] = l
			return true
		}
		return false
	}
	m.settle(name, now)
	k := m.keys[name]
	if k == nil {
		return false
	}
	i := m.holderAt(k, holder)
	if i < 0 || k.holders[i].Token != token {
		return false
	}
	k.holders[i].Expiry, k.holders[i].TTL = now+Time(ttl), ttl
	return true
}

func (m *mhModel) cancel(name, holder string, now Time) bool {
	m.settle(name, now)
	k := m.keys[name]
	if k == nil {
		return false
	}
	for i, w := range k.waiters {
		if w.holder == holder {
			m.ev("wait-left", name, holder, 0)
			k.waiters = append(k.waiters[:i:i], k.waiters[i+1:]...)
			m.queue--
			m.handOff(name, k, now)
			m.tidy(name)
			return true
		}
	}
	return false
}

// tick: every key with a due lease, in order of its earliest due expiry
// (then key), settles; then every key with a late waiter, in key order.
func (m *mhModel) tick(now Time) {
	type due struct {
		at  Time
		key string
	}
	var ds []due
	for name, l := range m.excl {
		if l.Expiry <= now {
			ds = append(ds, due{l.Expiry, name})
		}
	}
	for name, k := range m.keys {
		at, any := Time(0), false
		for _, h := range k.holders {
			if h.Expiry <= now && (!any || h.Expiry < at) {
				at, any = h.Expiry, true
			}
		}
		if any {
			ds = append(ds, due{at, name})
		}
	}
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].at != ds[j].at {
			return ds[i].at < ds[j].at
		}
		return ds[i].key < ds[j].key
	})
	for _, d := range ds {
		if l, ok := m.excl[d.key]; ok {
			m.ev("expired", d.key, l.Holder, l.Token)
			delete(m.excl, d.key)
			continue
		}
		m.settle(d.key, now)
	}
	var late []string
	for name, k := range m.keys {
		for _, w := range k.waiters {
			if now >= w.deadline {
				late = append(late, name)
				break
			}
		}
	}
	sort.Strings(late)
	for _, name := range late {
		m.handOff(name, m.keys[name], now)
		m.tidy(name)
	}
}

var mhKeys = []string{"s", "t"}

// TestSharedMatchesModel drives the table and mhModel with the same random
// calls on a few keys that are semaphores, read/write locks or exclusive
// as they come and go, and checks answers, events and observables after
// every step, plus the invariants on the table's own answers: never more
// live holders than permits, never a writer beside another holder, every
// grant a token above all before it, no idle room while someone waits.
func TestSharedMatchesModel(t *testing.T) {
	// Four times the default checks: the interleavings that matter (a
	// reader arriving behind a queued writer, a limit reached while
	// someone waits) need a few steps in a row to come up.
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) { rapid.Check(t, sharedProperty) })
	}
}

func sharedProperty(rt *rapid.T) {
	tb, m := New(), &mhModel{keys: map[string]*mhKey{}, excl: map[string]Lease{}}
	var got []string
	var maxTok uint64
	tb.SetObserver(func(ev Event) {
		if ev.Kind == EventGranted {
			if ev.Token <= maxTok {
				rt.Fatalf("token %d granted after %d", ev.Token, maxTok)
			}
			maxTok = ev.Token
		}
		got = append(got, fmt.Sprintf("%s %s %s %d", ev.Kind, ev.Key, ev.Holder, ev.Token))
	})
	now := Time(0)
	key := rapid.SampledFrom(mhKeys)
	holder := rapid.SampledFrom(modelHolders)
	ttl := func(rt *rapid.T) Duration { return Duration(rapid.IntRange(1, 6).Draw(rt, "ttl")) }
	shared := func(rt *rapid.T) Shared {
		switch rapid.IntRange(0, 5).Draw(rt, "kind") {
		case 0:
			return Shared{Kind: Semaphore, Permits: rapid.IntRange(1, 3).Draw(rt, "permits")}
		case 1:
			return Shared{Kind: Semaphore, Permits: 2}
		case 2, 3:
			return Shared{Kind: ReadWrite}
		}
		return Shared{Kind: ReadWrite, Write: true}
	}
	lim := WaitLimits{PerKey: 3, Total: 5}
	token := func(rt *rapid.T, k, h string) uint64 {
		if l, ok := tb.LeaseOf(k, h, now); ok && rapid.Bool().Draw(rt, "current") {
			return l.Token
		}
		return uint64(rapid.IntRange(0, int(m.last)+1).Draw(rt, "token"))
	}

	rt.Repeat(map[string]func(*rapid.T){
		"advance": func(rt *rapid.T) {
			now += Time(rapid.IntRange(0, 3).Draw(rt, "dt"))
		},
		"acquire": func(rt *rapid.T) {
			k, h, s, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), shared(rt), ttl(rt)
			deadline := Time(0)
			if rapid.Bool().Draw(rt, "wait") {
				deadline = now + Time(rapid.IntRange(0, 8).Draw(rt, "patience"))
			}
			l, granted, err := tb.AcquireShared(k, h, s, now, d, deadline, lim)
			tok, mg, merr := m.acquire(k, h, s, now, d, deadline, lim)
			if granted != mg || (granted && l.Token != tok) || !errors.Is(err, merr) || (merr == nil && err != nil) {
				rt.Fatalf("acquire %s %s %+v at %d until %d: table %+v %v %v, model %d %v %v", k, h, s, now, deadline, l, granted, err, tok, mg, merr)
			}
		},
		"exclusive": func(rt *rapid.T) {
			k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
			l, err := tb.Acquire(k, h, now, d)
			tok, merr := m.acquireExclusive(k, h, now, d)
			if !errors.Is(err, merr) || (merr == nil && (err != nil || l.Token != tok)) {
				rt.Fatalf("exclusive %s %s at %d: table %+v %v, model %d %v", k, h, now, l, err, tok, merr)
			}
		},
		"release": func(rt *rapid.T) {
			k, h := key.Draw(rt, "key"), holder.Draw(rt, "holder")
			tok := uint64(0)
			if rapid.Bool().Draw(rt, "by-token") {
				tok = token(rt, k, h)
			}
			var ok bool
			var err error
			if tok == 0 {
				ok, err = tb.Release(k, h, now)
			} else {
				ok, err = tb.ReleaseToken(k, h, tok, now)
			}
			if err != nil || ok != m.release(k, h, tok, now) {
				rt.Fatalf("release %s %s %d at %d: %v %v", k, h, tok, now, ok, err)
			}
		},
		"extend": func(rt *rapid.T) {
			k, h, d := key.Draw(rt, "key"), holder.Draw(rt, "holder"), ttl(rt)
			tok := token(rt, k, h)
			_, err := tb.Extend(k, h, tok, now, d)
			if ok := m.extend(k, h, tok, now, d); ok != (err == nil) {
				rt.Fatalf("extend %s %s %d at %d: table %v, model %v", k, h, tok, now, err, ok)
			}
		},
		"cancel": func(rt *rapid.T) {
			k, h := key.Draw(rt, "key"), holder.Draw(rt, "holder")
			if tb.CancelWaitAt(k, h, now) != m.cancel(k, h, now) {
				rt.Fatalf("cancel %s %s at %d differs", k, h, now)
			}
		},
		"tick": func(rt *rapid.T) {
			tb.Tick(now)
			m.tick(now)
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
			if len(m.keys) == 0 && string(b[:4]) != snapshot.MagicV2 {
				rt.Fatalf("no multi-holder key, yet magic %q", b[:4])
			}
			fresh.SetObserver(tb.observe)
			tb = fresh
		},
		"": func(rt *rapid.T) {
			checkOwners(rt, tb)
			if fmt.Sprint(got) != fmt.Sprint(m.evs) {
				rt.Fatalf("events:\n table %v\n model %v", got, m.evs)
			}
			if tb.LastToken() != m.last || tb.QueuedCount() != m.queue {
				rt.Fatalf("last %d queued %d, model %d %d", tb.LastToken(), tb.QueuedCount(), m.last, m.queue)
			}
			if tb.Len() != len(m.keys)+len(m.excl) {
				rt.Fatalf("table keeps %d keys, model %d", tb.Len(), len(m.keys)+len(m.excl))
			}
			for _, k := range mhKeys {
				checkSharedKey(rt, tb, m, k, now)
			}
			seen := map[uint64]bool{}
			for _, l := range tb.List("", now, 0) {
				if seen[l.Token] {
					rt.Fatalf("token %d listed twice", l.Token)
				}
				seen[l.Token] = true
			}
		},
	})
}

func checkSharedKey(rt *rapid.T, tb *Table, m *mhModel, k string, now Time) {
	mk := m.keys[k]
	hs := tb.Holders(k, now)
	// Invariants on the table's answer alone.
	kind, permits, exists := tb.KindOf(k)
	if exists && kind == Semaphore && len(hs) > permits {
		rt.Fatalf("%s: %d live holders of a %d-permit semaphore", k, len(hs), permits)
	}
	writers := 0
	slots := map[int]bool{}
	for _, l := range hs {
		if l.Write {
			writers++
		}
		if kind == Semaphore && (l.Slot < 1 || l.Slot > permits || slots[l.Slot]) {
			rt.Fatalf("%s: slot %d of %d twice or out of range: %+v", k, l.Slot, permits, hs)
		}
		slots[l.Slot] = true
	}
	if writers > 0 && len(hs) > 1 {
		rt.Fatalf("%s: a writer beside %d other holders: %+v", k, len(hs)-1, hs)
	}
	// Against the model.
	var want []Lease
	var wantQ []string
	if mk != nil {
		if !exists || kind != mk.kind || (kind == Semaphore && permits != mk.permits) {
			rt.Fatalf("%s: kind %s/%d %v, model %s/%d", k, kind, permits, exists, mk.kind, mk.permits)
		}
		for _, l := range mk.holders {
			if now < l.Expiry {
				want = append(want, l)
			}
		}
		for _, w := range mk.waiters {
			wantQ = append(wantQ, w.holder)
		}
		if len(mk.waiters) > 0 && mk.fits(mk.waiters[0].write) && len(mk.holders) == len(want) {
			rt.Fatalf("%s: room for the head waiter %s, yet it waits", k, mk.waiters[0].holder)
		}
	} else if l, ok := m.excl[k]; ok && now < l.Expiry {
		want = []Lease{l}
	}
	if fmt.Sprint(hs) != fmt.Sprint(want) {
		rt.Fatalf("%s holders at %d:\n table %+v\n model %+v", k, now, hs, want)
	}
	if mk != nil && fmt.Sprint(tb.Waiters(k)) != fmt.Sprint(wantQ) {
		rt.Fatalf("%s queue: table %v, model %v", k, tb.Waiters(k), wantQ)
	}
	if mk != nil {
		for _, l := range mk.holders {
			if !tb.IsValidToken(k, l.Token) || tb.Check(k, l.Token, now) != (now < l.Expiry) {
				rt.Fatalf("%s: token %d not valid as the model says", k, l.Token)
			}
		}
	}
}
