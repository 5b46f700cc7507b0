package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
)

// The watch route: a long-poll answered as JSON, or, for a caller that
// accepts text/event-stream, a stream of server-sent events. The framed
// protocol carries no Accept header, so over frames it is the long-poll.

// sseProgress is how often a stream with nothing to send sends a progress
// frame (its id moves past changes on other keys; it also keeps proxies
// from closing an idle stream). On the server's clock.
const sseProgress = 10 * time.Second

// sseWriteTimeout drops a stream whose peer takes no bytes for this long:
// a consumer that stops reading costs a blocked goroutine only until
// then, and never a buffer (the stream reads the shared history at its
// own pace; one that falls behind it is ended compacted). A variable for
// tests.
var sseWriteTimeout = 10 * time.Second

func (s *Server) httpWatch(w http.ResponseWriter, r *http.Request) *Error {
	req, e := parseWatch(r)
	if e != nil {
		return e
	}
	sc := watchScope{caller: remoteHost(r.RemoteAddr)}
	if c := callerFrom(r.Context()); c != nil {
		scope := req.Prefix
		if req.Key != "" {
			scope = req.Key
		}
		if e := c.may(acl.Read, scope, "watch"); e != nil {
			return e
		}
		// As a list: the keys below the prefix the caller may not read
		// (a longer deny) are left out; holders are shown as a list
		// shows them.
		sc.caller = "principal " + c.p.Name
		sc.may = func(k string) bool { return c.st.Allowed(c.p, acl.Read, k) }
	}
	if wantsEventStream(r) && !req.List {
		return s.serveEventStream(w, r, req, sc)
	}
	resp, e := s.watch(r.Context(), req, sc)
	return reply(w, resp, errOrNil(e))
}

// errOrNil keeps a nil *Error a nil error.
func errOrNil(e *Error) error {
	if e == nil {
		return nil
	}
	return e
}

func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func wantsEventStream(r *http.Request) bool {
	for _, a := range r.Header.Values("Accept") {
		for _, part := range strings.Split(a, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), api.ContentTypeEventStream) {
				return true
			}
		}
	}
	return false
}

// parseWatch reads a watch's query; its errors name the parameter.
func parseWatch(r *http.Request) (api.WatchRequest, *Error) {
	q := r.URL.Query()
	req := api.WatchRequest{Key: q.Get(api.QueryKey), Prefix: q.Get(api.QueryPrefix), WaitMs: api.Ms(api.DefaultWatchWait)}
	after := q.Get(api.QueryAfter)
	field := api.QueryAfter
	if after == "" {
		after, field = r.Header.Get(api.HeaderLastEventID), api.HeaderLastEventID
	}
	if after != "" {
		rev, err := api.ParseRevision(after)
		if err != nil {
			return req, invalid(field, "%s: %v", field, err)
		}
		req.After = &rev
	}
	if raw, ok := q[api.QueryWaitMs]; ok {
		n, err := strconv.ParseInt(raw[0], 10, 64)
		if err != nil {
			return req, invalid(api.QueryWaitMs, "wait_ms must be an integer between 0 and %d", api.Ms(api.MaxWatchWait))
		}
		req.WaitMs = n
	}
	if raw := q.Get(api.QueryLimit); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			return req, invalid(api.QueryLimit, "limit must be an integer between 1 and %d", api.MaxWatchLimit)
		}
		req.Limit = n
	}
	if raw := q.Get(api.QueryList); raw != "" {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return req, invalid(api.QueryList, "list must be true or false")
		}
		req.List = b
	}
	return req, nil
}

// serveEventStream streams the events as server-sent events until the
// caller goes away, the server shuts down, or the stream falls behind the
// history (a last "error" frame, compacted).
func (s *Server) serveEventStream(w http.ResponseWriter, r *http.Request, req api.WatchRequest, sc watchScope) *Error {
	req.WaitMs = 0 // a stream has no wait; checkWatch still bounds the rest
	_, match, e := checkWatch(req)
	if e != nil {
		return e
	}
	if sc.may != nil {
		inner := match
		match = func(k string) bool { return inner(k) && sc.may(k) }
	}
	if e := s.watches.join(sc.caller); e != nil {
		return e
	}
	defer s.watches.leave(sc.caller)
	cursor := s.watches.now()
	if req.After != nil {
		cursor = *req.After
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeEventStream)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	w.WriteHeader(http.StatusOK)

	progress := make(chan struct{}, 1)
	tick := func() Timer {
		return s.clk.AfterFunc(sseProgress, func() {
			select {
			case progress <- struct{}{}:
			default:
			}
		})
	}
	t := tick()
	defer func() { t.Stop() }()

	var buf []byte
	send := func() bool {
		if len(buf) == 0 {
			return true
		}
		_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
		_, err := w.Write(buf)
		if err == nil {
			err = rc.Flush()
		}
		buf = buf[:0]
		return err == nil
	}
	// The first frame says where the stream starts.
	buf = appendSSE(buf, api.SSEProgress, cursor, api.WatchResponse{Events: []api.WatchEvent{}, Revision: cursor})
	progressDue := false
	for {
		evs, next, wake, e := s.watches.read(cursor, match, api.MaxWatchLimit)
		if e != nil {
			buf = appendSSE(buf, api.SSEError, cursor, e.Wire())
			send()
			return nil
		}
		for _, we := range evs {
			buf = appendSSE(buf, we.Type, we.Revision, we)
		}
		cursor = next
		if progressDue && len(evs) == 0 {
			buf = appendSSE(buf, api.SSEProgress, cursor, api.WatchResponse{Events: []api.WatchEvent{}, Revision: cursor})
		}
		progressDue = false
		if !send() {
			return nil // the peer is gone or stopped reading
		}
		if len(evs) == api.MaxWatchLimit {
			continue // more are there already
		}
		select {
		case <-wake:
		case <-progress:
			t = tick()
			progressDue = true // after reading up to the present
		case <-r.Context().Done():
			return nil
		case <-s.closing:
			return nil
		}
	}
}

// appendSSE appends one server-sent event: its id is the revision, so a
// reconnecting EventSource resumes after it.
func appendSSE(buf []byte, event string, rev api.Revision, v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(fmt.Sprintf(`{"error":%q,"code":"internal"}`, err.Error()))
	}
	buf = append(buf, "id: "...)
	buf = append(buf, rev.String()...)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, event...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}
