package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fencelock/fencelock/api"
)

// Lock is the server's account of one lease: who holds a key, under which
// fencing token, for how long. It is api.Lease with durations as
// time.Duration, and encodes to and from that wire shape (docs/API.md).
type Lock struct {
	Key       string
	Holder    string
	Token     uint64
	TTL       time.Duration
	Remaining time.Duration // on cluster time, when the answer was produced
	// Semaphores and read/write locks (WithPermits, WithRead): the key's kind
	// (api.KindSemaphore, api.KindRWLock; "" for an exclusive lease), a
	// semaphore's permits, a read/write holder's mode (api.ModeRead,
	// api.ModeWrite). Get fills Holders with every live holder of such a key.
	Kind    string
	Permits int
	Mode    string
	Slot    int // a semaphore holder's permit, 1..Permits: fence per slot
	Holders []Lock
	// Session is the session the lease is held under (0: none).
	Session uint64
	// Waiting is how many wait in the key's queue, NextWaiter the first of
	// them (Get and List; nil when nobody waits). A key of several holders
	// gives them with its first lease only.
	Waiting    int
	NextWaiter *Waiter
}

// Waiter is a queued acquire: who, how long it has waited, how long it
// will wait more, a read/write lock's waiter's mode, and the session it
// waits under (0: none).
type Waiter struct {
	Holder  string
	Waited  time.Duration
	Left    time.Duration
	Mode    string
	Session uint64
}

// MarshalJSON writes the wire shape, api.Lease.
func (l Lock) MarshalJSON() ([]byte, error) { return json.Marshal(l.lease()) }

// UnmarshalJSON reads the wire shape, api.Lease.
func (l *Lock) UnmarshalJSON(data []byte) error {
	var w api.Lease
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*l = lockOf(w)
	return nil
}

// lockOf is the server's lease in the client's terms.
func lockOf(w api.Lease) Lock {
	l := Lock{Key: w.Key, Holder: w.Holder, Token: w.Token, TTL: api.Duration(w.TTLMs), Remaining: api.Duration(w.RemainingMs),
		Kind: w.Kind, Permits: w.Permits, Mode: w.Mode, Slot: w.Slot, Session: w.Session, Waiting: w.Waiting}
	for _, h := range w.Holders {
		l.Holders = append(l.Holders, lockOf(h))
	}
	if n := w.NextWaiter; n != nil {
		l.NextWaiter = &Waiter{Holder: n.Holder, Waited: api.Duration(n.WaitedMs), Left: api.Duration(n.LeftMs), Mode: n.Mode, Session: n.Session}
	}
	return l
}

func (l Lock) lease() api.Lease {
	w := api.Lease{Key: l.Key, Holder: l.Holder, Token: l.Token, TTLMs: api.Ms(l.TTL), RemainingMs: api.Ms(l.Remaining),
		Kind: l.Kind, Permits: l.Permits, Mode: l.Mode, Slot: l.Slot, Session: l.Session, Waiting: l.Waiting}
	for _, h := range l.Holders {
		w.Holders = append(w.Holders, h.lease())
	}
	if n := l.NextWaiter; n != nil {
		w.NextWaiter = &api.Waiter{Holder: n.Holder, WaitedMs: api.Ms(n.Waited), LeftMs: api.Ms(n.Left), Mode: n.Mode, Session: n.Session}
	}
	return w
}

// Renew re-acquires key for the holder that holds it live, which issues a
// NEW token (the old one stops being current). It matches ErrNotHeld when
// holder does not hold a live lease on key.
func (c *Client) Renew(ctx context.Context, key, holder string, ttl time.Duration) (Lock, error) {
	body := api.RenewRequest{Key: key, Holder: holder, TTLMs: api.Ms(ttl), RequestID: c.rnd.requestID()}
	var out api.Lease
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathRenew, body: body, out: &out})
	return lockOf(out), err
}

// Extend keeps the live grant (holder, token) on key alive for ttl from now,
// keeping the token. It matches ErrNotHeld when that pair is not the key's
// live grant (it expired, was released, or was superseded).
func (c *Client) Extend(ctx context.Context, key, holder string, token uint64, ttl time.Duration) (Lock, error) {
	return c.extend(ctx, call{}, key, holder, token, ttl)
}

// extendAt is one extension sent to addr alone, under a request id of its
// own: the lease handle's keep-alive chooses the address, and dates what
// the answer confirms from when this very request was sent.
func (c *Client) extendAt(ctx context.Context, addr, key, holder string, token uint64, ttl time.Duration) (Lock, error) {
	return c.extend(ctx, call{at: addr}, key, holder, token, ttl)
}

