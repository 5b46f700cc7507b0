package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

type route struct {
	method string
	handle func(w http.ResponseWriter, r *http.Request) *apiError
}

// router answers 404 for an unknown path and 405 (with Allow) for a known
// path and another method, both as JSON errors, and never lets a panic
// reach the connection as anything but a 500 JSON error.
type router struct {
	s      *Server
	routes map[string]route
}

func (s *Server) routes() http.Handler {
	metrics := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	return &router{s: s, routes: map[string]route{
		"/v1/acquire":          {http.MethodPost, s.handleAcquire},
		"/v1/renew":            {http.MethodPost, s.handleRenew},
		"/v1/extend":           {http.MethodPost, s.handleExtend},
		"/v1/extend-batch":     {http.MethodPost, s.handleExtendBatch},
		"/v1/release":          {http.MethodPost, s.handleRelease},
		"/v1/check":            {http.MethodGet, s.handleCheck},
		"/v1/lock":             {http.MethodGet, s.handleGet},
		"/v1/locks":            {http.MethodGet, s.handleList},
		"/healthz":             {http.MethodGet, s.handleHealth},
		"/readyz":              {http.MethodGet, s.handleReady},
		"/v1/cluster/members":  {http.MethodGet, s.handleMembers},
		"/v1/cluster/join":     {http.MethodPost, s.handleJoin},
		"/v1/cluster/remove":   {http.MethodPost, s.handleRemove},
		"/v1/cluster/announce": {http.MethodPost, s.handleAnnounce},
		"/v1/cluster/identity": {http.MethodGet, s.handleIdentity},
		"/metrics": {http.MethodGet, func(w http.ResponseWriter, r *http.Request) *apiError {
			metrics.ServeHTTP(w, r)
			return nil
		}},
	}}
}

// statusWriter remembers the status for the request counter.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	name := r.URL.Path
	rte, ok := rt.routes[r.URL.Path]
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			rt.s.log.Error("handler panic", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			if sw.status == 0 {
				writeError(sw, &apiError{Status: http.StatusInternalServerError, Code: codeInternal, Message: "internal error"})
			}
		}
		rt.s.metrics.requests.WithLabelValues(name, strconv.Itoa(sw.status)).Inc()
		rt.s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"duration", time.Since(start), "remote", r.RemoteAddr)
	}()
	if !ok {
		name = "unknown"
		writeError(sw, &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no such route: " + r.URL.Path})
		return
	}
	if r.Method != rte.method {
		sw.Header().Set("Allow", rte.method)
		writeError(sw, &apiError{Status: http.StatusMethodNotAllowed, Code: codeMethodNotAllowed,
			Message: r.Method + " is not allowed on " + r.URL.Path + "; use " + rte.method})
		return
	}
	if e := rte.handle(sw, r); e != nil {
		if e.Code == codeNotLeader && e.Leader == "" {
			e = rt.s.notLeader(e)
		}
		writeError(sw, e)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == 0 {
		e.Status = http.StatusInternalServerError
	}
	writeJSON(w, e.Status, e)
}

// proposalError maps a failed proposal to a 503.
func proposalError(err error) *apiError {
	var se *StorageError
	if errors.As(err, &se) {
		return storageError(se)
	}
	if errors.Is(err, ErrNotLeader) {
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeNotLeader, Message: "this node is not the leader"}
	}
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: err.Error()}
}

func unavailable(msg string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: msg}
}

// commandError maps a refusal in a Result. Input errors cannot normally
// happen (handlers validate first); they still answer 400.
func (s *Server) commandError(err error, now locktable.Time) *apiError {
	var (
		held *locktable.HeldError
		in   *locktable.InputError
	)
	switch {
	case errors.As(err, &held):
		rem := ms(held.Lease.Remaining(now))
		return &apiError{Status: http.StatusConflict, Code: codeHeld, Holder: held.Lease.Holder, RemainingMs: &rem,
			Message: "held by another holder"}
	case errors.Is(err, locktable.ErrNotHeld):
		return &apiError{Status: http.StatusConflict, Code: codeNotHeld, Message: "not the live holder of this token"}
	case errors.As(err, &in):
		field := in.Field
		if field == "ttl" {
			field = "ttl_ms"
		}
		return invalid(field, "%s", in.Error())
	}
	s.log.Error("command failed", "err", err)
	return &apiError{Status: http.StatusInternalServerError, Code: codeInternal, Message: "internal error"}
}

