package redisfence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Client is a small Redis client, RESP2 over TCP, enough for the fence:
// one command at a time per connection, a few idle connections kept. It
// is here so that the product needs no Redis driver. It does not follow
// Redis Cluster's MOVED redirections: give it the node that owns the
// resources' slots (Slot tells which).
type Client struct {
	addr    string
	user    string
	pass    string
	db      int
	dialer  net.Dialer
	maxIdle int

	mu     sync.Mutex
	idle   []*conn
	closed bool
}

// ClientOption configures NewClient.
type ClientOption func(*Client)

// WithAuth sends AUTH on each new connection (user "" for Redis's
// default user: AUTH password).
func WithAuth(user, password string) ClientOption {
	return func(c *Client) { c.user, c.pass = user, password }
}

// WithDB selects database n on each new connection (default 0).
func WithDB(n int) ClientOption { return func(c *Client) { c.db = n } }

// WithDialTimeout bounds connecting (default 5 s; ctx bounds it too).
func WithDialTimeout(d time.Duration) ClientOption { return func(c *Client) { c.dialer.Timeout = d } }

// WithMaxIdle is how many idle connections are kept (default 8).
func WithMaxIdle(n int) ClientOption { return func(c *Client) { c.maxIdle = n } }

// NewClient returns a client of the Redis server at addr (host:port).
// It connects on first use.
func NewClient(addr string, opts ...ClientOption) *Client {
	c := &Client{addr: addr, maxIdle: 8}
	c.dialer.Timeout = 5 * time.Second
	for _, o := range opts {
		o(c)
	}
	return c
}

// Error is an error reply of the server ("ERR ...", "NOSCRIPT ...",
// "WRONGTYPE ..."); the connection is fine after one.
type Error struct{ Msg string }

func (e *Error) Error() string { return "redis: " + e.Msg }

// ErrClosed: the client was closed.
var ErrClosed = errors.New("redisfence: client closed")

// Limits on what a reply may hold, so that a confused peer cannot make
// the client allocate without bound.
const (
	maxBulk  = 512 << 20 // Redis's own limit on a string
	maxArray = 1 << 20
	maxDepth = 16
)

type conn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// Do sends one command and reads its reply: a string (simple or bulk),
// an int64, nil (a null), a []any, or an *Error inside an array. A server
// error reply is returned as an *Error. A ctx done while waiting closes
// the connection and returns ctx.Err(); any I/O or protocol error closes
// it too (the reply may have been lost: the command may have run).
func (c *Client) Do(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redisfence: empty command")
	}
	cn, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	reply, err := cn.roundTrip(ctx, args)
	var re *Error
	if err != nil && !errors.As(err, &re) {
		cn.nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	c.put(cn)
	return reply, err
}

// Close closes the idle connections; connections in use close when
// their command ends.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, cn := range c.idle {
		cn.nc.Close()
	}
	c.idle = nil
	return nil
}

func (c *Client) get(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	for len(c.idle) > 0 {
		n := len(c.idle)
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		if cn.alive() {
			c.mu.Unlock()
			return cn, nil
		}
		cn.nc.Close()
	}
	c.mu.Unlock()
	nc, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("redisfence: %w", err)
	}
	cn := &conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}
	var hello [][]string
	switch {
	case c.pass != "" && c.user != "":
		hello = append(hello, []string{"AUTH", c.user, c.pass})
	case c.pass != "":
		hello = append(hello, []string{"AUTH", c.pass})
	}
	if c.db != 0 {
		hello = append(hello, []string{"SELECT", strconv.Itoa(c.db)})
	}
	for _, cmd := range hello {
		if _, err := cn.roundTrip(ctx, cmd); err != nil {
			nc.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("redisfence: %s: %w", cmd[0], err)
		}
	}
	return cn, nil
}

func (c *Client) put(cn *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle) >= c.maxIdle {
		cn.nc.Close()
		return
	}
	c.idle = append(c.idle, cn)
}

// alive reports whether an idle connection is still open: nothing to
// read and no end of stream (a server that restarted closed it). A
// command is never sent twice, since it might have run the first time;
// a dead connection is found before it is used instead.
func (cn *conn) alive() bool {
	return cn.r.Buffered() == 0 && peekOpen(cn.nc)
}

func (cn *conn) roundTrip(ctx context.Context, args []string) (any, error) {
	if d, ok := ctx.Deadline(); ok {
		cn.nc.SetDeadline(d)
	} else {
		cn.nc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { cn.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	cn.w.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		cn.w.WriteString("$" + strconv.Itoa(len(a)) + "\r\n")
		cn.w.WriteString(a)
		cn.w.WriteString("\r\n")
	}
	if err := cn.w.Flush(); err != nil {
		return nil, fmt.Errorf("redisfence: %w", err)
	}
	reply, err := readReply(cn.r, 0)
	if err != nil {
		return nil, err
	}
	if re, ok := reply.(*Error); ok {
		return nil, re
	}
	return reply, nil
}

var errProtocol = errors.New("redisfence: bad reply from the server")

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", fmt.Errorf("%w: a line longer than %d bytes", errProtocol, r.Size())
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return "", fmt.Errorf("redisfence: %w", err)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("%w: a line without CRLF", errProtocol)
	}
	return string(line[:len(line)-2]), nil
}

// readReply reads one RESP2 reply; an error reply is returned as an
// *Error value, not an error.
func readReply(r *bufio.Reader, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: arrays nested deeper than %d", errProtocol, maxDepth)
	}
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if line == "" {
		return nil, fmt.Errorf("%w: an empty line", errProtocol)
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return &Error{Msg: body}, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: integer %q", errProtocol, body)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxBulk {
			return nil, fmt.Errorf("%w: bulk length %q", errProtocol, body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("redisfence: %w", err)
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, fmt.Errorf("%w: a bulk string without CRLF", errProtocol)
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxArray {
			return nil, fmt.Errorf("%w: array length %q", errProtocol, body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, 0, min(n, 1024))
		for range n {
			v, err := readReply(r, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: type byte %q", errProtocol, line[0])
}
