package clienttest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/client"
)

// Server is an in-memory test double of the fencelock server that speaks the
// wire contract of docs/API.md over a real loopback HTTP listener. It keeps
// time on the given clock, so with a *Clock a test decides when leases
// expire and waits elapse. It is not durable and knows nothing of clusters
// beyond answering not_leader when told to.
type Server struct {
	URL   string // base URL, e.g. http://127.0.0.1:34567
	Addr  string // host:port
	srv   *httptest.Server
	clock client.Clock
	stop  chan struct{} // closed by Close: hung requests end
	once  sync.Once

	mu        sync.Mutex
	locks     map[string]*entry
	last      uint64
	counts    map[string]int
	ids       map[string][]string // route -> request ids, in arrival order
	faults    map[string]string   // route -> wire code to answer, or "drop"
	notLeader *string
}

type entry struct {
	key     string
	holder  string
	token   uint64
	ttl     time.Duration
	expiry  time.Time
	held    bool
	waiters []*waiter
	timer   client.Timer
}

type waiter struct {
	holder string
	ttl    time.Duration
	ch     chan client.Lock // buffered: the grant
}

// NewServer starts a fake server on 127.0.0.1. Close it when done.
func NewServer(clock client.Clock) *Server {
	s := &Server{clock: clock, stop: make(chan struct{}), locks: map[string]*entry{}, counts: map[string]int{}, ids: map[string][]string{}, faults: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	s.Addr = strings.TrimPrefix(s.URL, "http://")
	return s
}

// Close stops the server, cutting off requests still waiting in a queue.
// Calls after the first do nothing.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// Count returns how many requests reached route ("acquire", "extend", …).
func (s *Server) Count(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[route]
}

// RequestIDs returns the request_id of every write that reached route, in
// the order they arrived.
func (s *Server) RequestIDs(route string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids[route]...)
}

// Fail makes every later request to route answer the wire error code
// ("not_held", "unavailable", …), or, with code "drop", close the connection
// without an answer (the client sees the server as unreachable), or, with
// code "hang", never answer until the client gives up or the server closes
// (a frozen node). An empty code heals the route.
func (s *Server) Fail(route, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == "" {
		delete(s.faults, route)
		return
	}
	s.faults[route] = code
}

// NotLeader makes every request answer 503 not_leader naming leader; nil
// makes this node serve again.
func (s *Server) NotLeader(leader *string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notLeader = leader
}

// Waiters returns the holders queued on key, head first.
func (s *Server) Waiters(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[key]
	if e == nil {
		return nil
	}
	var out []string
	for _, w := range e.waiters {
		out = append(out, w.holder)
	}
	return out
}

// Holder returns who holds key live, and its token.
func (s *Server) Holder(key string) (string, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[key]
	if e == nil {
		return "", 0, false
	}
	s.settle(e, s.clock.Now())
	return e.holder, e.token, e.held
}

type wireErr struct {
	Error       string `json:"error"`
	Code        string `json:"code"`
	Field       string `json:"field,omitempty"`
	Holder      string `json:"holder,omitempty"`
	RemainingMS int64  `json:"remaining_ms,omitempty"`
	Leader      string `json:"leader,omitempty"`
}

var codeStatus = map[string]int{
	"invalid_argument": 400, "held": 409, "not_held": 409, "not_found": 404,
	"method_not_allowed": 405, "not_leader": 503, "unavailable": 503, "internal": 500,
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, e wireErr) { reply(w, codeStatus[e.Code], e) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	route := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
	s.mu.Lock()
	s.counts[route]++
	fault, nl := s.faults[route], s.notLeader
	s.mu.Unlock()
	if nl != nil {
		fail(w, wireErr{Error: "not the leader", Code: "not_leader", Leader: *nl})
		return
	}
	switch fault {
	case "":
	case "hang":
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
		return
	case "drop":
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		fail(w, wireErr{Error: "dropped", Code: "unavailable"})
		return
	default:
		fail(w, wireErr{Error: "injected " + fault, Code: fault})
		return
	}
	want := http.MethodPost
	if route == "check" || route == "lock" || route == "locks" || route == "healthz" {
		want = http.MethodGet
	}
	handlers := map[string]func(http.ResponseWriter, *http.Request){
		"acquire": s.acquire, "renew": s.renew, "extend": s.extend, "extend-batch": s.extendBatch,
		"release": s.release, "check": s.check, "lock": s.get, "locks": s.list,
		"healthz": func(w http.ResponseWriter, _ *http.Request) { reply(w, 200, map[string]string{"status": "ok"}) },
	}
	h, ok := handlers[route]
	switch {
	case !ok || !strings.HasPrefix(r.URL.Path, "/v1/") && route != "healthz":
		fail(w, wireErr{Error: "no such route", Code: "not_found"})
	case r.Method != want:
		fail(w, wireErr{Error: "use " + want, Code: "method_not_allowed"})
	default:
		h(w, r)
	}
}

