package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// The flags of lock and acquire that ask for a semaphore permit or a
// read/write hold instead of an exclusive lease (docs/PRIMITIVES.md).
type sharedFlags struct {
	permits *int
	read    *bool
	write   *bool
}

// sharedUsage is the paragraph lock and acquire add to their help.
const sharedUsage = `
With --n N, KEY is a semaphore of N permits and one of them is asked for
(each permit has its own token; every holder must name the same N while
the semaphore has holders or waiters). With --read or --write, KEY is a
read/write lock: readers share it, a writer holds it alone, and a reader
queues behind a writer that asked first. Asking for a key as another kind
than it is fails with exit status 1 (kind_mismatch). lock adds
FENCELOCK_SLOT (the permit, 1..N) or FENCELOCK_MODE (read, write) to CMD's
environment: a resource fences each slot, or its read and write paths.
`

func addSharedFlags(f *flags) *sharedFlags {
	permits := new(int)
	f.Var((*permitsValue)(permits), "n", "take one of `N` permits of the semaphore KEY (1 to 1000)")
	return &sharedFlags{
		permits: permits,
		read:    f.Bool("read", false, "take a read hold of the read/write lock KEY"),
		write:   f.Bool("write", false, "take the write hold of the read/write lock KEY"),
	}
}

// options are the lease options the flags ask for, or a usage error.
func (s *sharedFlags) options() ([]client.LeaseOption, error) {
	n := 0
	for _, set := range []bool{*s.permits != 0, *s.read, *s.write} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, usageError("--n, --read and --write exclude each other")
	case *s.permits < 0 || *s.permits > api.MaxPermits:
		return nil, usageError("--n must be between 1 and %d, not %d", api.MaxPermits, *s.permits)
	case *s.permits > 0:
		return []client.LeaseOption{client.WithPermits(*s.permits)}, nil
	case *s.read:
		return []client.LeaseOption{client.WithRead()}, nil
	case *s.write:
		return []client.LeaseOption{client.WithWrite()}, nil
	}
	return nil, nil
}

// grantOptions puts what the flags ask for into g, for acquire of keys
// keys: a semaphore permit or a read/write hold is one key's, and never
// under a session or with a lock-delay.
func (s *sharedFlags) grantOptions(g *client.GrantOptions, keys int) error {
	opts, err := s.options()
	if err != nil || opts == nil {
		return err
	}
	switch {
	case keys > 1:
		return usageError("--n, --read and --write take one KEY")
	case g.Session != 0 || g.LockDelay != 0:
		return usageError("--n, --read and --write do not go with --session or --lock-delay")
	}
	switch {
	case *s.permits > 0:
		g.Permits = *s.permits
	case *s.read:
		g.Mode = api.ModeRead
	default:
		g.Mode = api.ModeWrite
	}
	return nil
}

// sharedEnv is what lock adds to CMD's environment for a semaphore permit
// (FENCELOCK_PERMITS, FENCELOCK_SLOT: fence per slot) or a read/write hold
// (FENCELOCK_MODE: read or write, the fence path to use).
func sharedEnv(lk client.Lock) []string {
	switch lk.Kind {
	case api.KindSemaphore:
		return []string{"FENCELOCK_PERMITS=" + strconv.Itoa(lk.Permits), "FENCELOCK_SLOT=" + strconv.Itoa(lk.Slot)}
	case api.KindRWLock:
		return []string{"FENCELOCK_MODE=" + lk.Mode}
	}
	return nil
}

// kindColumn is the KIND column of a multi-holder lease in list and get:
// semaphore/N, rwlock/read or rwlock/write ("exclusive" otherwise).
func kindColumn(l client.Lock) string {
	switch l.Kind {
	case api.KindSemaphore:
		return l.Kind + "/" + strconv.Itoa(l.Permits)
	case api.KindRWLock:
		return l.Kind + "/" + l.Mode
	}
	return api.KindExclusive
}

// permitsValue is --n: a number of permits. flock's users type -n for
// "do not wait", and would see "invalid value" for their KEY: the error
// names the flag they meant.
type permitsValue int

func (p *permitsValue) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("--n N is the number of a semaphore's permits; for flock's -n (do not wait), use --try")
	}
	*p = permitsValue(n)
	return nil
}

func (p *permitsValue) String() string {
	if p == nil {
		return "0"
	}
	return strconv.Itoa(int(*p))
}
