package peerbench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/api"
)

// SessionOpener is a client that can open a session: a lease that is not
// a lock, which the client keeps alive and under which it could take
// locks (fencelock's sessions, etcd's leases; Chubby's sessions are what
// W5 scales to). A session's Lease extends and closes it.
type SessionOpener interface {
	OpenSession(ctx context.Context, ttl time.Duration) (Lease, error)
}

// fencelock: POST /v1/session/open, /extend, /close. Every session has a
// holder of its own, as every Chubby client would (a holder may own at
// most api.MaxSessionsPerHolder sessions).

var flSessionSeq atomic.Uint64

func (c *flClient) OpenSession(ctx context.Context, ttl time.Duration) (Lease, error) {
	holder := c.holder + "-s" + strconv.FormatUint(flSessionSeq.Add(1), 10)
	var s api.Session
	code, err := c.s.post(ctx, api.PathSessionOpen, api.SessionOpenRequest{Holder: holder, TTLMs: api.Ms(ttl)}, &s)
	if err != nil {
		return nil, err
	}
	if code != "" {
		return nil, fmt.Errorf("peerbench: fencelock session open: %s", code)
	}
	return &flSession{c: c, id: s.ID, holder: holder}, nil
}

type flSession struct {
	c      *flClient
	id     uint64
	holder string
}

// Token is the session's id: a session carries no fencing token (its
// locks do).
func (s *flSession) Token() uint64 { return s.id }

func (s *flSession) Extend(ctx context.Context) error {
	code, err := s.c.s.post(ctx, api.PathSessionExtend, api.SessionRequest{ID: s.id, Holder: s.holder}, nil)
	if err != nil {
		return err
	}
	if code != "" {
		return ErrNotHeld
	}
	return nil
}

func (s *flSession) Unlock(ctx context.Context) error {
	code, err := s.c.s.post(ctx, api.PathSessionClose, api.SessionRequest{ID: s.id, Holder: s.holder}, nil)
	if err != nil {
		return err
	}
	if code != "" {
		return ErrNotHeld
	}
	return nil
}

// etcd: a lease of its own (LeaseGrant), extended on the client's
// keep-alive stream as W3's leases are, revoked at the end.
func (c *etcdClient) OpenSession(ctx context.Context, ttl time.Duration) (Lease, error) {
	g, err := c.s.cli.Grant(ctx, int64(ttlSeconds(ttl)))
	if err != nil {
		return nil, fmt.Errorf("peerbench: etcd grant: %w", err)
	}
	return &etcdLease{c: c, id: clientv3.LeaseID(g.ID), token: uint64(g.ID)}, nil
}
