package httpapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/auth"
	"github.com/fencelock/fencelock/internal/service"
)

// The watch route: a long-poll answered as JSON, or, for a caller that
// accepts text/event-stream, a stream of server-sent events. The framed
// protocol carries no Accept header, so over frames it is the long-poll.

// watchNeed: read on the watched key or prefix; events on keys below a
// prefix the caller may not read (a longer deny) are left out.
var watchNeed = auth.Read("watch")

func (a *API) serveWatch(w http.ResponseWriter, r *http.Request) *service.Error {
	req, e := parseWatch(r)
	if e != nil {
		return e
	}
	scope := req.Prefix
	if req.Key != "" {
		scope = req.Key
	}
	ctx := r.Context()
	if e := a.guard.Check(ctx, watchNeed, "watch", auth.Subject{Keys: []string{scope}, Prefix: req.Key == ""}); e != nil {
		return e
	}
	sc := auth.WatchScope(ctx, remoteHost(r.RemoteAddr))
	if wantsEventStream(r) && !req.List {
		return a.serveEventStream(w, r, req, sc)
	}
	resp, err := a.svc.Watch(ctx, req, sc)
	return reply(w, resp, err)
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
func parseWatch(r *http.Request) (api.WatchRequest, *service.Error) {
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
			return req, service.Invalid(field, "%s: %v", field, err)
		}
		req.After = &rev
	}
	if raw, ok := q[api.QueryWaitMs]; ok {
		n, err := strconv.ParseInt(raw[0], 10, 64)
		if err != nil {
			return req, service.Invalid(api.QueryWaitMs, "wait_ms must be an integer between 0 and %d", api.Ms(api.MaxWatchWait))
		}
		req.WaitMs = n
	}
	if raw := q.Get(api.QueryLimit); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			return req, service.Invalid(api.QueryLimit, "limit must be an integer between 1 and %d", api.MaxWatchLimit)
		}
		req.Limit = n
	}
	if raw := q.Get(api.QueryList); raw != "" {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return req, service.Invalid(api.QueryList, "list must be true or false")
		}
		req.List = b
	}
	return req, nil
}

// serveEventStream streams the events as server-sent events until the
// caller goes away, the server shuts down, or the stream falls behind the
// history (a last "error" frame, compacted).
func (a *API) serveEventStream(w http.ResponseWriter, r *http.Request, req api.WatchRequest, sc service.WatchScope) *service.Error {
	rc := http.NewResponseController(w)
	started := false
	var buf []byte
	send := func(items []service.StreamItem) bool {
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", api.ContentTypeEventStream)
			h.Set("Cache-Control", "no-store")
			h.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
			w.WriteHeader(http.StatusOK)
		}
		buf = buf[:0]
		for _, it := range items {
			switch {
			case it.Err != nil:
				buf = appendSSE(buf, api.SSEError, it.Revision, it.Err.Wire())
			case it.Event != nil:
				buf = appendSSE(buf, it.Event.Type, it.Revision, it.Event)
			default:
				buf = appendSSE(buf, api.SSEProgress, it.Revision, api.WatchResponse{Events: []api.WatchEvent{}, Revision: it.Revision})
			}
		}
		// A consumer that stops reading costs a blocked goroutine only
		// until the write times out, and never a buffer: the stream reads
		// the shared history at its own pace, and one that falls behind
		// it is ended compacted.
		_ = rc.SetWriteDeadline(time.Now().Add(a.cfg.StreamWriteTimeout))
		_, err := w.Write(buf)
		if err == nil {
			err = rc.Flush()
		}
		return err == nil
	}
	if err := a.svc.Stream(r.Context(), req, sc, send); err != nil {
		return service.AsError(err)
	}
	return nil
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
