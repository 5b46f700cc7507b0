package server

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock/api"
)

// FDReserve is how many file descriptors the connection cap leaves to
// everything that is not a client connection: the log's segments and
// metadata, snapshots being written or read, raft peers, the listeners.
// Running out of them could seal the log for good; with the
// reserve, a client flood is refused at accept and the log can always
// open its next segment.
func FDReserve(limit uint64) uint64 {
	r := limit / 10
	if r < 128 {
		r = 128
	}
	return r
}

// ConnectionCap is the default cap on open client connections for an
// open-file limit: the limit less FDReserve. It is an error when nothing
// would be left for clients.
func ConnectionCap(limit uint64) (int, error) {
	r := FDReserve(limit)
	if limit < r+16 {
		return 0, fmt.Errorf("server: the open-file limit %d leaves no room for client connections after the %d kept for the log and peers; raise it (ulimit -n)", limit, r)
	}
	return int(limit - r), nil
}

// RaftConnectionCaps are the default caps of the raft port for an
// open-file limit: the connections raft holds and the handshakes in
// progress, together at most three quarters of FDReserve so that the
// log and snapshots keep the rest (at 1,024 files: 64 and 32 of the 128
// kept).
func RaftConnectionCaps(limit uint64) (conns, handshakes int) {
	r := FDReserve(limit)
	return int(min(r/2, 128)), int(min(r/4, 32))
}

// connLimiter caps the connections accepted from a listener, in total and
// per remote address (IP). A connection over either cap is answered 503
// too_many_connections (an HTTP answer: a framed client reads it as a
// refused preface, framing.ErrRefused, and tries again later) and closed;
// it is counted, and logged at most once a second with the number refused
// since the last line.
type connLimiter struct {
	net.Listener
	max, perAddr   int // perAddr 0: no per-address cap
	log            *slog.Logger
	open           atomic.Int64
	refused        prometheus.Counter
	refusedPerAddr prometheus.Counter

	mu          sync.Mutex
	byAddr      map[string]int // open connections by remote IP
	lastLog     time.Time
	unlogged    int
	logInterval time.Duration
}

func newConnLimiter(ln net.Listener, max, perAddr int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perAddr: perAddr, log: log, logInterval: time.Second,
		byAddr: make(map[string]int),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_connections_refused_total",
			Help: "Client connections closed at accept because a connection cap (in total or per address) was reached.",
		}),
		refusedPerAddr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_connections_refused_per_address_total",
			Help: "Client connections closed at accept because their remote address was at its per-address cap.",
		})}
}

// collectors are the limiter's metrics.
func (l *connLimiter) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.refused, l.refusedPerAddr,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_connections_open", Help: "Client connections open now.",
		}, func() float64 { return float64(l.open.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_connections_max", Help: "The cap on open client connections.",
		}, func() float64 { return float64(l.max) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_connections_max_per_address", Help: "The cap on open client connections from one remote address (0: none).",
		}, func() float64 { return float64(l.perAddr) }),
	}
}

// connRefusal is the whole HTTP answer to a connection over a cap.
func connRefusal(message string) string {
	body := `{"error":"` + message + `","code":"` + api.CodeTooManyConns + `"}`
	return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

var (
	tooManyConnections        = connRefusal("too many connections: the server is at its connection cap")
	tooManyConnectionsPerAddr = connRefusal("too many connections from your address: it is at the server's per-address cap")
)

// remoteIP is the host part of c's remote address (the whole address when
// it has no port).
func remoteIP(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > int64(l.max) {
			l.open.Add(-1)
			l.refused.Inc()
			l.refuse(c, tooManyConnections, "refusing client connections: at the connection cap")
			continue
		}
		ip := remoteIP(c)
		l.mu.Lock()
		full := l.perAddr > 0 && l.byAddr[ip] >= l.perAddr
		if !full {
			l.byAddr[ip]++
		}
		l.mu.Unlock()
		if full {
			l.open.Add(-1)
			l.refused.Inc()
			l.refusedPerAddr.Inc()
			l.refuse(c, tooManyConnectionsPerAddr, "refusing client connections: at the connection cap of one address", "remote", ip)
			continue
		}
		return &limitedConn{Conn: c, l: l, ip: ip}, nil
	}
}

func (l *connLimiter) refuse(c net.Conn, answer, msg string, attrs ...any) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write([]byte(answer))
	c.Close()
	l.mu.Lock()
	l.unlogged++
	now := time.Now()
	if now.Sub(l.lastLog) < l.logInterval {
		l.mu.Unlock()
		return
	}
	n := l.unlogged
	l.unlogged, l.lastLog = 0, now
	l.mu.Unlock()
	attrs = append(attrs, "max_connections", l.max, "max_connections_per_address", l.perAddr, "refused", n,
		"hint", "raise the open-file limit (ulimit -n), --max-connections or --max-connections-per-address, or close idle clients")
	l.log.Warn(msg, attrs...)
}

// limitedConn gives its slots back once, on the first Close.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	ip   string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		if c.l.byAddr[c.ip]--; c.l.byAddr[c.ip] <= 0 {
			delete(c.l.byAddr, c.ip)
		}
		c.l.mu.Unlock()
	})
	return err
}