func (c *Client) extend(ctx context.Context, cl call, key, holder string, token uint64, ttl time.Duration) (Lock, error) {
	cl.body = api.ExtendRequest{Key: key, Holder: holder, Token: token, TTLMs: api.Ms(ttl), RequestID: c.rnd.requestID()}
	var out api.Lease
	cl.method, cl.path, cl.out = http.MethodPost, api.PathExtend, &out
	err := c.do(ctx, cl)
	return lockOf(out), err
}

// Held names one lease in a batch: a key and the token it was granted under.
type Held = api.BatchItem

// ExtendResult is the outcome for one lease of ExtendBatch: Err is nil and
// Lock is the extended lease, or Err says why that one was refused (it
// matches ErrNotHeld, …).
type ExtendResult struct {
	Key   string
	Token uint64
	Lock  Lock
	Err   error
}

// ExtendBatch extends many leases of one holder in one request (at most
// 1000). The error is about the request as a whole; per-lease refusals are
// in the results, in the order of leases.
func (c *Client) ExtendBatch(ctx context.Context, holder string, ttl time.Duration, leases []Held) ([]ExtendResult, error) {
	body := api.ExtendBatchRequest{Holder: holder, TTLMs: api.Ms(ttl), Leases: leases, RequestID: c.rnd.requestID()}
	var out api.ExtendBatchResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: api.PathExtendBatch, body: body, out: &out}); err != nil {
		return nil, err
	}
	res := make([]ExtendResult, len(out.Results))
	for i, r := range out.Results {
		res[i] = ExtendResult{Key: r.Key, Token: r.Token}
		if r.Lease != nil {
			res[i].Lock = lockOf(*r.Lease)
		}
		if !r.OK {
			res[i].Err = &APIError{Status: http.StatusConflict, Code: r.Code, Message: r.Error}
		}
	}
	return res, nil
}

// Release ends holder's live lease on key; with token > 0, only if that is
// the lease's token. It reports whether a lease was released: false means
// holder did not hold a live lease (never someone else's, never an expired
// one that may have been granted again).
func (c *Client) Release(ctx context.Context, key, holder string, token uint64) (bool, error) {
	body := api.ReleaseRequest{Key: key, Holder: holder, Token: token, RequestID: c.rnd.requestID()}
	var out api.ReleaseResponse
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathRelease, body: body, out: &out})
	return out.Released, err
}

// Check reports whether token is key's current token and its lease alive.
// This is what a resource that cannot keep its own fence asks; a fence kept
// by the resource (package fence) is stronger, because the answer can be
// stale by the time the write lands.
func (c *Client) Check(ctx context.Context, key string, token uint64) (bool, error) {
	q := url.Values{api.QueryKey: {key}, api.QueryToken: {strconv.FormatUint(token, 10)}}
	var out api.CheckResponse
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathCheck, query: q, out: &out})
	return out.Valid, err
}

// Get returns the live lease on key; it matches ErrNotFound when there is
// none.
func (c *Client) Get(ctx context.Context, key string) (Lock, error) {
	var out api.Lease
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathLock, query: url.Values{api.QueryKey: {key}}, out: &out})
	return lockOf(out), err
}

// List returns the live leases whose keys start with prefix, sorted by key;
// limit <= 0 leaves the limit to the server.
func (c *Client) List(ctx context.Context, prefix string, limit int) ([]Lock, error) {
	return c.ListAfter(ctx, prefix, "", limit)
}

// ListAfter is List of the keys after after: pass the last key of one
// page to get the next; a page shorter than the limit is the last.
func (c *Client) ListAfter(ctx context.Context, prefix, after string, limit int) ([]Lock, error) {
	q := url.Values{api.QueryPrefix: {prefix}}
	if after != "" {
		q.Set(api.QueryAfter, after)
	}
	if limit > 0 {
		q.Set(api.QueryLimit, strconv.Itoa(limit))
	}
	var out api.ListResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: api.PathLocks, query: q, out: &out}); err != nil {
		return nil, err
	}
	locks := make([]Lock, len(out.Locks))
	for i, w := range out.Locks {
		locks[i] = lockOf(w)
	}
	return locks, nil
}

// String is a one-line account of l for messages.
func (l Lock) String() string {
	return fmt.Sprintf("%s held by %s, token %d, %v left of %v", l.Key, l.Holder, l.Token, l.Remaining, l.TTL)
}