type request struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	TTLMS     int64  `json:"ttl_ms"`
	WaitMS    int64  `json:"wait_ms"`
	RequestID string `json:"request_id"`
	Leases    []struct {
		Key   string `json:"key"`
		Token uint64 `json:"token"`
	} `json:"leases"`
}

// decode reads and validates a write's body; needKey/needTTL say which
// fields the call requires.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, needKey, needTTL bool) (request, bool) {
	var req request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		fail(w, wireErr{Error: "bad JSON: " + err.Error(), Code: "invalid_argument", Field: "body"})
		return req, false
	}
	if req.RequestID != "" {
		route := strings.TrimPrefix(r.URL.Path, "/v1/")
		s.mu.Lock()
		s.ids[route] = append(s.ids[route], req.RequestID)
		s.mu.Unlock()
	}
	bad := func(field, msg string) (request, bool) {
		fail(w, wireErr{Error: msg, Code: "invalid_argument", Field: field})
		return req, false
	}
	switch {
	case needKey && (req.Key == "" || len(req.Key) > 1024):
		return bad("key", "key must be 1..1024 bytes")
	case req.Holder == "" || len(req.Holder) > 256:
		return bad("holder", "holder must be 1..256 bytes")
	case needTTL && (req.TTLMS < 100 || req.TTLMS > 86400000):
		return bad("ttl_ms", "ttl_ms must be between 100 and 86400000")
	case req.WaitMS < 0 || req.WaitMS > 3600000:
		return bad("wait_ms", "wait_ms must be between 0 and 3600000")
	}
	return req, true
}

func (s *Server) entryLocked(key string) *entry {
	e := s.locks[key]
	if e == nil {
		e = &entry{key: key}
		s.locks[key] = e
	}
	return e
}

// settle expires e's lease at now and hands the key to the head waiter.
func (s *Server) settle(e *entry, now time.Time) {
	if e.held && !now.Before(e.expiry) {
		e.held = false
	}
	for !e.held && len(e.waiters) > 0 {
		w := e.waiters[0]
		e.waiters = e.waiters[1:]
		w.ch <- s.grant(e, w.holder, w.ttl, now)
	}
}

func (s *Server) grant(e *entry, holder string, ttl time.Duration, now time.Time) client.Lock {
	s.last++
	e.holder, e.token, e.ttl, e.held = holder, s.last, ttl, true
	s.setExpiry(e, now.Add(ttl))
	return s.lockOf(e, now)
}

func (s *Server) setExpiry(e *entry, at time.Time) {
	e.expiry = at
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = s.clock.AfterFunc(at.Sub(s.clock.Now()), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.settle(e, s.clock.Now())
	})
}

func (s *Server) lockOf(e *entry, now time.Time) client.Lock {
	return client.Lock{Key: e.key, Holder: e.holder, Token: e.token, TTL: e.ttl, Remaining: e.expiry.Sub(now)}
}

func (s *Server) held(w http.ResponseWriter, e *entry, now time.Time) {
	fail(w, wireErr{Error: "held by another holder", Code: "held", Holder: e.holder, RemainingMS: e.expiry.Sub(now).Milliseconds()})
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decode(w, r, true, true)
	if !ok {
		return
	}
	ttl := time.Duration(req.TTLMS) * time.Millisecond
	s.mu.Lock()
	now := s.clock.Now()
	e := s.entryLocked(req.Key)
	s.settle(e, now)
	if !e.held || e.holder == req.Holder {
		lk := s.grant(e, req.Holder, ttl, now)
		s.mu.Unlock()
		reply(w, 200, lk)
		return
	}
	if req.WaitMS == 0 {
		s.held(w, e, now)
		s.mu.Unlock()
		return
	}
	wt := &waiter{holder: req.Holder, ttl: ttl, ch: make(chan client.Lock, 1)}
	e.waiters = append(e.waiters, wt)
	// The wait is timed from the same instant the waiter became visible.
	elapsed := make(chan struct{})
	t := s.clock.AfterFunc(time.Duration(req.WaitMS)*time.Millisecond, func() { close(elapsed) })
	defer t.Stop()
	s.mu.Unlock()

	select {
	case lk := <-wt.ch:
		reply(w, 200, lk)
	case <-elapsed:
		if lk, granted := s.leave(e, wt); granted {
			reply(w, 200, lk)
			return
		}
		s.mu.Lock()
		s.held(w, e, s.clock.Now())
		s.mu.Unlock()
	case <-r.Context().Done():
		s.leave(e, wt) // a grant that crossed the disconnect simply expires
	}
}

