package peerbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/callcodec"
	"github.com/fencelock/fencelock/internal/framing"
)

// The fencelock driver speaks the wire contract (package api, docs/API.md)
// directly, so the numbers measure the server, not a particular client
// library. It
// carries the requests on framed connections (internal/framing), as the
// client package does by default, or over HTTP/1.1 when
// Options.FencelockHTTP is set.

type flSystem struct {
	o      Options
	base   string
	hc     *http.Client
	frames []*framing.Conn // nil over HTTP
	next   atomic.Uint32
}

// flFramedConns is how many framed connections the clients share: one, as
// with the client package. More batch fewer requests per system call: W1
// gave 7,302–8,318 cycles/s over one connection and 6,198–7,894 over four
// (interleaved 6 s runs).
const flFramedConns = 1

func openFencelock(ctx context.Context, o Options) (System, error) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * o.Clients,
		MaxIdleConnsPerHost: 4 * o.Clients, // every client keeps its connection
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	hc := &http.Client{Transport: tr}
	hctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if addrs := o.addrs(); len(addrs) > 1 {
		// A cluster: the work goes to its leader, as the client package's
		// would after its first not_leader answer.
		leader, err := flLeader(hctx, hc, addrs)
		if err != nil {
			tr.CloseIdleConnections()
			return nil, unreachable("fencelock", o.Addr, err)
		}
		o.Addr = leader
	}
	s := &flSystem{o: o, base: "http://" + o.Addr, hc: hc}
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, s.base+api.PathHealth, nil)
	if err != nil {
		return nil, fmt.Errorf("peerbench: fencelock: %w", err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, unreachable("fencelock", o.Addr, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tr.CloseIdleConnections()
		return nil, unreachable("fencelock", o.Addr, fmt.Errorf("%s answered %s", api.PathHealth, resp.Status))
	}
	if o.FencelockHTTP {
		return s, nil
	}
	for range flFramedConns {
		fc, err := framing.Dial(hctx, o.Addr)
		if err != nil {
			s.Close()
			return nil, unreachable("fencelock", o.Addr, err)
		}
		s.frames = append(s.frames, fc)
		// Learn which calls go in binary before the clock starts.
		select {
		case <-fc.CallsKnown():
		case <-hctx.Done():
			s.Close()
			return nil, unreachable("fencelock", o.Addr, hctx.Err())
		}
	}
	return s, nil
}

// flLeader asks each of addrs for the cluster's members and returns the
// leader's client address, from the first node that knows it.
func flLeader(ctx context.Context, hc *http.Client, addrs []string) (string, error) {
	var last error
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+api.PathMembers, nil)
		if err != nil {
			return "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			last = err
			continue
		}
		var m api.MembersResponse
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m)
		resp.Body.Close()
		switch {
		case err != nil:
			last = fmt.Errorf("%s: members: %w", a, err)
		case m.LeaderAddr != "":
			return m.LeaderAddr, nil
		case m.Leader != "" && m.Leader == m.Node:
			// It leads but has no client address on record (a server
			// started without one): it is where we asked.
			return a, nil
		default:
			last = fmt.Errorf("%s knows no leader", a)
		}
	}
	return "", fmt.Errorf("no leader among %v: %w", addrs, last)
}

func (s *flSystem) Name() string { return "fencelock" }

func (s *flSystem) Close() error {
	s.hc.CloseIdleConnections()
	for _, fc := range s.frames {
		fc.Close()
	}
	return nil
}

func (s *flSystem) NewClient(ctx context.Context, id int) (Client, error) {
	return &flClient{s: s, holder: fmt.Sprintf("c%d-%x", id, rand.Uint64())}, nil
}

type flClient struct {
	s      *flSystem
	holder string
}

func (c *flClient) Close() error { return nil }

// post sends one JSON request and decodes a 200 answer into out. A non-2xx
// answer comes back as its API code with a nil error, so callers can tell
// "held" from a failure.
func (s *flSystem) post(ctx context.Context, route string, in, out any) (code string, err error) {
	status, data, binary, err := s.callBinary(ctx, route, in)
	if !binary && err == nil {
		var body []byte
		if body, err = json.Marshal(in); err != nil {
			return "", fmt.Errorf("peerbench: fencelock %s: %w", route, err)
		}
		status, data, err = s.roundTrip(ctx, route, body)
	}
	if err != nil {
		return "", fmt.Errorf("peerbench: fencelock %s: %w", route, err)
	}
	if binary && status/100 == 2 {
		if err := callcodec.DecodeAnswer(data, out); err != nil {
			return "", fmt.Errorf("peerbench: fencelock %s: decode: %w", route, err)
		}
		return "", nil
	}
	if status/100 != 2 {
		var e api.Error
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			return "", fmt.Errorf("peerbench: fencelock %s: HTTP %d: %.200s", route, status, data)
		}
		switch e.Code {
		case api.CodeHeld, api.CodeNotHeld:
			return e.Code, nil
		}
		return "", fmt.Errorf("peerbench: fencelock %s: %s (%s)", route, e.Message, e.Code)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return "", fmt.Errorf("peerbench: fencelock %s: decode: %w", route, err)
		}
	}
	return "", nil
}

