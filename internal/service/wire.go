package service

import (
	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Answers as the API carries them: the table's leases, waiters and
// durations in the api package's types, measured at a cluster time.

// ms is d in whole milliseconds.
func ms(d locktable.Duration) int64 { return int64(d / locktable.Millisecond) }

// wireLease is a lease as the API carries it, measured at now.
func wireLease(l locktable.Lease, now locktable.Time) api.Lease {
	out := api.Lease{Key: l.Key, Holder: l.Holder, Token: l.Token, TTLMs: ms(l.TTL), RemainingMs: ms(l.Remaining(now))}
	out.Kind, out.Permits, out.Mode = wireKind(l)
	out.Slot, out.Session = l.Slot, l.Session
	return out
}

// wireWaiter is a queued waiter as the API carries it, measured at now.
func wireWaiter(w locktable.Queued, kind locktable.Kind, now locktable.Time) api.Waiter {
	out := api.Waiter{Holder: w.Holder, WaitedMs: ms(locktable.Duration(now - w.Since)), LeftMs: ms(locktable.Duration(max(0, w.Deadline-now))), Session: w.Session}
	if kind == locktable.ReadWrite {
		out.Mode = api.ModeRead
		if w.Write {
			out.Mode = api.ModeWrite
		}
	}
	return out
}

// withQueue adds to l the number of waiters on its key and the head of
// the queue, when anyone waits.
func withQueue(l api.Lease, kind locktable.Kind, head []locktable.Queued, n int, now locktable.Time) api.Lease {
	l.Waiting = n
	if len(head) > 0 {
		w := wireWaiter(head[0], kind, now)
		l.NextWaiter = &w
	}
	return l
}

// wireKind is the kind fields of l as the API carries them.
func wireKind(l locktable.Lease) (kind string, permits int, mode string) {
	switch l.Kind {
	case locktable.Semaphore:
		return api.KindSemaphore, l.Permits, ""
	case locktable.ReadWrite:
		if l.Write {
			return api.KindRWLock, 0, api.ModeWrite
		}
		return api.KindRWLock, 0, api.ModeRead
	}
	return "", 0, ""
}