// leave takes wt out of e's queue, or returns the grant it got meanwhile.
func (s *Server) leave(e *entry, wt *waiter) (client.Lock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range e.waiters {
		if x == wt {
			e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
			return client.Lock{}, false
		}
	}
	return <-wt.ch, true
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decode(w, r, true, true)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e := s.entryLocked(req.Key)
	s.settle(e, now)
	if !e.held || e.holder != req.Holder {
		fail(w, wireErr{Error: "not the live holder", Code: "not_held"})
		return
	}
	reply(w, 200, s.grant(e, req.Holder, time.Duration(req.TTLMS)*time.Millisecond, now))
}

// extendLocked extends (key, holder, token) or says why not.
func (s *Server) extendLocked(key, holder string, token uint64, ttl time.Duration, now time.Time) (client.Lock, bool) {
	e := s.locks[key]
	if e == nil {
		return client.Lock{}, false
	}
	s.settle(e, now)
	if !e.held || e.holder != holder || e.token != token {
		return client.Lock{}, false
	}
	e.ttl = ttl
	s.setExpiry(e, now.Add(ttl))
	return s.lockOf(e, now), true
}

func (s *Server) extend(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decode(w, r, true, true)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lk, ok := s.extendLocked(req.Key, req.Holder, req.Token, time.Duration(req.TTLMS)*time.Millisecond, s.clock.Now())
	if !ok {
		fail(w, wireErr{Error: "not the live holder", Code: "not_held"})
		return
	}
	reply(w, 200, lk)
}

func (s *Server) extendBatch(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decode(w, r, false, true)
	if !ok {
		return
	}
	type result struct {
		Key   string       `json:"key"`
		Token uint64       `json:"token"`
		OK    bool         `json:"ok"`
		Lease *client.Lock `json:"lease,omitempty"`
		Code  string       `json:"code,omitempty"`
		Error string       `json:"error,omitempty"`
	}
	out := struct {
		Results []result `json:"results"`
	}{Results: []result{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, l := range req.Leases {
		lk, ok := s.extendLocked(l.Key, req.Holder, l.Token, time.Duration(req.TTLMS)*time.Millisecond, now)
		if ok {
			out.Results = append(out.Results, result{Key: l.Key, Token: l.Token, OK: true, Lease: &lk})
		} else {
			out.Results = append(out.Results, result{Key: l.Key, Token: l.Token, Code: "not_held", Error: "not the live holder"})
		}
	}
	reply(w, 200, out)
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	req, ok := s.decode(w, r, true, false)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	e := s.entryLocked(req.Key)
	s.settle(e, now)
	released := e.held && e.holder == req.Holder && (req.Token == 0 || req.Token == e.token)
	if released {
		e.held = false
		e.timer.Stop()
		s.settle(e, now)
	}
	reply(w, 200, map[string]bool{"released": released})
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	token, err := strconv.ParseUint(r.URL.Query().Get("token"), 10, 64)
	if key == "" || err != nil {
		fail(w, wireErr{Error: "key and token are required", Code: "invalid_argument", Field: "token"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	valid := false
	if e := s.locks[key]; e != nil {
		s.settle(e, s.clock.Now())
		valid = e.held && e.token == token
	}
	reply(w, 200, map[string]any{"key": key, "token": token, "valid": valid})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if e := s.locks[key]; e != nil {
		s.settle(e, now)
		if e.held {
			reply(w, 200, s.lockOf(e, now))
			return
		}
	}
	fail(w, wireErr{Error: "no lease on " + strconv.Quote(key), Code: "not_found"})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := []client.Lock{}
	for k, e := range s.locks {
		s.settle(e, now)
		if e.held && strings.HasPrefix(k, prefix) {
			out = append(out, s.lockOf(e, now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	reply(w, 200, map[string]any{"locks": out})
}
