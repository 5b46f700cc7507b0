package server

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// headerBudget bounds the bytes HTTP connections hold while net/http
// reads their requests' headers: before any handler has run, so before
// anyone has authenticated. A request may use headerFree bytes of its
// own; past that, what a connection reads while its headers arrive is
// taken from its remote address's budget (perAddr) and from the
// server's (total), and given back once the headers are complete (the
// handler runs) or the connection closes. A connection whose next read
// finds no room is answered 503 too_many_connections and closed. Small
// requests (a /healthz, a call with a token) never wait on the budget,
// so a host holding its whole budget in large headers shuts out nobody
// but its own large ones; without it, 4,000 connections sending 60 KiB
// of headers from one address held 360 MB.
type headerBudget struct {
	perAddr, total int64
	log            *slog.Logger
	refused        prometheus.Counter

	mu          sync.Mutex
	byAddr      map[string]int64
	held        int64
	lastLog     time.Time
	unlogged    int
	logInterval time.Duration
}

// headerFree is what a request's headers may hold before they count
// against the budgets: net/http's read buffer, which every connection
// has anyway.
const headerFree = 4 << 10

// The budgets' defaults: 16 requests of the largest headers
// (maxHeaderBytes) from one address at once, 256 in all.
const (
	DefaultHeaderBudgetPerAddr = 1 << 20
	DefaultHeaderBudget        = 16 << 20
)

func newHeaderBudget(perAddr, total int64, log *slog.Logger) *headerBudget {
	return &headerBudget{perAddr: perAddr, total: total, log: log, logInterval: time.Second,
		byAddr: make(map[string]int64),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_http_header_budget_refused_total",
			Help: "HTTP connections closed while their request's headers were read, their address or the server being at its budget of header bytes.",
		})}
}

func (b *headerBudget) collectors() []prometheus.Collector {
	return []prometheus.Collector{b.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_http_header_bytes_held",
			Help: "Bytes of HTTP request headers being read, past each request's first 4 KiB, over all connections.",
		}, func() float64 {
			b.mu.Lock()
			defer b.mu.Unlock()
			return float64(b.held)
		}),
	}
}

// take counts n bytes against ip's budget and the total, if both have
// room.
func (b *headerBudget) take(ip string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byAddr[ip]+n > b.perAddr || b.held+n > b.total {
		return false
	}
	b.byAddr[ip] += n
	b.held += n
	return true
}

func (b *headerBudget) give(ip string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byAddr[ip] -= n; b.byAddr[ip] <= 0 {
		delete(b.byAddr, ip)
	}
	b.held -= n
}

// listener wraps the connections ln hands to net/http.
func (b *headerBudget) listener(ln net.Listener) net.Listener {
	return &headerListener{Listener: ln, b: b}
}

type headerListener struct {
	net.Listener
	b *headerBudget
}

func (l *headerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headerConn{Conn: c, b: l.b, ip: remoteIP(c), reading: true}, nil
}

// connState is the http.Server's ConnState hook: a request's headers are
// read while its connection is new or idle; once it is active they are
// complete.
func (b *headerBudget) connState(c net.Conn, st http.ConnState) {
	hc, ok := c.(*headerConn)
	if !ok {
		return
	}
	hc.mu.Lock()
	held := hc.held
	hc.held, hc.read = 0, 0
	hc.reading = st == http.StateIdle || st == http.StateNew
	hc.mu.Unlock()
	b.give(hc.ip, held)
}

// errHeaderBudget ends a connection whose headers found no room. It is
// a read error to net/http, which then closes the connection without an
// answer of its own.
var errHeaderBudget = &net.OpError{Op: "read", Net: "tcp",
	Err: errors.New("the connections from this address are reading too many header bytes at once")}

var tooManyHeaderBytes = connRefusal("too many header bytes being read: your address or the server is at its budget of request headers not yet read through (--header-budget-per-address, --header-budget)")

// headerConn counts what it reads while a request's headers arrive.
type headerConn struct {
	net.Conn
	b  *headerBudget
	ip string

	mu      sync.Mutex
	reading bool  // a request's headers are being read
	read    int64 // bytes read since they began
	held    int64 // of those, taken from the budgets
	refused bool  // answered 503: every read fails
}

func (c *headerConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.refused {
		// net/http's reader forgets an error once it has returned it,
		// and may read again.
		c.mu.Unlock()
		return 0, errHeaderBudget
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.mu.Lock()
	if !c.reading {
		c.mu.Unlock()
		return n, err
	}
	c.read += int64(n)
	over := c.read - headerFree - c.held
	if over <= 0 || c.b.take(c.ip, over) {
		c.held += max(over, 0)
		c.mu.Unlock()
		return n, err
	}
	c.refused = true
	c.mu.Unlock()
	c.b.refuse(c)
	return 0, errHeaderBudget
}

// unwrapHeaderConn is the connection c counts for, for what looks
// through it (the TLS state).
func unwrapHeaderConn(c net.Conn) net.Conn {
	if hc, ok := c.(*headerConn); ok {
		return hc.Conn
	}
	return c
}

// refuse answers c and counts it; net/http closes it on the read error.
func (b *headerBudget) refuse(c *headerConn) {
	b.refused.Inc()
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write([]byte(tooManyHeaderBytes))
	b.mu.Lock()
	b.unlogged++
	now := time.Now()
	if now.Sub(b.lastLog) < b.logInterval {
		b.mu.Unlock()
		return
	}
	n := b.unlogged
	b.unlogged, b.lastLog = 0, now
	b.mu.Unlock()
	b.log.Warn("refusing HTTP requests: their headers are past the budget of header bytes being read", "remote", c.ip,
		"header_budget_per_address", b.perAddr, "header_budget", b.total, "refused", n,
		"hint", "a client sending large headers from many connections at once; --header-budget-per-address and --header-budget raise the budgets")
}
