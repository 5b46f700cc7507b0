package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
)

// Revision is an event's place in the cluster's history: the same on every
// node, so a watch resumes after it on any of them (api.Revision).
type Revision = api.Revision

// Event is one change on a watched key: Type is one of api.WatchGranted,
// api.WatchReleased, api.WatchExpired, api.WatchWaitJoined and
// api.WatchWaitLeft (Reason api.WaitLeftCancelled or
// api.WaitLeftDeadline). At and Since are cluster time (see
// api.WatchEvent): the time leases are measured on, counted from when the
// cluster's clock began, so only their differences mean anything (At -
// Since is how long a lease was held or a candidate waited).
type Event struct {
	Revision Revision
	Type     string
	Key      string
	Holder   string
	Token    uint64        // granted, released, expired
	TTL      time.Duration // granted
	Reason   string        // wait-left
	At       time.Duration
	Since    time.Duration
}

// ErrCompacted: the watch asked for a revision older than the history the
// server keeps, so it cannot promise that nothing was missed. Wire code
// "compacted". The *CompactedError says from where the server can go on;
// to resync, List the keys and watch after the list's revision
// (WatchList).
var ErrCompacted = errors.New("fencelock: watch revision compacted")

// CompactedError is a watch's end for lack of history. It matches
// ErrCompacted.
type CompactedError struct {
	After  Revision // what the watch asked for
	Oldest Revision // the oldest revision the server would accept now
	Err    error    // the server's answer
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("fencelock: watch after %s: compacted: the oldest revision kept is %s", e.After, e.Oldest)
}

func (e *CompactedError) Unwrap() []error { return []error{ErrCompacted, e.Err} }

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	after  *Revision
	key    bool
	wait   time.Duration
	buffer int
}

// WatchAfter starts the watch after rev (an Event's Revision, or the
// revision WatchList answered). Without it the watch starts at the
// present of the node it first reaches.
func WatchAfter(rev Revision) WatchOption { return func(o *watchOptions) { o.after = &rev } }

// WatchKey makes Watch's name one key rather than a prefix.
func WatchKey() WatchOption { return func(o *watchOptions) { o.key = true } }

// WatchWait sets how long each long-poll waits on the server for a first
// event (default api.DefaultWatchWait, at most api.MaxWatchWait). Shorter
// waits notice a frozen node no sooner: the client checks the node it
// waits on as it does for a waiting acquire (WithWaitCheck).
// A d of 0 or less is the default: a watch never polls.
func WatchWait(d time.Duration) WatchOption {
	return func(o *watchOptions) {
		if d > 0 {
			o.wait = min(d, api.MaxWatchWait)
		}
	}
}

// WatchBuffer sets how many events may wait in the channel (default 0).
func WatchBuffer(n int) WatchOption { return func(o *watchOptions) { o.buffer = max(n, 0) } }

// Watch is a running watch. Its one goroutine long-polls the servers and
// sends each event once, in revision order, on Events; after a failed
// call or at another address it goes on after the last revision it has
// passed, so nothing is missed and nothing repeated. Events is closed when
// the watch ends: its ctx ended, Close, or an error that retrying cannot
// cure (Err).
type Watch struct {
	events chan Event
	done   chan struct{}
	cancel context.CancelFunc

	mu  sync.Mutex
	rev Revision
	err error
}

// Watch watches the keys under prefix (or the one key, WatchKey).
func (c *Client) Watch(ctx context.Context, prefix string, opts ...WatchOption) *Watch {
	o := watchOptions{wait: api.DefaultWatchWait}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watch{events: make(chan Event, o.buffer), done: make(chan struct{}), cancel: cancel}
	if o.after != nil {
		w.rev = *o.after
	}
	go w.run(ctx, c, prefix, o)
	return w
}

// Events is the channel of events; it is closed when the watch ends.
func (w *Watch) Events() <-chan Event { return w.events }

// Done is closed when the watch has ended.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err says why the watch ended, once Events is closed: nil after Close or
// its ctx ended, a *CompactedError (ErrCompacted), or a refusal such as
// ErrPermissionDenied or ErrInvalid.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Revision is the revision the watch has reached: the last event sent on
// Events, or past it when the server reported changes on other keys.
// Watching after it later misses nothing that came after.
func (w *Watch) Revision() Revision {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rev
}

// Close ends the watch and waits for its goroutine.
func (w *Watch) Close() {
	w.cancel()
	<-w.done
}