// callBinary sends in as a binary call when the framed connection's
// server takes route that way and the driver is not told to use JSON;
// binary is false when it did not send.
func (s *flSystem) callBinary(ctx context.Context, route string, in any) (status int, data []byte, binary bool, err error) {
	if s.frames == nil || s.o.FencelockJSON {
		return 0, nil, false, nil
	}
	fc := s.frames[s.next.Add(1)%uint32(len(s.frames))]
	if !fc.Calls(route) {
		return 0, nil, false, nil
	}
	body, ok := callcodec.AppendRequest(nil, in)
	if !ok {
		return 0, nil, false, nil
	}
	if t, ok := ctx.Value(sentKey{}).(*atomic.Pointer[time.Time]); ok {
		now := time.Now()
		t.Store(&now)
	}
	status, data, err = fc.RoundTrip(ctx, framing.MethodCall, route, body)
	return status, data, true, err
}

// roundTrip POSTs body to route and returns the answer's status and body.
func (s *flSystem) roundTrip(ctx context.Context, route string, body []byte) (int, []byte, error) {
	if s.frames != nil {
		fc := s.frames[s.next.Add(1)%uint32(len(s.frames))]
		if t, ok := ctx.Value(sentKey{}).(*atomic.Pointer[time.Time]); ok {
			now := time.Now()
			t.Store(&now)
		}
		return fc.RoundTrip(ctx, http.MethodPost, route, body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+route, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", api.ContentType)
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read: %w", err)
	}
	return resp.StatusCode, data, nil
}

// sentKey carries, in a framed request's context, where to note the time
// the request was written (HTTP requests use httptrace for that).
type sentKey struct{}

// maxWait is the API's longest wait_ms; Lock re-queues after it.
const maxWait = api.MaxWait

// Lock waits in the key's server-side FIFO queue (wait_ms), as long as ctx
// allows; the server hands the lock to the head waiter on release.
func (c *flClient) Lock(ctx context.Context, key string) (Lease, error) {
	for {
		wait := maxWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if wait < time.Millisecond {
			// Less than wait_ms can express: let the deadline arrive.
			<-ctx.Done()
			return nil, ctx.Err()
		}
		// Note when the request left, so W2 can also order waits by it.
		// The hook runs on the transport's write goroutine.
		var sent atomic.Pointer[time.Time]
		tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { t := time.Now(); sent.Store(&t) },
		})
		tctx = context.WithValue(tctx, sentKey{}, &sent)
		l, code, err := c.acquire(tctx, key, c.s.o.TTL, wait)
		if t := sent.Load(); err == nil && code == "" && t != nil {
			l.(*flLease).sent = *t
		}
		if err != nil || code == "" {
			return l, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (c *flClient) acquire(ctx context.Context, key string, ttl, wait time.Duration) (Lease, string, error) {
	var lb api.Lease
	code, err := c.s.post(ctx, api.PathAcquire, api.AcquireRequest{Key: key, Holder: c.holder, TTLMs: api.Ms(ttl), WaitMs: api.Ms(wait)}, &lb)
	if err != nil || code != "" {
		return nil, code, err
	}
	return &flLease{c: c, key: key, token: lb.Token, ttl: ttl}, "", nil
}

func (c *flClient) Hold(ctx context.Context, key string, ttl time.Duration) (Lease, error) {
	l, code, err := c.acquire(ctx, key, ttl, 0)
	if err != nil {
		return nil, err
	}
	if code != "" {
		return nil, fmt.Errorf("peerbench: fencelock hold %q: %s", key, code)
	}
	return l, nil
}

type flLease struct {
	c     *flClient
	key   string
	token uint64
	ttl   time.Duration
	sent  time.Time // when the granted acquire was written; zero for Hold
}

func (l *flLease) Token() uint64 { return l.token }

// SentAt is when the request that was granted was written to the socket.
func (l *flLease) SentAt() time.Time { return l.sent }

func (l *flLease) Extend(ctx context.Context) error {
	code, err := l.c.s.post(ctx, api.PathExtend, api.ExtendRequest{Key: l.key, Holder: l.c.holder, Token: l.token, TTLMs: api.Ms(l.ttl)}, nil)
	if err != nil {
		return err
	}
	if code != "" {
		return ErrNotHeld
	}
	return nil
}

func (l *flLease) Unlock(ctx context.Context) error {
	var out api.ReleaseResponse
	code, err := l.c.s.post(ctx, api.PathRelease, api.ReleaseRequest{Key: l.key, Holder: l.c.holder, Token: l.token}, &out)
	if err != nil {
		return err
	}
	if code != "" || !out.Released {
		return ErrNotHeld
	}
	return nil
}

func (s *flSystem) addr() string { return s.o.Addr }

// SnapshotBytes is the size of the server's data directory (Options.DataDir),
// which holds what it restarts from.
func (s *flSystem) SnapshotBytes(ctx context.Context) (int64, error) {
	if s.o.DataDir == "" {
		return 0, errors.New("data directory not given")
	}
	return dirSize(s.o.DataDir)
}

// Valid asks the server whether token is key's live grant (GET /v1/check).
func (s *flSystem) Valid(ctx context.Context, key string, token uint64) (bool, error) {
	u := s.base + api.PathCheck + "?" + url.Values{api.QueryKey: {key}, api.QueryToken: {strconv.FormatUint(token, 10)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("peerbench: fencelock check: %w", err)
	}
	defer resp.Body.Close()
	var c api.CheckResponse
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return false, fmt.Errorf("peerbench: fencelock check: HTTP %d: %s", resp.StatusCode, data)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&c); err != nil {
		return false, fmt.Errorf("peerbench: fencelock check: %w", err)
	}
	return c.Valid, nil
}
