package fsm

import "github.com/fencelock/fencelock/internal/locktable"

// SessionLocks is a live session and the keys of its locks.
type SessionLocks struct {
	Session locktable.Session
	Keys    []string // sorted, at most the max asked for; Session.Locks counts them all
}

// SessionsOf reads, under one lock, which live session each lease of keys
// is held under at now (ids[i] for keys[i], 0 for none), those sessions
// each once in the order its first key comes, at most maxSessions of them
// with at most maxKeys keys each, and how many sessions are open in all.
// A dashboard calls it with the keys of the page Overview answered: a
// lease released in between is simply not found.
func (f *FSM) SessionsOf(keys []string, now locktable.Time, maxSessions, maxKeys int) (ids []uint64, sessions []SessionLocks, open int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ids = make([]uint64, len(keys))
	seen := map[uint64]bool{}
	for i, k := range keys {
		id, ok := f.table.LeaseSession(k, now)
		if !ok {
			continue
		}
		ids[i] = id
		if seen[id] || len(sessions) >= maxSessions {
			continue
		}
		seen[id] = true
		s, ok := f.table.GetSession(id, now)
		if !ok {
			continue
		}
		held := f.table.SessionKeys(id)
		if len(held) > maxKeys {
			held = held[:maxKeys]
		}
		sessions = append(sessions, SessionLocks{Session: s, Keys: held})
	}
	return ids, sessions, f.table.SessionCount()
}
