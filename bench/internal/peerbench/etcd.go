package peerbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

type etcdSystem struct {
	o   Options
	cli *clientv3.Client
}

func openEtcd(ctx context.Context, o Options) (System, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   o.addrs(),
		DialTimeout: o.DialTimeout,
		Logger:      zap.NewNop(), // library code does not log
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, unreachable("etcd", o.Addr, err)
	}
	// One member answering is enough: the client balances over all of
	// them, and a cluster that lost one still serves. Status dials the
	// member it asks and waits for it until its context ends, so a dead
	// member gets its share of the timeout, not all of it.
	addrs := o.addrs()
	for _, a := range addrs {
		sctx, cancel := context.WithTimeout(ctx, o.DialTimeout/time.Duration(len(addrs)))
		_, err = cli.Status(sctx, a)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		cli.Close()
		return nil, unreachable("etcd", o.Addr, err)
	}
	return &etcdSystem{o: o, cli: cli}, nil
}

func (s *etcdSystem) Name() string { return "etcd" }

// addr is the first member's address, where W4 and W5 find the server.
func (s *etcdSystem) addr() string { return s.o.addrs()[0] }
func (s *etcdSystem) Close() error { return s.cli.Close() }

// NewClient opens a Session: one etcd lease of TTL, kept alive by the
// client library, under which every Lock of this client is taken — the way
// concurrency.Mutex is meant to be used.
func (s *etcdSystem) NewClient(ctx context.Context, id int) (Client, error) {
	// The lease is granted under ctx, so that a caller's deadline bounds
	// it (NewSession's own grant would run under the session's context,
	// which must outlive this call); the session then keeps it alive.
	g, err := s.cli.Grant(ctx, int64(ttlSeconds(s.o.TTL)))
	if err != nil {
		return nil, fmt.Errorf("peerbench: etcd session: %w", err)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(ttlSeconds(s.o.TTL)),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("peerbench: etcd session: %w", err)
	}
	return &etcdClient{s: s, sess: sess}, nil
}

// ttlSeconds rounds up: etcd leases have whole seconds.
func ttlSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

type etcdClient struct {
	s    *etcdSystem
	sess *concurrency.Session

	mu       sync.Mutex
	ka       pb.Lease_LeaseKeepAliveClient // W3: one keep-alive stream per client
	kaCancel context.CancelFunc
}

func (c *etcdClient) Close() error {
	c.mu.Lock()
	if c.ka != nil {
		c.kaCancel()
		c.ka = nil
	}
	c.mu.Unlock()
	return c.sess.Close()
}

func (c *etcdClient) Lock(ctx context.Context, key string) (Lease, error) {
	m := concurrency.NewMutex(c.sess, "/flbench/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, fmt.Errorf("peerbench: etcd lock: %w", err)
	}
	return &etcdMutexLease{c: c, m: m, token: uint64(ownerRev(m))}, nil
}

// ownerRev is the create revision of the mutex's own key: the fencing token
// etcd's recipe compares (IsOwner) and a resource would check. It is read
// from the comparison IsOwner builds, which costs no round trip.
func ownerRev(m *concurrency.Mutex) int64 {
	cmp := m.IsOwner()
	if t, ok := cmp.TargetUnion.(*pb.Compare_CreateRevision); ok {
		return t.CreateRevision
	}
	return 0
}

type etcdMutexLease struct {
	c     *etcdClient
	m     *concurrency.Mutex
	token uint64
}

func (l *etcdMutexLease) Token() uint64 { return l.token }

// Extend of a Mutex is its session's keep-alive, which the library already
// sends at TTL/3; one explicit round trip is the closest equivalent.
func (l *etcdMutexLease) Extend(ctx context.Context) error {
	_, err := l.c.s.cli.KeepAliveOnce(ctx, l.c.sess.Lease())
	if err != nil {
		return fmt.Errorf("peerbench: etcd keepalive: %w", err)
	}
	return nil
}

func (l *etcdMutexLease) Unlock(ctx context.Context) error {
	if err := l.m.Unlock(ctx); err != nil {
		if errors.Is(err, concurrency.ErrLockReleased) {
			return ErrNotHeld
		}
		return fmt.Errorf("peerbench: etcd unlock: %w", err)
	}
	return nil
}

// Hold gives the key a lease of its own (one lease per lock, as 10,000
// Sessions would, without 10,000 keep-alive goroutines) and takes it with
// the same create-if-absent transaction Mutex uses. Its token is the put's
// revision, which is the key's create revision.
func (c *etcdClient) Hold(ctx context.Context, key string, ttl time.Duration) (Lease, error) {
	g, err := c.s.cli.Grant(ctx, int64(ttlSeconds(ttl)))
	if err != nil {
		return nil, fmt.Errorf("peerbench: etcd grant: %w", err)
	}
	k := "/flbench/" + key
	resp, err := c.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, "", clientv3.WithLease(g.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("key %q already held", key)
	}
	if err != nil {
		c.s.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return nil, fmt.Errorf("peerbench: etcd hold: %w", err)
	}
	return &etcdLease{c: c, id: g.ID, token: uint64(resp.Header.Revision)}, nil
}

type etcdLease struct {
	c     *etcdClient
	id    clientv3.LeaseID
	token uint64
}

func (l *etcdLease) Token() uint64 { return l.token }

// Extend sends one LeaseKeepAlive on this client's stream and waits for its
// answer: the message clientv3's own keep-alive loop sends, one round trip,
// without opening a stream per call as KeepAliveOnce does. etcd answers
// keep-alives on the leader without a Raft write or fsync.
func (l *etcdLease) Extend(ctx context.Context) error {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ka == nil {
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		ka, err := pb.NewLeaseClient(c.s.cli.ActiveConnection()).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			return fmt.Errorf("peerbench: etcd keepalive stream: %w", err)
		}
		c.ka, c.kaCancel = ka, cancel
	}
	type answer struct {
		r   *pb.LeaseKeepAliveResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		if err := c.ka.Send(&pb.LeaseKeepAliveRequest{ID: int64(l.id)}); err != nil {
			ch <- answer{err: err}
			return
		}
		r, err := c.ka.Recv()
		ch <- answer{r, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			c.kaCancel()
			c.ka = nil
			return fmt.Errorf("peerbench: etcd keepalive: %w", a.err)
		}
		if a.r.TTL <= 0 {
			return ErrNotHeld
		}
		return nil
	case <-ctx.Done():
		// The stream is now out of step: cancel it, which also ends the
		// pending Recv, and open a new one next time.
		c.kaCancel()
		<-ch
		c.ka = nil
		return ctx.Err()
	}
}

func (l *etcdLease) Unlock(ctx context.Context) error {
	if _, err := l.c.s.cli.Revoke(ctx, l.id); err != nil {
		return fmt.Errorf("peerbench: etcd revoke: %w", err)
	}
	return nil
}

// Valid reports whether key still holds the grant of token: the key
// exists, created at that revision, with a lease attached (Hold's
// grants; a Lock's key carries a suffix of its own).
func (s *etcdSystem) Valid(ctx context.Context, key string, token uint64) (bool, error) {
	resp, err := s.cli.Get(ctx, "/flbench/"+key)
	if err != nil {
		return false, fmt.Errorf("peerbench: etcd get: %w", err)
	}
	return len(resp.Kvs) == 1 && uint64(resp.Kvs[0].CreateRevision) == token && resp.Kvs[0].Lease != 0, nil
}