func (w *Watch) run(ctx context.Context, c *Client, name string, o watchOptions) {
	defer close(w.done)
	defer close(w.events)
	defer w.cancel()
	started := o.after != nil
	backoff := c.backoff
	for {
		q := url.Values{api.QueryWaitMs: {strconv.FormatInt(api.Ms(o.wait), 10)}}
		if o.key {
			q.Set(api.QueryKey, name)
		} else {
			q.Set(api.QueryPrefix, name)
		}
		after := w.Revision()
		if started {
			q.Set(api.QueryAfter, after.String())
		}
		var resp api.WatchResponse
		err := w.poll(ctx, c, o.wait, call{method: http.MethodGet, path: api.PathWatch, query: q, out: &resp})
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errPollLost):
			continue // asked again at once, after the same revision
		case errors.Is(err, ErrCompacted):
			var ae *APIError
			ce := &CompactedError{After: after, Err: err}
			if errors.As(err, &ae) && ae.CompactRevision != nil {
				ce.Oldest = *ae.CompactRevision
			}
			w.end(ce)
			return
		case (errors.Is(err, ErrUnreachable) || errors.Is(err, ErrUnavailable)) && !final(err):
			// Every address failed for the client's whole retry budget:
			// a watch has no deadline of its own, so it waits and
			// goes on after the same revision.
			d := backoff/2 + c.rnd.n(backoff/2+1)
			if !sleep(c.clock, d, ctx.Done()) {
				return
			}
			backoff = min(2*backoff, c.maxBackoff)
			continue
		case err != nil:
			w.end(err)
			return
		}
		backoff = c.backoff
		for _, we := range resp.Events {
			if started && we.Revision.Compare(after) <= 0 {
				continue // never twice, whatever a server answers
			}
			select {
			case w.events <- eventOf(we):
			case <-ctx.Done():
				return
			}
			after = we.Revision
			w.setRev(after)
		}
		if !started || resp.Revision.Compare(after) > 0 {
			w.setRev(resp.Revision)
		}
		started = true
	}
}

// errPollLost is a long-poll given up because its answer is overdue: the
// node answers every poll by its wait, and one that still answers its
// health checks (so the attempt is not abandoned as silent) may have lost
// the request or its answer on a connection that broke without a word.
var errPollLost = errors.New("fencelock: watch: no answer to a long-poll well past its wait")

// pollSlack is how long past its wait a long-poll's answer may take: the
// server answers at the wait's end, so this is the round trip and the
// node's scheduling, with a wide margin.
func pollSlack(wait time.Duration) time.Duration { return max(wait/2, 5*time.Second) }

// poll sends one long-poll, given up (errPollLost) pollSlack after its
// wait, on the client's clock.
func (w *Watch) poll(ctx context.Context, c *Client, wait time.Duration, cl call) error {
	pctx, cancel := context.WithCancelCause(ctx)
	t := c.clock.AfterFunc(wait+pollSlack(wait), func() { cancel(errPollLost) })
	err := c.do(pctx, cl)
	t.Stop()
	cancel(nil)
	if ctx.Err() == nil && errors.Is(context.Cause(pctx), errPollLost) {
		return errPollLost
	}
	return err
}

func (w *Watch) setRev(r Revision) {
	w.mu.Lock()
	w.rev = r
	w.mu.Unlock()
}

func (w *Watch) end(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

func eventOf(we api.WatchEvent) Event {
	return Event{Revision: we.Revision, Type: we.Type, Key: we.Key, Holder: we.Holder, Token: we.Token,
		TTL: api.Duration(we.TTLMs), Reason: we.Reason, At: api.Duration(we.AtMs), Since: api.Duration(we.SinceMs)}
}

// WatchList answers the live leases under prefix (at most api.MaxLimit)
// and the revision they are at, read together: a Watch started
// WatchAfter that revision sees every change after the state listed. It is
// how a watcher resyncs after ErrCompacted.
func (c *Client) WatchList(ctx context.Context, prefix string) ([]Lock, Revision, error) {
	return c.watchList(ctx, prefix, false)
}

// watchList is WatchList of the keys under name, or of the one key.
func (c *Client) watchList(ctx context.Context, name string, key bool) ([]Lock, Revision, error) {
	var resp api.WatchResponse
	q := url.Values{api.QueryPrefix: {name}, api.QueryList: {"true"}}
	if key {
		q = url.Values{api.QueryKey: {name}, api.QueryList: {"true"}}
	}
	if err := c.do(ctx, call{method: http.MethodGet, path: api.PathWatch, query: q, out: &resp}); err != nil {
		return nil, Revision{}, err
	}
	out := make([]Lock, len(resp.Locks))
	for i, l := range resp.Locks {
		out[i] = lockOf(l)
	}
	return out, resp.Revision, nil
}
