package service

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/eventlog"
)

// Watch answers the changes after req.After on req.Key, or on the keys
// under req.Prefix, waiting up to req.WaitMs for the first; with req.List
// it answers the live leases instead, and the revision they are at. Any
// node answers from the state it has applied: a follower's answer may lag
// the leader's, never disagree with it, because revisions are the same
// on every node. A revision older than this node's history is refused
// with CodeCompacted.
//
// scope says who asks, for the per-caller limit, and which keys it may
// see; the zero WatchScope is an in-process caller that sees every key.
func (s *Service) Watch(ctx context.Context, req api.WatchRequest, scope WatchScope) (api.WatchResponse, error) {
	resp, e := s.watch(ctx, req, scope.orInProcess())
	return resp, s.fail(e)
}

// WatchScope is what the transport adds to a watch: who asks (for the
// per-caller limit: a principal, or a remote host without ACLs) and,
// under ACLs, which keys the caller may read.
type WatchScope struct {
	Caller  string
	Visible func(key string) bool // nil: every key
}

func (sc WatchScope) orInProcess() WatchScope {
	if sc.Caller == "" {
		sc.Caller = "in-process"
	}
	return sc
}

// checkWatch validates req and answers its limit and key matcher.
func checkWatch(req api.WatchRequest) (int, func(string) bool, *Error) {
	var e *Error
	switch {
	case req.Key != "" && req.Prefix != "":
		e = Invalid("key", "give key or prefix, not both")
	case req.Key != "":
		e = checkKey("key", req.Key)
	default:
		e = checkPrefix(req.Prefix)
	}
	limit := req.Limit
	if limit == 0 {
		limit = api.DefaultWatchLimit
	}
	switch {
	case e != nil:
	case limit < 1 || limit > api.MaxWatchLimit:
		e = Invalid("limit", "limit must be an integer between 1 and %d", api.MaxWatchLimit)
	case req.WaitMs < 0 || req.WaitMs > api.Ms(api.MaxWatchWait):
		e = Invalid("wait_ms", "wait_ms must be between 0 and %d", api.Ms(api.MaxWatchWait))
	case req.List && req.After != nil:
		e = Invalid("after", "list answers the present; it takes no after")
	}
	if e != nil {
		return 0, nil, e
	}
	if req.Key != "" {
		return limit, func(k string) bool { return k == req.Key }, nil
	}
	return limit, func(k string) bool { return strings.HasPrefix(k, req.Prefix) }, nil
}

func (s *Service) watch(ctx context.Context, req api.WatchRequest, sc WatchScope) (api.WatchResponse, *Error) {
	limit, match, e := checkWatch(req)
	if e != nil {
		return api.WatchResponse{}, e
	}
	match = sc.narrow(match)
	if req.List {
		return s.watchList(req, sc), nil
	}
	if e := s.joinWatch(sc.Caller); e != nil {
		return api.WatchResponse{}, e
	}
	defer s.watches.Leave(sc.Caller)
	after := s.watches.Now()
	if req.After != nil {
		after = *req.After
	}
	var timeout chan struct{}
	if req.WaitMs > 0 {
		timeout = make(chan struct{})
		t := s.clock.clk.AfterFunc(api.Duration(req.WaitMs), func() { close(timeout) })
		defer t.Stop()
	}
	for {
		evs, next, wake, err := s.watches.Read(after, match, limit)
		if err != nil {
			return api.WatchResponse{}, watchError(err)
		}
		if len(evs) > 0 || req.WaitMs == 0 {
			return watchAnswer(evs, next), nil
		}
		after = next
		select {
		case <-wake:
		case <-timeout:
			// One last read: an event published as the wait ran out
			// may not have woken this watcher yet.
			evs, next, _, err := s.watches.Read(after, match, limit)
			if err != nil {
				return api.WatchResponse{}, watchError(err)
			}
			return watchAnswer(evs, next), nil
		case <-ctx.Done():
			return api.WatchResponse{}, ctxError(ctx, Unavailable("the watch was given up"))
		case <-s.closing:
			// Shutting down: answer where the watcher is, so it goes
			// on at another node from there.
			return watchAnswer(nil, after), nil
		}
	}
}

// watchList answers the live leases that match and the revision of the
// state they were read in.
func (s *Service) watchList(req api.WatchRequest, sc WatchScope) api.WatchResponse {
	now, ok := s.clock.now()
	if !ok {
		now = -1 // a follower: its last applied cluster time
	}
	prefix := req.Prefix
	if req.Key != "" {
		prefix = req.Key
	}
	leases, index, now := s.fsm.ListAt(prefix, "", now, api.MaxLimit)
	out := api.WatchResponse{Events: []api.WatchEvent{}, Revision: api.Revision{Index: index, Seq: api.EndOfEntry}, Locks: []api.Lease{}}
	for _, l := range leases {
		if (req.Key == "" || l.Key == req.Key) && (sc.Visible == nil || sc.Visible(l.Key)) {
			out.Locks = append(out.Locks, wireLease(l, now))
		}
	}
	return out
}

