// Package bench generates acquire+release load against a running fencelock
// server and measures cycles per second and cycle latency.
//
// It speaks the wire API directly (package api, docs/API.md), over one framed
// connection per server (internal/framing) or, with Config.HTTP, one tuned
// shared http.Client, so it measures the server, not a client library.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
)

// Modes.
const (
	// Uncontended: every client cycles on keys of its own.
	Uncontended = "uncontended"
	// Contended: every client waits on one key; each cycle is a FIFO
	// hand-off from the previous holder.
	Contended = "contended"
)

// Config says what load to generate. Zero fields take the defaults below.
type Config struct {
	Addr     string        // host:port of the server, or a comma-separated list of cluster nodes
	Mode     string        // Uncontended or Contended
	Clients  int           // concurrent clients (default 8)
	Duration time.Duration // how long to run (default 10s)
	TTL      time.Duration // lease TTL (default 10s)
	Prefix   string        // key prefix (default bench/<pid>-<time>)
	HTTP     bool          // HTTP/1.1 instead of framed connections
	// AuthToken is the bearer secret sent with every call on a cluster
	// with ACLs on; the holders are then named after its principal
	// (asked once: GET /v1/acl/whoami), and it needs lock on Prefix.
	AuthToken string
}

// Result is what a run measured. Latency is one full cycle: from sending
// the acquire to the release's answer (in contended mode it includes the
// time queued).
type Result struct {
	Mode     string
	Clients  int
	Cycles   int
	Errors   int
	Elapsed  time.Duration
	P50, P99 time.Duration
	Max      time.Duration
}

// PerSecond is completed cycles per second of the run.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Cycles) / r.Elapsed.Seconds()
}

// Summary is the last line the bench command prints.
func (r Result) Summary() string {
	return fmt.Sprintf("cycles/s=%.0f p50=%s p99=%s", r.PerSecond(), round(r.P50), round(r.P99))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// ErrUnreachable: no request reached the server.
var ErrUnreachable = errors.New("bench: server unreachable")

func (c Config) withDefaults() (Config, error) {
	if c.Mode == "" {
		c.Mode = Uncontended
	}
	if c.Mode != Uncontended && c.Mode != Contended {
		return c, fmt.Errorf("bench: mode %q: want %s or %s", c.Mode, Uncontended, Contended)
	}
	if c.Clients == 0 {
		c.Clients = 8
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.Clients < 1 || c.Duration < 0 || c.TTL < api.MinTTL {
		return c, fmt.Errorf("bench: need clients >= 1, duration >= 0, ttl >= 100ms")
	}
	if c.Prefix == "" {
		c.Prefix = fmt.Sprintf("bench/%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	return c, nil
}

// Run generates load until cfg.Duration has passed or ctx ends.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Clients * 2,
		MaxIdleConnsPerHost: cfg.Clients * 2,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	defer transport.CloseIdleConnections()
	b := &bench{cfg: cfg, http: &http.Client{Transport: transport}, frames: &framing.Pool{DialTimeout: 5 * time.Second}}
	defer b.frames.Close()
	b.findLeader(ctx)
	if cfg.AuthToken != "" {
		b.frames.Auth = "Bearer " + cfg.AuthToken
		p, err := b.principal(ctx)
		if err != nil {
			return Result{}, err
		}
		if p != "" {
			b.owner = p + "/"
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lat      []time.Duration
		errs     int
		reached  bool
		firstErr error
	)
	start := time.Now()
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine, nerr, ok, err := b.client(runCtx, i)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			errs += nerr
			reached = reached || ok
			if firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if !reached {
		return Result{}, fmt.Errorf("%w at %s: %v", ErrUnreachable, cfg.Addr, firstErr)
	}
	slices.Sort(lat)
	r := Result{Mode: cfg.Mode, Clients: cfg.Clients, Cycles: len(lat), Errors: errs, Elapsed: elapsed}
	if n := len(lat); n > 0 {
		r.P50 = lat[n*50/100]
		r.P99 = lat[min(n-1, n*99/100)]
		r.Max = lat[n-1]
	}
	return r, nil
}

type bench struct {
	cfg  Config
	http *http.Client
	base atomic.Pointer[string] // the node requests go to: the leader, in a cluster

	frames *framing.Pool // by host:port
	owner  string        // "<principal>/" with ACLs on: every holder starts with it
}

// principal asks the server who the bench's token authenticates as.
func (b *bench) principal(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *b.base.Load()+api.PathACLWhoAmI, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+b.cfg.AuthToken)
	resp, err := b.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w at %s: %v", ErrUnreachable, b.cfg.Addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
		return "", fmt.Errorf("bench: the auth token was refused: %s (%d %s)", e.Message, resp.StatusCode, e.Code)
	}
	var w api.WhoAmI
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&w); err != nil {
		return "", fmt.Errorf("bench: reading whoami: %w", err)
	}
	if !w.Auth || w.Principal == "" {
		return "", nil
	}
	return w.Principal, nil
}

// findLeader points the bench at the first address that serves writes, or
// at the leader one of them names; failing that at the first address (the
// run then reports it unreachable or its errors).
func (b *bench) findLeader(ctx context.Context) {
	addrs := strings.Split(b.cfg.Addr, ",")
	first := "http://" + strings.TrimSpace(addrs[0])
	b.base.Store(&first)
	for _, a := range addrs {
		base := "http://" + strings.TrimSpace(a)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+api.PathReady, nil)
		if err != nil {
			continue
		}
		resp, err := b.http.Do(req)
		if err != nil {
			continue
		}
		var e api.Error
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			b.base.Store(&base)
			return
		case e.Leader != "":
			l := "http://" + e.Leader
			b.base.Store(&l)
			return
		}
	}
}

