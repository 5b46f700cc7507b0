package server

import (
	"context"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/locktable"
)

// Watch answers the changes after req.After on req.Key, or on the keys
// under req.Prefix, waiting up to req.WaitMs for the first; with req.List
// it answers the live leases instead, and the revision they are at. Any
// node answers from the state it has applied: a follower's answer may lag
// the leader's, never disagree with it, because revisions are the same
// on every node. A revision older than this node's history is refused
// with CodeCompacted.
func (s *Server) Watch(ctx context.Context, req api.WatchRequest) (api.WatchResponse, error) {
	resp, e := s.watch(ctx, req, watchScope{caller: "in-process"})
	return resp, s.fail(e)
}

// watchScope is what the transport adds to a watch: who asks (for the
// per-caller limit) and, under ACLs, which keys the caller may read.
type watchScope struct {
	caller string
	may    func(key string) bool // nil: every key
}

// checkWatch validates req and answers its limit and key matcher.
func checkWatch(req api.WatchRequest) (int, func(string) bool, *Error) {
	var e *Error
	switch {
	case req.Key != "" && req.Prefix != "":
		e = invalid("key", "give key or prefix, not both")
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
		e = invalid("limit", "limit must be an integer between 1 and %d", api.MaxWatchLimit)
	case req.WaitMs < 0 || req.WaitMs > api.Ms(api.MaxWatchWait):
		e = invalid("wait_ms", "wait_ms must be between 0 and %d", api.Ms(api.MaxWatchWait))
	case req.List && req.After != nil:
		e = invalid("after", "list answers the present; it takes no after")
	}
	if e != nil {
		return 0, nil, e
	}
	if req.Key != "" {
		return limit, func(k string) bool { return k == req.Key }, nil
	}
	return limit, func(k string) bool { return strings.HasPrefix(k, req.Prefix) }, nil
}

func (s *Server) watch(ctx context.Context, req api.WatchRequest, sc watchScope) (api.WatchResponse, *Error) {
	limit, match, e := checkWatch(req)
	if e != nil {
		return api.WatchResponse{}, e
	}
	if sc.may != nil {
		inner := match
		match = func(k string) bool { return inner(k) && sc.may(k) }
	}
	if req.List {
		return s.watchList(req, sc), nil
	}
	if e := s.watches.join(sc.caller); e != nil {
		return api.WatchResponse{}, e
	}
	defer s.watches.leave(sc.caller)
	after := s.watches.now()
	if req.After != nil {
		after = *req.After
	}
	var timeout chan struct{}
	if req.WaitMs > 0 {
		timeout = make(chan struct{})
		t := s.clk.AfterFunc(api.Duration(req.WaitMs), func() { close(timeout) })
		defer t.Stop()
	}
	for {
		evs, next, wake, e := s.watches.read(after, match, limit)
		if e != nil {
			return api.WatchResponse{}, e
		}
		if len(evs) > 0 || req.WaitMs == 0 {
			return watchAnswer(evs, next), nil
		}
		after = next
		select {
		case <-wake:
		case <-timeout:
			return watchAnswer(nil, after), nil
		case <-ctx.Done():
			return api.WatchResponse{}, unavailable("the watch was given up")
		case <-s.closing:
			// Shutting down: answer where the watcher is, so it goes
			// on at another node from there.
			return watchAnswer(nil, after), nil
		}
	}
}

// watchList answers the live leases that match and the revision of the
// state they were read in.
func (s *Server) watchList(req api.WatchRequest, sc watchScope) api.WatchResponse {
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
		if (req.Key == "" || l.Key == req.Key) && (sc.may == nil || sc.may(l.Key)) {
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

func wireWatchEvent(rev api.Revision, ev locktable.Event) api.WatchEvent {
	w := api.WatchEvent{Revision: rev, Key: ev.Key, Holder: ev.Holder, Token: ev.Token,
		AtMs: clusterMs(ev.At), SinceMs: clusterMs(ev.Since)}
	switch ev.Kind {
	case locktable.EventGranted:
		w.Type, w.TTLMs = api.WatchGranted, ms(locktable.Duration(ev.Expiry-ev.At))
	case locktable.EventReleased:
		w.Type = api.WatchReleased
	case locktable.EventExpired:
		w.Type = api.WatchExpired
	case locktable.EventWaitJoined:
		w.Type = api.WatchWaitJoined
	case locktable.EventWaitLeft:
		w.Type, w.Reason = api.WatchWaitLeft, api.WaitLeftCancelled
	case locktable.EventWaitDropped:
		w.Type, w.Reason = api.WatchWaitLeft, api.WaitLeftDeadline
	default:
		w.Type = ev.Kind.String()
	}
	return w
}

// clusterMs is a cluster time in milliseconds.
func clusterMs(t locktable.Time) int64 { return int64(t) / int64(time.Millisecond) }