func watchAnswer(evs []*api.WatchEvent, next api.Revision) api.WatchResponse {
	out := api.WatchResponse{Events: make([]api.WatchEvent, len(evs)), Revision: next}
	for i, e := range evs {
		out.Events[i] = *e
	}
	return out
}

// narrow is match restricted to the keys the scope may see.
func (sc WatchScope) narrow(match func(string) bool) func(string) bool {
	if sc.Visible == nil {
		return match
	}
	return func(k string) bool { return match(k) && sc.Visible(k) }
}

// StreamItem is one frame of a stream: an event, a progress frame (Event
// nil: the stream is at Revision, and nothing it watches happened since
// its last frame), or the error that ends it (Err, compacted: the stream
// fell behind the history).
type StreamItem struct {
	Event    *api.WatchEvent // shared with every reader: never change it
	Revision api.Revision
	Err      *Error
}

// StreamProgress is how often a stream with nothing to send sends a
// progress frame (its revision moves past changes on other keys; it also
// keeps proxies from closing an idle stream). On the service's clock.
const StreamProgress = 10 * time.Second

// Stream watches like Watch, without end: it hands send the frames due,
// a batch at a time, until ctx ends (with a last batch of its cause, when
// that is an *Error: a credential revoked), the service shuts down, send
// reports false (the peer is gone or stopped reading), or the stream
// falls behind the history (a last batch that ends with Err). The first
// batch starts with a progress frame that says where the stream starts.
// A request it refuses (bad arguments, too many watchers) is its error,
// returned before send is called.
func (s *Service) Stream(ctx context.Context, req api.WatchRequest, scope WatchScope, send func([]StreamItem) bool) error {
	sc := scope.orInProcess()
	req.WaitMs = 0 // a stream has no wait; checkWatch still bounds the rest
	_, match, e := checkWatch(req)
	if e != nil {
		return e
	}
	match = sc.narrow(match)
	if e := s.joinWatch(sc.Caller); e != nil {
		return e
	}
	defer s.watches.Leave(sc.Caller)
	cursor := s.watches.Now()
	if req.After != nil {
		cursor = *req.After
	}
	progress := make(chan struct{}, 1)
	tick := func() clock.Timer {
		return s.clock.clk.AfterFunc(StreamProgress, func() { notify(progress) })
	}
	t := tick()
	defer func() { t.Stop() }()

	batch := []StreamItem{{Revision: cursor}}
	progressDue := false
	for {
		evs, next, wake, err := s.watches.Read(cursor, match, api.MaxWatchLimit)
		if err != nil {
			send(append(batch, StreamItem{Revision: cursor, Err: watchError(err)}))
			return nil
		}
		for _, we := range evs {
			batch = append(batch, StreamItem{Event: we, Revision: we.Revision})
		}
		cursor = next
		if progressDue && len(evs) == 0 {
			batch = append(batch, StreamItem{Revision: cursor})
		}
		progressDue = false
		if len(batch) > 0 && !send(batch) {
			return nil
		}
		batch = batch[:0]
		if len(evs) == api.MaxWatchLimit {
			continue // more are there already
		}
		select {
		case <-wake:
		case <-progress:
			t = tick()
			progressDue = true // after reading up to the present
		case <-ctx.Done():
			if e := ctxError(ctx, nil); e != nil {
				// Ended for a reason the caller should hear (its
				// credential was revoked): a last error frame says it.
				send([]StreamItem{{Revision: cursor, Err: e}})
			}
			return nil
		case <-s.closing:
			return nil
		}
	}
}

// Revision is the revision of the present on this node: the last event
// applied, or where its history begins.
func (s *Service) Revision() api.Revision { return s.watches.Now() }

// watchError is a refusal of the event log in the API's terms.
func watchError(err error) *Error {
	var (
		comp *eventlog.CompactedError
		lim  *eventlog.LimitError
	)
	switch {
	case errors.As(err, &comp):
		e := NewError(api.CodeCompacted, "%s", comp.Error())
		floor := comp.Floor
		e.CompactRevision = &floor
		return e
	case errors.As(err, &lim):
		e := NewError(api.CodeTooManyWatchers, "%s", lim.Error())
		if lim.Caller != "" {
			e.Quota = api.QuotaWatches
		}
		return e
	}
	return AsError(err)
}