// client runs cycles until ctx ends. It reports the latency of each
// completed cycle, the number of failed calls, whether any call reached
// the server, and the first transport error.
func (b *bench) client(ctx context.Context, id int) (lat []time.Duration, errs int, reached bool, firstErr error) {
	holder := fmt.Sprintf("%s%s/client-%d", b.owner, b.cfg.Prefix, id)
	ttlMs := api.Ms(b.cfg.TTL)
	waitMs := int64(0)
	if b.cfg.Mode == Contended {
		waitMs = min(max(api.Ms(b.cfg.Duration)*2, 1000), api.Ms(api.MaxWait))
	}
	if b.cfg.Mode == Contended {
		// A grant answered just as the run ended may never have been read;
		// the holder name is this client's alone, so release by holder.
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			var rel api.ReleaseResponse
			_, _ = b.post(cctx, api.PathRelease, api.ReleaseRequest{Key: b.cfg.Prefix + "/shared", Holder: holder}, &rel)
		}()
	}
	for i := 0; ctx.Err() == nil; i++ {
		key := b.cfg.Prefix + "/shared"
		if b.cfg.Mode == Uncontended {
			key = b.cfg.Prefix + "/" + strconv.Itoa(id) + "/" + strconv.Itoa(i%64)
		}
		// An acquire in flight is let finish when the run ends, so its lease
		// is released rather than left to expire. Cutting off a waiting
		// acquire instead would race the server: a grant committed before
		// the server notices the disconnect is answered to nobody. Once every
		// client stops asking, the queue drains one hand-off at a time.
		acqCtx, cancelAcq := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(waitMs)*time.Millisecond+10*time.Second)
		start := time.Now()
		var got api.Lease
		status, err := b.post(acqCtx, api.PathAcquire, api.AcquireRequest{
			Key: key, Holder: holder, TTLMs: ttlMs, WaitMs: waitMs,
		}, &got)
		cancelAcq()
		if err != nil {
			if ctx.Err() != nil {
				return lat, errs, reached, firstErr
			}
			if firstErr == nil {
				firstErr = err
			}
			errs++
			if !reached {
				return lat, errs, reached, firstErr
			}
			pause(ctx)
			continue
		}
		reached = true
		if status != http.StatusOK {
			errs++
			if status == http.StatusServiceUnavailable {
				pause(ctx)
			}
			continue
		}
		// The release is never cut off by the end of the run, so no key is
		// left held; a cycle counts only if it completed within the run.
		relCtx, cancelRel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		var rel api.ReleaseResponse
		status, err = b.post(relCtx, api.PathRelease, api.ReleaseRequest{Key: key, Holder: holder, Token: got.Token}, &rel)
		cancelRel()
		if err != nil || status != http.StatusOK || !rel.Released {
			if ctx.Err() == nil {
				errs++
			}
			continue
		}
		if ctx.Err() == nil {
			lat = append(lat, time.Since(start))
		}
	}
	return lat, errs, reached, firstErr
}

// pause waits a little after a failed call, so that clients do not spin
// while a cluster elects a leader.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Millisecond):
	}
}

// post sends one call. A not_leader answer that names the leader moves
// the bench there and the call is sent again, at most twice.
func (b *bench) post(ctx context.Context, path string, body, out any) (int, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		status, raw, err := b.send(ctx, path, data)
		if err != nil {
			if ctx.Err() == nil && strings.Contains(b.cfg.Addr, ",") {
				b.findLeader(ctx) // the node may be gone: look for the leader again
			}
			return status, err
		}
		if status == http.StatusServiceUnavailable && attempt < 2 {
			var e api.Error
			if json.Unmarshal(raw, &e) == nil && e.Code == api.CodeNotLeader && e.Leader != "" {
				l := "http://" + e.Leader
				b.base.Store(&l)
				continue
			}
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return status, fmt.Errorf("bench: %s answered %d %q", path, status, raw)
		}
		return status, nil
	}
}

func (b *bench) send(ctx context.Context, path string, data []byte) (int, []byte, error) {
	base := *b.base.Load()
	if !b.cfg.HTTP {
		fc, err := b.frames.Get(ctx, strings.TrimPrefix(base, "http://"))
		if err != nil {
			return 0, nil, err
		}
		if fc != nil {
			return fc.RoundTrip(ctx, http.MethodPost, path, data)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", api.ContentType)
	if b.cfg.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.AuthToken)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}
