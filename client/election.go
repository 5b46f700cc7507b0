package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Leader election on one lock key, after etcd's concurrency.Election.
// Candidates queue on the key in the server's FIFO, so when the leader
// resigns or is lost exactly the next candidate is woken (no herd), and
// every leader is granted a new fencing token, larger than any before it.
//
// That token is what client-go's leaderelection lacks (its docs say it
// does not fence): a leader that was paused past its lease, and does not
// know it was replaced, still has its old token, and a resource that
// checks tokens (package fence) refuses it once the new leader has
// written. Send Leader.Token with every write the leader makes.

// Leader is an elected candidate: a lease on the election's key that
// keeps itself alive. Its Context is cancelled when leadership is lost,
// at the latest 0.89×TTL after the last confirmed extension was sent,
// which leaves StopGrace (TTL/10) to stop before StopBy, and TTL/100 more
// before another candidate can be elected.
type Leader struct {
	lease *Lease
}

// Campaign waits, in FIFO order among the candidates, until candidate
// is elected leader of the election name (a lock key), or ctx ends: a
// candidate that gives up leaves the queue. Options are the lease's
// (WithTTL; WithHolder is candidate). A candidate already leading is
// re-elected under a new token.
func (c *Client) Campaign(ctx context.Context, name, candidate string, opts ...LeaseOption) (*Leader, error) {
	if candidate == "" {
		return nil, invalidf("holder", "a candidate needs a name")
	}
	l, err := c.Acquire(ctx, name, append(opts, WithHolder(candidate))...)
	if err != nil {
		return nil, err
	}
	return &Leader{lease: l}, nil
}

// Name is the election's key.
func (l *Leader) Name() string { return l.lease.Key() }

// Candidate is the leader's name.
func (l *Leader) Candidate() string { return l.lease.Holder() }

// Token is the fencing token of this leadership: send it with every write
// to a fenced resource.
func (l *Leader) Token() uint64 { return l.lease.Token() }

// Context is cancelled when leadership ends; context.Cause says why
// (ErrReleased after Resign, else a *LostError).
func (l *Leader) Context() context.Context { return l.lease.Context() }

// Done is closed when leadership ends.
func (l *Leader) Done() <-chan struct{} { return l.lease.Done() }

// Err is nil while leading, then why it ended.
func (l *Leader) Err() error { return l.lease.Err() }

// Resign gives leadership up: the next candidate in line is elected in the
// same committed step.
func (l *Leader) Resign(ctx context.Context) error { return l.lease.Release(ctx) }

// Leadership is who leads an election: Candidate "" when nobody does.
type Leadership struct {
	Candidate string
	Token     uint64
	Revision  Revision      // of the change that made it so
	At        time.Duration // its cluster time (Event.At); 0 for the first report
}

// Observer reports an election's leader as it changes (Observe).
type Observer struct {
	ch   chan Leadership
	done chan struct{}
	stop context.CancelFunc

	mu  sync.Mutex
	err error
}

// Observe reports the leader of election name now, then every change: a
// hand-off shows as the old leader leaving and the new one arriving at the
// same revision index. It is built on Watch, so it goes on across faults
// and nodes; when the server's history is compacted it reads the present
// again. Leaders is closed when ctx ends, Close is called or a refusal
// ends it (Err).
func (c *Client) Observe(ctx context.Context, name string) *Observer {
	ctx, cancel := context.WithCancel(ctx)
	o := &Observer{ch: make(chan Leadership), done: make(chan struct{}), stop: cancel}
	go o.run(ctx, c, name)
	return o
}

// Leaders is the channel of leaderships.
func (o *Observer) Leaders() <-chan Leadership { return o.ch }

// Err says why Leaders was closed: nil when ctx ended or after Close.
func (o *Observer) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Close stops the observer and waits for its goroutine.
func (o *Observer) Close() {
	o.stop()
	<-o.done
}

func (o *Observer) run(ctx context.Context, c *Client, name string) {
	defer close(o.done)
	defer close(o.ch)
	defer o.stop()
	send := func(l Leadership) bool {
		select {
		case o.ch <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		locks, rev, err := c.watchList(ctx, name, true)
		if err != nil {
			if ctx.Err() == nil {
				o.mu.Lock()
				o.err = err
				o.mu.Unlock()
			}
			return
		}
		now := Leadership{Revision: rev}
		if len(locks) == 1 {
			now.Candidate, now.Token = locks[0].Holder, locks[0].Token
		}
		if !send(now) {
			return
		}
		w := c.Watch(ctx, name, WatchKey(), WatchAfter(rev))
		for ev := range w.Events() {
			l := Leadership{Revision: ev.Revision, At: ev.At}
			switch ev.Type {
			case "granted":
				l.Candidate, l.Token = ev.Holder, ev.Token
			case "released", "expired":
			default:
				continue // candidates queueing and leaving
			}
			if !send(l) {
				break
			}
		}
		w.Close()
		err = w.Err()
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, ErrCompacted) {
			o.mu.Lock()
			o.err = err
			o.mu.Unlock()
			return
		}
	}
}
