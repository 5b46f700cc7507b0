package locktable

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fencelock/fencelock/internal/plant"
)

// Lock-delay (Chubby's). A grant may ask that, should its lease expire
// (not be released), its key be granted to nobody, waiters included, until
// the lease's end plus the delay. It is a mitigation for resources that
// cannot check a fencing token: an old holder that has not yet noticed its
// loss gets that long to stop before anyone else is granted the key. Only
// the token check at the resource makes a late write harmless.

// MaxLockDelay bounds Options.LockDelay (Consul's bound).
const MaxLockDelay = 60 * Second

// setDelay records the lock-delay e's current lease takes (0: none).
func (t *Table) setDelay(e *entry, d Duration) {
	if d > 0 {
		if t.delays == nil {
			t.delays = map[*entry]Duration{}
		}
		t.delays[e] = d
		return
	}
	if t.delays != nil {
		delete(t.delays, e)
	}
}

// startDelay starts e's lock-delay, if its lease takes one, as the lease
// that ended at end expires at now.
func (t *Table) startDelay(e *entry, end, now Time) {
	d := t.delays[e]
	if d <= 0 {
		return
	}
	until := maxTime
	if end <= maxTime-Time(d) {
		until = end + Time(d)
	}
	if until <= now {
		return
	}
	if t.delayed == nil {
		t.delayed = map[string]Time{}
	}
	t.delayed[e.key] = until
}

// inDelay reports whether key is in its lock-delay at now.
func (t *Table) inDelay(key string, now Time) bool {
	if plant.On("lock-delay-ignored") {
		return false
	}
	until, ok := t.delayed[key]
	return ok && now < until
}

// LockDelay reports until when key is granted to nobody, if it is in its
// lock-delay at now.
func (t *Table) LockDelay(key string, now Time) (Time, bool) {
	if !t.inDelay(key, now) {
		return 0, false
	}
	return t.delayed[key], true
}

// Delayed is a key in its lock-delay: granted to nobody before Until.
type Delayed struct {
	Key   string
	Until Time
}

// DelayedKeys are the keys starting with prefix that are in their
// lock-delay at now, in key order, at most limit of them (0: all), and
// whether more were left out.
func (t *Table) DelayedKeys(prefix string, now Time, limit int) ([]Delayed, bool) {
	var out []Delayed
	for k, until := range t.delayed {
		if now < until && strings.HasPrefix(k, prefix) {
			out = append(out, Delayed{Key: k, Until: until})
		}
	}
	slices.SortFunc(out, func(a, b Delayed) int { return strings.Compare(a.Key, b.Key) })
	if limit > 0 && len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// endDelays ends the lock-delays that are over at now, in key order, and
// hands each key to its head waiter.
func (t *Table) endDelays(now Time) {
	if len(t.delayed) == 0 {
		return
	}
	var keys []string
	for k, until := range t.delayed {
		if until <= now {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		delete(t.delayed, k)
		if e := t.keys.get(k); e != nil && !e.held() {
			t.handOff(e, now)
			t.tidy(e)
		}
	}
}

// LockDelayError refuses a grant of a key in its lock-delay. It matches
// ErrLockDelay with errors.Is.
type LockDelayError struct {
	Key   string
	Until Time
}

func (e *LockDelayError) Error() string {
	return fmt.Sprintf("locktable: %q is in its lock-delay until %d", e.Key, e.Until)
}

func (e *LockDelayError) Unwrap() error { return ErrLockDelay }
