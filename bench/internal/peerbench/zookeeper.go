package peerbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

const zkRoot = "/flbench"

type zkSystem struct {
	o Options
	// admin creates the lock parents outside the timed loops.
	admin *zk.Conn
}

type zkNoLog struct{}

func (zkNoLog) Printf(string, ...any) {}

// zkConnect opens a session and waits until it is established.
func zkConnect(ctx context.Context, o Options) (*zk.Conn, error) {
	conn, events, err := zk.Connect(o.addrs(), o.TTL, zk.WithLogger(zkNoLog{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, errors.New("connection closed")
			}
			if ev.State == zk.StateHasSession {
				// The channel must keep being drained; it closes with conn.
				go func() {
					for range events {
					}
				}()
				return conn, nil
			}
		case <-cctx.Done():
			conn.Close()
			return nil, cctx.Err()
		}
	}
}

func openZookeeper(ctx context.Context, o Options) (System, error) {
	conn, err := zkConnect(ctx, o)
	if err != nil {
		return nil, unreachable("zookeeper", o.Addr, err)
	}
	if _, err := conn.Create(zkRoot, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		conn.Close()
		return nil, fmt.Errorf("peerbench: zookeeper: create %s: %w", zkRoot, err)
	}
	return &zkSystem{o: o, admin: conn}, nil
}

func (s *zkSystem) Name() string { return "zookeeper" }
func (s *zkSystem) Close() error { s.admin.Close(); return nil }

// zkParent maps a lock key to its parent node: one flat child of zkRoot per
// key, so a key's slashes do not need a node per path segment.
func zkParent(key string) string {
	return zkRoot + "/" + strings.ReplaceAll(key, "/", "_")
}

// Prepare creates the persistent parent node of each key, 16 requests in
// flight, before the clock starts; a real deployment would have
// its lock parents already.
func (s *zkSystem) Prepare(ctx context.Context, keys []string) error {
	const batch = 250
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, 16)
	)
	for i := 0; i < len(keys); i += batch {
		part := keys[i:min(i+batch, len(keys))]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, k := range part {
				if ctx.Err() != nil {
					return
				}
				_, err := s.admin.Create(zkParent(k), nil, 0, zk.WorldACL(zk.PermAll))
				if err != nil && !errors.Is(err, zk.ErrNodeExists) {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("peerbench: zookeeper: create lock parents: %w", first)
	}
	return ctx.Err()
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// NewClient opens one ZooKeeper session per client: the session is the
// lease (timeout = TTL) under which the client's lock nodes live.
func (s *zkSystem) NewClient(ctx context.Context, id int) (Client, error) {
	conn, err := zkConnect(ctx, s.o)
	if err != nil {
		return nil, fmt.Errorf("peerbench: zookeeper session: %w", err)
	}
	return &zkClient{conn: conn}, nil
}

type zkClient struct{ conn *zk.Conn }

func (c *zkClient) Close() error { c.conn.Close(); return nil }

// Lock is the ephemeral-sequential recipe: create parent/lock-N, and hold
// the lock when N is the lowest child; otherwise watch only the next lower
// child (no herd) and look again when it goes.
func (c *zkClient) Lock(ctx context.Context, key string) (Lease, error) {
	parent := zkParent(key)
	path, err := c.conn.Create(parent+"/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		return nil, fmt.Errorf("peerbench: zookeeper create: %w", err)
	}
	me := path[len(parent)+1:]
	seq, err := zkSeq(me)
	if err != nil {
		c.conn.Delete(path, -1)
		return nil, err
	}
	giveUp := func(err error) (Lease, error) {
		// An abandoned wait removes its node, or the next waiter would
		// wait for it until the session expired.
		c.conn.Delete(path, -1)
		return nil, err
	}
	for {
		children, _, err := c.conn.Children(parent)
		if err != nil {
			return giveUp(fmt.Errorf("peerbench: zookeeper children: %w", err))
		}
		pred, err := zkPredecessor(children, seq)
		if err != nil {
			return giveUp(err)
		}
		if pred == "" {
			// Sequences start at 0; +1 keeps 0 meaning "no token".
			return &zkLease{c: c, path: path, token: uint64(seq) + 1}, nil
		}
		ok, _, ch, err := c.conn.ExistsW(parent + "/" + pred)
		if err != nil {
			return giveUp(fmt.Errorf("peerbench: zookeeper exists: %w", err))
		}
		if !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return giveUp(ctx.Err())
		}
	}
}

// zkSeq parses the 10-digit sequence ZooKeeper appends to a node name.
func zkSeq(name string) (int64, error) {
	if len(name) < 10 {
		return 0, fmt.Errorf("peerbench: zookeeper: node %q has no sequence", name)
	}
	n, err := strconv.ParseInt(name[len(name)-10:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("peerbench: zookeeper: node %q: %w", name, err)
	}
	return n, nil
}

// zkPredecessor returns the child with the highest sequence below seq, or ""
// when seq is the lowest (the lock is ours).
func zkPredecessor(children []string, seq int64) (string, error) {
	best, bestSeq := "", int64(-1)
	for _, ch := range children {
		n, err := zkSeq(ch)
		if err != nil {
			return "", err
		}
		if n < seq && n > bestSeq {
			best, bestSeq = ch, n
		}
	}
	return best, nil
}

// Hold: ZooKeeper has no lease per lock; the session is the lease and its
// heartbeat keeps every lock of the session alive at once.
func (c *zkClient) Hold(ctx context.Context, key string, ttl time.Duration) (Lease, error) {
	return nil, fmt.Errorf("%w: zookeeper: a session is the lease, and the client library heartbeats it", ErrNotSupported)
}

type zkLease struct {
	c     *zkClient
	path  string
	token uint64
}

func (l *zkLease) Token() uint64 { return l.token }

func (l *zkLease) Extend(ctx context.Context) error {
	return fmt.Errorf("%w: zookeeper: a session is the lease", ErrNotSupported)
}

func (l *zkLease) Unlock(ctx context.Context) error {
	if err := l.c.conn.Delete(l.path, -1); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return ErrNotHeld
		}
		return fmt.Errorf("peerbench: zookeeper delete: %w", err)
	}
	return nil
}
