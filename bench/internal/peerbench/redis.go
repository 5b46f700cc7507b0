package peerbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fencing counter is one key shared by every lock, as fencelock's token
// counter is; on a Redis Cluster it would have to share a hash slot with the
// lock keys, which is why real deployments keep one counter per lock.
const redisFenceKey = "flbench:fence"

// acquire: take the key only if free, and issue the next token from the
// counter in the same script, so no grant goes without a token and no token
// is issued without a grant. Returns the token, or 0 when held.
var redisAcquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])
return t`)

// release: delete only our own grant (holder:token), never someone else's.
var redisRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// extend: PEXPIRE only our own grant; the token stays the same.
var redisExtend = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

type redisSystem struct {
	o   Options
	rdb *redis.Client
}

// quietRedis drops go-redis's own log lines (a dial failure prints one per
// pooled connection); every error also reaches us as a returned error.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...interface{}) {}

func openRedis(ctx context.Context, o Options) (System, error) {
	redis.SetLogger(quietRedis{})
	rdb := redis.NewClient(&redis.Options{
		Addr:         o.Addr,
		PoolSize:     o.Clients + 8, // every client can have a command in flight
		MinIdleConns: o.Clients,
		DialTimeout:  o.DialTimeout,
		// appendfsync always can stall a reply behind a slow fsync;
		// the default 3s read timeout would turn that into an error.
		ReadTimeout:  opTimeout,
		WriteTimeout: opTimeout,
	})
	pctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, unreachable("redis", o.Addr, err)
	}
	// Load the scripts once so the timed loop runs EVALSHA only.
	for _, s := range []*redis.Script{redisAcquire, redisRelease, redisExtend} {
		if err := s.Load(pctx, rdb).Err(); err != nil {
			rdb.Close()
			return nil, fmt.Errorf("peerbench: redis: load script: %w", err)
		}
	}
	return &redisSystem{o: o, rdb: rdb}, nil
}

func (s *redisSystem) Name() string { return "redis" }
func (s *redisSystem) Close() error { return s.rdb.Close() }

func (s *redisSystem) NewClient(ctx context.Context, id int) (Client, error) {
	return &redisClient{s: s, holder: fmt.Sprintf("c%d-%x", id, rand.Uint64())}, nil
}

type redisClient struct {
	s      *redisSystem
	holder string
}

func (c *redisClient) Close() error { return nil }

func (c *redisClient) try(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error) {
	k := "flbench:lock:" + key
	t, err := redisAcquire.Run(ctx, c.s.rdb, []string{k, redisFenceKey}, c.holder, ttl.Milliseconds()).Int64()
	if err != nil {
		return nil, false, fmt.Errorf("peerbench: redis acquire: %w", err)
	}
	if t == 0 {
		return nil, false, nil
	}
	return &redisLease{c: c, key: k, value: c.holder + ":" + strconv.FormatInt(t, 10), token: uint64(t), ttl: ttl}, true, nil
}

// Lock polls with jitter until the key is free, as redsync does; there is
// no queue, so whoever polls first after a release wins (barging).
func (c *redisClient) Lock(ctx context.Context, key string) (Lease, error) {
	lo, hi := c.s.o.RedisRetryMin, c.s.o.RedisRetryMax
	for {
		l, ok, err := c.try(ctx, key, c.s.o.TTL)
		if err != nil || ok {
			return l, err
		}
		d := lo
		if hi > lo {
			d += rand.N(hi - lo)
		}
		pause(ctx, d)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (c *redisClient) Hold(ctx context.Context, key string, ttl time.Duration) (Lease, error) {
	l, ok, err := c.try(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("peerbench: redis hold %q: already held", key)
	}
	return l, nil
}

type redisLease struct {
	c     *redisClient
	key   string
	value string // holder:token, compared by release and extend
	token uint64
	ttl   time.Duration
}

func (l *redisLease) Token() uint64 { return l.token }

func (l *redisLease) Extend(ctx context.Context) error {
	n, err := redisExtend.Run(ctx, l.c.s.rdb, []string{l.key}, l.value, l.ttl.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("peerbench: redis extend: %w", err)
	}
	if n == 0 {
		return ErrNotHeld
	}
	return nil
}

func (l *redisLease) Unlock(ctx context.Context) error {
	n, err := redisRelease.Run(ctx, l.c.s.rdb, []string{l.key}, l.value).Int64()
	if err != nil {
		return fmt.Errorf("peerbench: redis release: %w", err)
	}
	if n == 0 {
		return ErrNotHeld
	}
	return nil
}

func (s *redisSystem) addr() string { return s.o.Addr }

// SnapshotBytes writes an RDB with SAVE and returns its size: the compact
// image Redis would restart from (its AOF, which this setup fsyncs on every
// write, is the log on top of it).
func (s *redisSystem) SnapshotBytes(ctx context.Context) (int64, error) {
	if err := s.rdb.Save(ctx).Err(); err != nil {
		return 0, fmt.Errorf("redis SAVE: %w", err)
	}
	dir, err := s.rdb.ConfigGet(ctx, "dir").Result()
	if err != nil {
		return 0, err
	}
	name, err := s.rdb.ConfigGet(ctx, "dbfilename").Result()
	if err != nil {
		return 0, err
	}
	fi, err := os.Stat(filepath.Join(dir["dir"], name["dbfilename"]))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
