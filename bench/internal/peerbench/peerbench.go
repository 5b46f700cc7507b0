package peerbench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors.
var (
	// ErrUnreachable: the system did not answer on its address. Integration
	// tests skip on it.
	ErrUnreachable = errors.New("peerbench: system unreachable")
	// ErrNotSupported: the system has no such operation (ZooKeeper has no
	// per-lock extend: its session is the lease).
	ErrNotSupported = errors.New("peerbench: operation not supported by this system")
	// ErrNotHeld: an extend or release found the lease no longer ours.
	ErrNotHeld = errors.New("peerbench: lease not held")
	// ErrUnknownSystem: Open was given a name it does not know.
	ErrUnknownSystem = errors.New("peerbench: unknown system")
)

// Systems lists the names Open accepts, fencelock first: it is the
// baseline every ratio is taken against.
var Systems = []string{"fencelock", "etcd", "redis", "zookeeper"}

// DefaultAddrs are the loopback addresses bench/peers/setup.sh uses, and the
// address a fencelock server is usually started on for a comparison.
var DefaultAddrs = map[string]string{
	"fencelock": "127.0.0.1:7470",
	"etcd":      "127.0.0.1:23790",
	"redis":     "127.0.0.1:63790",
	"zookeeper": "127.0.0.1:21810",
}

// System is one lock service under test.
type System interface {
	Name() string
	// NewClient opens one client's worth of state: an etcd Session, a
	// ZooKeeper connection, a holder identity. A Client and its leases are
	// used by one goroutine at a time.
	NewClient(ctx context.Context, id int) (Client, error)
	Close() error
}

// Client takes locks for one holder.
type Client interface {
	// Lock blocks until key is held by this client or ctx ends; it is the
	// system's normal contended-wait path.
	Lock(ctx context.Context, key string) (Lease, error)
	// Hold takes key once, without waiting, as a lease of its own with the
	// given TTL, for the keep-alive workload.
	Hold(ctx context.Context, key string, ttl time.Duration) (Lease, error)
	Close() error
}

// Lease is one held lock.
type Lease interface {
	// Token is the fencing token of this grant.
	Token() uint64
	// Extend keeps the lease alive for another TTL without a new token.
	Extend(ctx context.Context) error
	// Unlock releases the lease; only its own grant is ever deleted.
	Unlock(ctx context.Context) error
}

// Validator is implemented by systems whose grants a fresh client can
// check by key and token: whether that grant is still the key's live one.
type Validator interface {
	Valid(ctx context.Context, key string, token uint64) (bool, error)
}

// Preparer is implemented by systems that need per-key setup outside the
// timed loop (ZooKeeper's lock parent nodes).
type Preparer interface {
	Prepare(ctx context.Context, keys []string) error
}

// Options configure Open.
type Options struct {
	// Addr is host:port, or a comma-separated list of them for a cluster
	// (etcd's endpoints, ZooKeeper's ensemble, fencelock's nodes: the
	// driver finds the leader); empty means DefaultAddrs[name].
	Addr string
	// TTL is the lease of Lock's grants (etcd session TTL, ZooKeeper session
	// timeout, Redis PX, fencelock ttl_ms). Default 10s.
	TTL time.Duration
	// Clients is how many clients will run at once, to size pools. Default 32.
	Clients int
	// RedisRetryMin and RedisRetryMax bound the jittered poll delay of a
	// Redis waiter. Default 1ms..5ms (redsync's own default is 50..250ms).
	RedisRetryMin, RedisRetryMax time.Duration
	// DialTimeout bounds the reachability check. Default 3s.
	DialTimeout time.Duration
	// DataDir is where a fencelock server keeps its state, for W4's
	// snapshot size; optional.
	DataDir string
	// FencelockHTTP makes the fencelock driver use HTTP/1.1 instead of
	// framed connections.
	FencelockHTTP bool
	// FencelockJSON makes the fencelock driver send the hot calls
	// (acquire, extend, release) as JSON on its framed connection rather
	// than in the binary encoding the server offers (internal/callcodec),
	// to measure what that encoding saves.
	FencelockJSON bool
}

func (o Options) withDefaults(name string) Options {
	if o.Addr == "" {
		o.Addr = DefaultAddrs[name]
	}
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.Clients <= 0 {
		o.Clients = 32
	}
	if o.RedisRetryMin <= 0 {
		o.RedisRetryMin = time.Millisecond
	}
	if o.RedisRetryMax < o.RedisRetryMin {
		o.RedisRetryMax = 5 * time.Millisecond
		if o.RedisRetryMax < o.RedisRetryMin {
			o.RedisRetryMax = o.RedisRetryMin
		}
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 3 * time.Second
	}
	return o
}

// Open connects to the named system and checks that it answers. An
// unreachable system yields an error wrapping ErrUnreachable.
func Open(ctx context.Context, name string, o Options) (System, error) {
	o = o.withDefaults(name)
	switch name {
	case "fencelock":
		return openFencelock(ctx, o)
	case "etcd":
		return openEtcd(ctx, o)
	case "redis":
		return openRedis(ctx, o)
	case "zookeeper":
		return openZookeeper(ctx, o)
	}
	return nil, fmt.Errorf("%w %q (known: fencelock, etcd, redis, zookeeper)", ErrUnknownSystem, name)
}

// addrs splits Addr into its host:port elements.
func (o Options) addrs() []string {
	var out []string
	for _, a := range strings.Split(o.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = []string{o.Addr}
	}
	return out
}

func unreachable(name, addr string, err error) error {
	return fmt.Errorf("%w: %s at %s: %v", ErrUnreachable, name, addr, err)
}
