package locktable

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fencelock/fencelock/internal/locktable/snapshot"
)

// Section 2, lock-delays (written when any is set):
//
//	uvarint n | each lease that takes one, by key: string key | varint delay |
//	uvarint n | each waiter that asks for one, by key: string key | string holder | varint delay |
//	uvarint n | each key in its delay, by key: string key | varint until

func encodeLockDelays(t *Table, b []byte) []byte {
	held := slices.SortedFunc(maps.Keys(t.delays), func(a, b *entry) int { return strings.Compare(a.key, b.key) })
	type wd struct {
		key, holder string
		delay       Duration
	}
	var ws []wd
	for k, q := range t.waiting {
		for _, w := range q.waiters {
			if w.delay > 0 {
				ws = append(ws, wd{k, w.holder, w.delay})
			}
		}
	}
	slices.SortFunc(ws, func(a, b wd) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.holder, b.holder)
	})
	delayed := slices.Sorted(maps.Keys(t.delayed))
	if len(held) == 0 && len(ws) == 0 && len(delayed) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(held)))
	for _, e := range held {
		b = snapshot.AppendString(b, e.key)
		b = binary.AppendVarint(b, int64(t.delays[e]))
	}
	b = binary.AppendUvarint(b, uint64(len(ws)))
	for _, w := range ws {
		b = snapshot.AppendString(b, w.key)
		b = snapshot.AppendString(b, w.holder)
		b = binary.AppendVarint(b, int64(w.delay))
	}
	b = binary.AppendUvarint(b, uint64(len(delayed)))
	for _, k := range delayed {
		b = snapshot.AppendString(b, k)
		b = binary.AppendVarint(b, int64(t.delayed[k]))
	}
	return b
}

func decodeLockDelays(t *Table, p []byte) error {
	d := snapshot.NewPayload(p)
	okDelay := func(v Duration) bool { return v > 0 && v <= MaxLockDelay }
	n := d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len()) {
		return fmt.Errorf("%d delays", n)
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key, delay := d.String(MaxKeyLen), Duration(d.Varint())
		if d.Err() != nil {
			break
		}
		e := t.keys.get(key)
		if e == nil || !e.held() || !okDelay(delay) || t.delays[e] != 0 {
			return fmt.Errorf("bad lock-delay on %q", key)
		}
		t.setDelay(e, delay)
	}
	n = d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len()) {
		return fmt.Errorf("%d waiter delays", n)
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key, holder, delay := d.String(MaxKeyLen), d.String(MaxHolderLen), Duration(d.Varint())
		if d.Err() != nil {
			break
		}
		w := t.findWaiter(key, holder)
		if w == nil || w.delay != 0 || !okDelay(delay) {
			return fmt.Errorf("bad waiter lock-delay on %q", key)
		}
		w.delay = delay
	}
	n = d.Uvarint()
	if d.Err() == nil && n > uint64(d.Len()) {
		return fmt.Errorf("%d keys in delay", n)
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		key, until := d.String(MaxKeyLen), Time(d.Varint())
		if d.Err() != nil {
			break
		}
		if validateKey(key) != nil || t.delayed[key] != 0 {
			return fmt.Errorf("bad delay on %q", key)
		}
		if t.delayed == nil {
			t.delayed = map[string]Time{}
		}
		t.delayed[key] = until
	}
	return d.End()
}