// writable refuses writes until this node leads and has caught up.
func (s *Server) writable() *apiError {
	if s.node.wal != nil {
		// A node whose log cannot write says why, whether or not it
		// still leads (it steps down after the failed append), unless
		// another node leads: then not_leader sends the client there.
		if se := s.node.wal.Fault(); se != nil {
			if addr, _ := s.node.raft.LeaderWithID(); addr == "" || addr == s.node.addr {
				return storageError(se)
			}
		}
	}
	if !s.ready.Load() {
		return s.notReady()
	}
	select {
	case <-s.closing:
		return unavailable("shutting down")
	default:
	}
	return nil
}

// readNow is the cluster time reads are answered at.
func (s *Server) readNow() (locktable.Time, *apiError) {
	if !s.ready.Load() {
		return 0, s.notReady()
	}
	if e := s.verifyLeader(); e != nil {
		return 0, e
	}
	now, ok := s.clock.now()
	if !ok {
		return 0, unavailable("not ready: no leader")
	}
	return now, nil
}

// answerNow is the cluster time a write's answer is measured at: now if
// the clock runs, else the time the command applied.
func (s *Server) answerNow(applied locktable.Time) locktable.Time {
	if now, ok := s.clock.now(); ok && now > applied {
		return now
	}
	return applied
}

func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) *apiError {
	var req acquireRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	ttl, e := checkTTL(req.TTLMs)
	e = firstErr(checkKey("key", req.Key), checkHolder(req.Holder), e, checkRequestID(req.RequestID))
	if e == nil && (req.WaitMs < 0 || req.WaitMs > MaxWait.Milliseconds()) {
		e = invalid("wait_ms", "wait_ms must be between 0 and %d", MaxWait.Milliseconds())
	}
	if e != nil {
		return e
	}
	if e := s.writable(); e != nil {
		return e
	}
	if req.WaitMs > 0 {
		return s.acquireWait(w, r, req, ttl)
	}
	_, e = s.proposeLease(w, fsm.Command{Op: fsm.OpAcquire, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, TTL: ttl}, "acquire")
	return e
}

// proposeLease proposes a command that answers a lease (acquire, renew,
// extend) and writes that lease, or the refusal, counted under what.
func (s *Server) proposeLease(w http.ResponseWriter, cmd fsm.Command, what string) (refused bool, e *apiError) {
	res, err := s.propose(cmd)
	if err != nil {
		return false, proposalError(err)
	}
	if res.Err != nil {
		s.metrics.refusals.WithLabelValues(what).Inc()
		return true, s.commandError(res.Err, res.Now)
	}
	writeJSON(w, http.StatusOK, wireLease(res.Lease, s.answerNow(res.Now)))
	return false, nil
}

