package server

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FDReserve is how many file descriptors the connection cap leaves to
// everything that is not a client connection: the log's segments and
// metadata, snapshots being written or read, raft peers, the listeners.
// Running out of them once sealed the log for good (issue 11); with the
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

// connLimiter caps the connections accepted from a listener. A connection
// over the cap is answered 503 too_many_connections (an HTTP answer: a
// framed client reads it as a failed preface and reconnects later) and
// closed; it is counted, and logged at most once a second with the number
// refused since the last line.
type connLimiter struct {
	net.Listener
	max     int
	log     *slog.Logger
	open    atomic.Int64
	refused prometheus.Counter

	mu          sync.Mutex
	lastLog     time.Time
	unlogged    int
	logInterval time.Duration
}

func newConnLimiter(ln net.Listener, max int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, log: log, logInterval: time.Second,
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencelock_connections_refused_total",
			Help: "Client connections closed at accept because the connection cap was reached.",
		})}
}

// collectors are the limiter's metrics.
func (l *connLimiter) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_connections_open", Help: "Client connections open now.",
		}, func() float64 { return float64(l.open.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencelock_connections_max", Help: "The cap on open client connections.",
		}, func() float64 { return float64(l.max) }),
	}
}

const tooManyConnections = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n" +
	"Content-Length: 97\r\n\r\n" +
	`{"error":"too many connections: the server is at its connection cap","code":"too_many_connections"}`

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > int64(l.max) {
			l.open.Add(-1)
			l.refuse(c)
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

func (l *connLimiter) refuse(c net.Conn) {
	l.refused.Inc()
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write([]byte(tooManyConnections))
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
	l.log.Warn("refusing client connections: at the connection cap", "max_connections", l.max,
		"refused", n, "hint", "raise the open-file limit (ulimit -n) or --max-connections, or close idle clients")
}

// limitedConn gives its slot back once, on the first Close.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
