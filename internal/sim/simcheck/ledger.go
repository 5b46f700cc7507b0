package simcheck

import (
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// ledger audits the committed log with a model of its own, not the state
// machine's code: it reads each entry's command, what the state machine
// answered and the events it reported, and holds them to the rules of
// DESIGN.md §1 and §3 as it keeps them itself —
//
//   - cluster time never goes back from one event to the next (a
//     command's own stamp may: two proposals stamped in one order can
//     commit in the other, and the state machine applies the later
//     time);
//   - every token granted is above every token granted before it and
//     above every token floor committed (tokens are never reused, not
//     after a restart, a leader change or a restored snapshot);
//   - an exclusive key is granted to another holder only once its lease
//     is over by the ledger's own account: released, expired, or past
//     its expiry at the grant's cluster time (an extension, a session's
//     extension, counts from what the state machine answered, but only
//     for the live grant it names);
//   - an exclusive lease (not a session's) that asked for a lock-delay
//     and was not released keeps its key from every other holder until
//     its end plus the delay;
//   - a release ends the live grant of the holder that asked (a session's
//     close, its own locks), never another's, never an expired one;
//   - an expiry ends a grant whose lease is over;
//   - an acquire, release, renewal or session change sent again under
//     its request id is not applied again.
//
// Semaphores and read/write locks are held to the token rule only; the
// clients' own check (no more holders acting than permits) covers them.
type ledger struct {
	h         *History
	lastNow   locktable.Time
	lastToken uint64
	floor     uint64
	keys      map[string]*ledgerLease
	sessions  map[string]locktable.Time     // a session holder's expiry
	seen      map[string]bool               // holder|request id of every command applied
	delays    map[string]locktable.Duration // key|holder: the lock-delay its last acquire asked for
	cmd       fsm.Command                   // the entry being applied
	index     uint64
}

type ledgerLease struct {
	holder  string
	token   uint64
	expiry  locktable.Time
	session bool // held under a session: its expiry is the session's
	over    bool
	delay   locktable.Duration // its lock-delay (0: none)
	release bool               // over by a release (no lock-delay follows)
}

func newLedger(h *History) *ledger {
	return &ledger{h: h, keys: map[string]*ledgerLease{}, sessions: map[string]locktable.Time{}, seen: map[string]bool{}, delays: map[string]locktable.Duration{}}
}

// shared says whether key is a semaphore's or a read/write lock's.
func shared(key string) bool {
	for _, p := range []string{"sem/", "rw/", "psem/", "prw/"} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func (l *ledger) fail(format string, args ...any) {
	l.h.r.Violate("w", "ledger, entry %d (%s): %s", l.index, l.cmd.Op, fmt.Sprintf(format, args...))
}

// begin is told an entry's command before the state machine applies it.
func (l *ledger) begin(index uint64, cmd fsm.Command) {
	l.index, l.cmd = index, cmd
	switch cmd.Op {
	case fsm.OpTokenFloor:
		l.floor = max(l.floor, cmd.Token)
	case fsm.OpAcquire, fsm.OpWait:
		if cmd.Session == 0 {
			l.delays[cmd.Key+"|"+cmd.Holder] = cmd.LockDelay
		}
	}
}

// event is told each event the state machine reported for the entry.
func (l *ledger) event(ev locktable.Event) {
	if ev.At != 0 {
		if ev.At < l.lastNow {
			l.fail("%s %s of %s at cluster time %d, before %d of an earlier event", ev.Kind, ev.Key, ev.Holder, ev.At, l.lastNow)
		}
		l.lastNow = max(l.lastNow, ev.At)
	}
	switch ev.Kind {
	case locktable.EventGranted:
		if ev.Token <= l.lastToken || ev.Token <= l.floor {
			l.fail("granted %s to %s with token %d, not above token %d granted before and the floor %d", ev.Key, ev.Holder, ev.Token, l.lastToken, l.floor)
		}
		l.lastToken = max(l.lastToken, ev.Token)
		if shared(ev.Key) {
			return
		}
		if k := l.keys[ev.Key]; k != nil && !k.over && k.holder != ev.Holder && k.expiry > ev.At {
			l.fail("granted %s to %s (token %d) while %s's lease (token %d) was alive until %d, at %d", ev.Key, ev.Holder, ev.Token, k.holder, k.token, k.expiry, ev.At)
		}
		if k := l.keys[ev.Key]; k != nil && k.delay > 0 && !k.release && !k.session && k.holder != ev.Holder && ev.At < k.expiry+locktable.Time(k.delay) {
			l.fail("granted %s to %s (token %d) at %d, in the lock-delay of %s's lease (token %d), until %d", ev.Key, ev.Holder, ev.Token, ev.At, k.holder, k.token, k.expiry+locktable.Time(k.delay))
		}
		_, sess := l.sessions[ev.Holder]
		k := &ledgerLease{holder: ev.Holder, token: ev.Token, expiry: ev.Expiry, session: sess}
		if !sess {
			k.delay = l.delays[ev.Key+"|"+ev.Holder]
		}
		if sess {
			k.expiry = max(k.expiry, l.sessions[ev.Holder])
		}
		l.keys[ev.Key] = k
	case locktable.EventReleased:
		if shared(ev.Key) {
			return
		}
		k := l.keys[ev.Key]
		switch {
		case k == nil || k.over || k.holder != ev.Holder || k.token != ev.Token:
			l.fail("released %s of %s (token %d), which the ledger does not have as the key's live grant", ev.Key, ev.Holder, ev.Token)
		case l.cmd.Op == fsm.OpRelease && l.cmd.Holder != ev.Holder:
			l.fail("a release by %s released %s of %s (token %d)", l.cmd.Holder, ev.Key, ev.Holder, ev.Token)
		case k.expiry <= ev.At && !k.session:
			l.fail("released %s of %s (token %d) at %d, after its lease ended at %d", ev.Key, ev.Holder, ev.Token, ev.At, k.expiry)
		}
		if k != nil {
			k.over, k.release = true, true
		}
	case locktable.EventExpired:
		if shared(ev.Key) {
			return
		}
		k := l.keys[ev.Key]
		switch {
		case k == nil || k.over || k.holder != ev.Holder || k.token != ev.Token:
			l.fail("expired %s of %s (token %d), which the ledger does not have as the key's live grant", ev.Key, ev.Holder, ev.Token)
		case !k.session && k.expiry > ev.At:
			l.fail("expired %s of %s (token %d) at %d, before its lease's end at %d", ev.Key, ev.Holder, ev.Token, ev.At, k.expiry)
		}
		if k != nil {
			k.over = true
		}
	}
}

// end is told what the state machine answered the entry's command: the
// extensions it made, and the sessions' expiries.
func (l *ledger) end(r *fsm.Result) {
	cmd := l.cmd
	switch cmd.Op {
	case fsm.OpAcquire, fsm.OpRelease, fsm.OpRenew, fsm.OpSessionOpen, fsm.OpSessionClose:
		// (A wait, of one key or several, is asked again under its id
		// while it waits; an open whose session has ended runs again.)
		if cmd.RequestID == "" {
			break
		}
		id := cmd.Holder + "|" + cmd.Key + "|" + cmd.RequestID
		ended := cmd.Op == fsm.OpSessionOpen && l.sessions[cmd.Holder] <= r.Now
		if l.seen[id] && !r.Duplicate && !ended {
			l.fail("request %s of %s applied a second time", cmd.RequestID, cmd.Holder)
		}
		if r.Err == nil {
			l.seen[id] = true // (a refused one changed nothing, and is not remembered)
		}
	}
	if r.Duplicate || r.Err != nil {
		return
	}
	switch cmd.Op {
	case fsm.OpExtend:
		l.extended(cmd.Key, cmd.Holder, cmd.Token, r.Lease.Expiry)
	case fsm.OpExtendBatch:
		for _, b := range r.Batch {
			if b.Err == nil {
				l.extended(b.Key, cmd.Holder, b.Token, b.Lease.Expiry)
			}
		}
	case fsm.OpSessionClose:
		l.sessions[cmd.Holder] = 0
	case fsm.OpSessionOpen, fsm.OpSessionExtend:
		l.sessions[cmd.Holder] = r.Session.Expiry
		for _, k := range l.keys {
			if k.session && k.holder == cmd.Holder && !k.over {
				k.expiry = max(k.expiry, r.Session.Expiry)
			}
		}
	}
}

// extended records an extension of key's grant to holder with token,
// which must be the key's live grant.
func (l *ledger) extended(key, holder string, token uint64, expiry locktable.Time) {
	if shared(key) {
		return
	}
	k := l.keys[key]
	switch {
	case k == nil || k.over || k.holder != holder || k.token != token:
		l.fail("extended %s of %s (token %d), which the ledger does not have as the key's live grant", key, holder, token)
	case k.expiry <= l.cmd.Now && !k.session:
		l.fail("extended %s of %s (token %d) at %d, after its lease ended at %d", key, holder, token, l.cmd.Now, k.expiry)
	default:
		k.expiry = max(k.expiry, expiry)
	}
}