// acquireWait queues in the key's FIFO and answers when the grant or the
// end of the wait is committed. See the package comment for how a waiter
// that gives up is handled.
func (s *Server) acquireWait(w http.ResponseWriter, r *http.Request, req acquireRequest, ttl locktable.Duration) *apiError {
	sub := s.waiters.join(req.Key, req.Holder)
	now, err := s.stamp()
	if err != nil {
		s.waiters.remove(sub)
		return proposalError(err)
	}
	wait := locktable.Duration(time.Duration(req.WaitMs) * time.Millisecond)
	res, err := s.apply(fsm.Command{Op: fsm.OpWait, RequestID: req.RequestID, Now: now,
		Key: req.Key, Holder: req.Holder, TTL: ttl, Deadline: now + locktable.Time(wait)})
	if err != nil {
		s.waiters.remove(sub)
		return proposalError(err)
	}
	if res.Err != nil || res.Granted {
		s.waiters.remove(sub)
		if res.Err != nil {
			s.metrics.refusals.WithLabelValues("acquire").Inc()
			return s.commandError(res.Err, res.Now)
		}
		writeJSON(w, http.StatusOK, wireLease(res.Lease, s.answerNow(res.Now)))
		return nil
	}
	after := res.Index // events at or before our Wait entry are not ours

	// The table drops the waiter at its deadline through a leader Tick;
	// this backstop only matters if ticks stop (no leader).
	backstopC := make(chan struct{}, 1)
	backstop := s.clk.AfterFunc(time.Duration(wait)+5*time.Second, func() { notify(backstopC) })
	defer backstop.Stop()
	var (
		gone  bool // the client disconnected
		cause *apiError
	)
	for cause == nil {
		select {
		case <-sub.signal:
			evs, failed := s.waiters.take(sub)
			for _, we := range evs {
				if we.index <= after {
					continue
				}
				if r.Context().Err() != nil && we.ev.Kind == locktable.EventGranted {
					// The client left just as its grant committed: hand
					// the key on instead of answering nobody, unless
					// another request of the same holder is still there
					// to be answered with it.
					defer s.waiters.remove(sub)
					if s.waiters.leave(sub) {
						s.releaseUnanswered(we.ev, req.RequestID)
					}
					return unavailable("client went away")
				}
				s.waiters.remove(sub)
				return s.answerWaitEvent(w, req.Key, we.ev)
			}
			if s.waiters.takeAgain(sub) {
				// A departed request of this holder cancelled the queue
				// place after our Wait had joined it: queue again.
				now, err := s.stamp()
				if err == nil {
					res, err = s.apply(fsm.Command{Op: fsm.OpWait, RequestID: req.RequestID, Now: now,
						Key: req.Key, Holder: req.Holder, TTL: ttl, Deadline: now + locktable.Time(wait)})
				}
				switch {
				case err != nil:
					s.waiters.remove(sub)
					return proposalError(err)
				case res.Err != nil:
					s.waiters.remove(sub)
					return s.commandError(res.Err, res.Now)
				case res.Granted:
					s.waiters.remove(sub)
					writeJSON(w, http.StatusOK, wireLease(res.Lease, s.answerNow(res.Now)))
					return nil
				}
				after = res.Index
			}
			if failed {
				// The queue place is in the replicated table: the same
				// request sent to the new leader keeps it.
				s.waiters.remove(sub)
				return &apiError{Status: http.StatusServiceUnavailable, Code: codeNotLeader,
					Message: "leadership lost while waiting; send the same request to the leader"}
			}
		case <-r.Context().Done():
			gone, cause = true, unavailable("client went away")
		case <-s.closing:
			cause = unavailable("shutting down")
		case <-backstopC:
			cause = s.heldNow(req.Key, "wait elapsed")
		}
	}
	return s.giveUp(w, sub, req.RequestID, after, gone, cause)
}

// giveUp takes a waiter out of the queue. If its grant was committed before
// the cancel, a client that is gone has it released by token (so the next
// waiter gets the key now, not at expiry); a client still there is answered
// with it.
func (s *Server) giveUp(w http.ResponseWriter, sub *sub, id string, after uint64, gone bool, cause *apiError) *apiError {
	defer s.waiters.remove(sub)
	if !s.waiters.leave(sub) {
		return cause // another request of the same holder keeps the position
	}
	res, err := s.cancelWait(sub.wk)
	if err != nil {
		// No leader: the next leader cancels waiters nobody serves.
		return cause
	}
	if res.Cancelled > 0 {
		s.metrics.waitEnds.WithLabelValues("cancelled").Inc()
		return cause
	}
	evs, _ := s.waiters.take(sub)
	for _, we := range evs {
		if we.index <= after || we.index > res.Index {
			continue
		}
		if we.ev.Kind != locktable.EventGranted {
			return cause
		}
		if !gone {
			return s.answerWaitEvent(w, sub.wk.key, we.ev)
		}
		s.releaseUnanswered(we.ev, id)
		return cause
	}
	return cause
}

// cancelWait takes a queue place away for a request that gives up. A
// request of the same holder that joined after the giver-up looked (a
// client re-sending its wait after leaving a node it thought stuck) may
// have had its Wait applied before this cancel: it is told to queue again.
func (s *Server) cancelWait(wk waitKey) (*fsm.Result, error) {
	res, err := s.propose(fsm.Command{Op: fsm.OpCancelWait, Key: wk.key, Holder: wk.holder})
	if err == nil && res.Cancelled > 0 {
		s.waiters.requeue(wk)
	}
	return res, err
}

// releaseUnanswered releases, by token, a grant whose waiter went away
// before it could be told, so the next waiter gets the key now rather than
// at expiry. It names the wait's request id: if the client re-sent its wait
// (to this node or another) and was answered with this grant, the state
// machine leaves it held.
func (s *Server) releaseUnanswered(ev locktable.Event, id string) {
	rel, err := s.propose(fsm.Command{Op: fsm.OpRelease, RequestID: id, Key: ev.Key, Holder: ev.Holder, Token: ev.Token})
	released := err == nil && rel.Released
	s.log.Info("released a grant whose waiter went away", "key", ev.Key, "holder", ev.Holder,
		"token", ev.Token, "released", released)
}

func (s *Server) answerWaitEvent(w http.ResponseWriter, key string, ev locktable.Event) *apiError {
	if ev.Kind == locktable.EventWaitDropped {
		return s.heldNow(key, "wait elapsed")
	}
	l := locktable.Lease{Key: ev.Key, Holder: ev.Holder, Token: ev.Token, Granted: ev.At, Expiry: ev.Expiry,
		TTL: locktable.Duration(ev.Expiry - ev.At)}
	writeJSON(w, http.StatusOK, wireLease(l, s.answerNow(ev.At)))
	return nil
}

// heldNow is the 409 for a wait that elapsed, naming the current holder.
func (s *Server) heldNow(key, why string) *apiError {
	e := &apiError{Status: http.StatusConflict, Code: codeHeld, Message: "held by another holder: " + why}
	if now, ok := s.clock.now(); ok {
		if l, ok := s.fsm.Get(key, now); ok {
			rem := ms(l.Remaining(now))
			e.Holder, e.RemainingMs = l.Holder, &rem
		}
	}
	return e
}

func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) *apiError {
	var req renewRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	ttl, e := checkTTL(req.TTLMs)
	if e := firstErr(checkKey("key", req.Key), checkHolder(req.Holder), e, checkRequestID(req.RequestID), s.writable()); e != nil {
		return e
	}
	_, e = s.proposeLease(w, fsm.Command{Op: fsm.OpRenew, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, TTL: ttl}, "renew")
	return e
}

func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) *apiError {
	var req extendRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	ttl, e := checkTTL(req.TTLMs)
	e = firstErr(checkKey("key", req.Key), checkHolder(req.Holder), e, checkRequestID(req.RequestID))
	if e == nil && req.Token == 0 {
		e = invalid("token", "token is required")
	}
	if e := firstErr(e, s.writable()); e != nil {
		return e
	}
	refused, e := s.proposeLease(w, fsm.Command{Op: fsm.OpExtend, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, Token: req.Token, TTL: ttl}, "extend")
	switch {
	case refused:
		s.metrics.extends.WithLabelValues("not_held").Inc()
	case e == nil:
		s.metrics.extends.WithLabelValues("ok").Inc()
	}
	return e
}

func (s *Server) handleExtendBatch(w http.ResponseWriter, r *http.Request) *apiError {
	var req extendBatchRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	ttl, e := checkTTL(req.TTLMs)
	if e := firstErr(checkHolder(req.Holder), e, checkRequestID(req.RequestID)); e != nil {
		return e
	}
	switch {
	case len(req.Leases) == 0:
		return invalid("leases", "leases is required: at least one {key, token}")
	case len(req.Leases) > MaxBatch:
		return invalid("leases", "leases has %d items; the limit is %d", len(req.Leases), MaxBatch)
	}
	items := make([]fsm.Item, len(req.Leases))
	for i, it := range req.Leases {
		field := "leases[" + strconv.Itoa(i) + "]"
		if e := checkKey(field+".key", it.Key); e != nil {
			return e
		}
		if it.Token == 0 {
			return invalid(field+".token", "%s.token is required", field)
		}
		items[i] = fsm.Item{Key: it.Key, Token: it.Token}
	}
	if e := s.writable(); e != nil {
		return e
	}
	res, err := s.propose(fsm.Command{Op: fsm.OpExtendBatch, RequestID: req.RequestID, Holder: req.Holder, TTL: ttl, Items: items})
	if err != nil {
		return proposalError(err)
	}
	now := s.answerNow(res.Now)
	out := make([]batchResult, len(res.Batch))
	for i, b := range res.Batch {
		out[i] = batchResult{Key: b.Key, Token: b.Token}
		if b.Err != nil {
			s.metrics.extends.WithLabelValues("not_held").Inc()
			ae := s.commandError(b.Err, res.Now)
			out[i].Code, out[i].Error = ae.Code, ae.Message
			continue
		}
		s.metrics.extends.WithLabelValues("ok").Inc()
		l := wireLease(b.Lease, now)
		out[i].OK, out[i].Lease = true, &l
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": out})
	return nil
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) *apiError {
	var req releaseRequest
	if e := decodeBody(w, r, &req); e != nil {
		return e
	}
	if e := firstErr(checkKey("key", req.Key), checkHolder(req.Holder), checkRequestID(req.RequestID), s.writable()); e != nil {
		return e
	}
	res, err := s.propose(fsm.Command{Op: fsm.OpRelease, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, Token: req.Token})
	if err != nil {
		return proposalError(err)
	}
	if res.Err != nil {
		return s.commandError(res.Err, res.Now)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"released": res.Released})
	return nil
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) *apiError {
	q := r.URL.Query()
	key := q.Get("key")
	if e := checkKey("key", key); e != nil {
		return e
	}
	raw := q.Get("token")
	if raw == "" {
		return invalid("token", "token is required")
	}
	token, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return invalid("token", "token must be an unsigned integer")
	}
	now, e := s.readNow()
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "token": token, "valid": s.fsm.Check(key, token, now)})
	return nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) *apiError {
	key := r.URL.Query().Get("key")
	if e := checkKey("key", key); e != nil {
		return e
	}
	now, e := s.readNow()
	if e != nil {
		return e
	}
	l, ok := s.fsm.Get(key, now)
	if !ok {
		return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no live lease on this key"}
	}
	writeJSON(w, http.StatusOK, wireLease(l, now))
	return nil
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) *apiError {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if len(prefix) > locktable.MaxKeyLen {
		return invalid("prefix", "prefix is %d bytes; the limit is %d", len(prefix), locktable.MaxKeyLen)
	}
	limit := DefaultLimit
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > MaxLimit {
			return invalid("limit", "limit must be an integer between 1 and %d", MaxLimit)
		}
		limit = n
	}
	now, e := s.readNow()
	if e != nil {
		return e
	}
	leases := s.fsm.List(prefix, now, limit)
	out := make([]lease, len(leases))
	for i, l := range leases {
		out[i] = wireLease(l, now)
	}
	writeJSON(w, http.StatusOK, map[string]any{"locks": out})
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) *apiError {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) *apiError {
	// Ask the quorum only when this node believes it can serve.
	if e := s.writable(); e != nil {
		return e
	}
	if e := s.verifyLeader(); e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}
