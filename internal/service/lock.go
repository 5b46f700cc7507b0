package service

import (
	"context"
	"strconv"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/locktable"
)

// The lock operations of the service. They know nothing of a transport:
// each takes the api request, answers the api answer, and refuses with an
// *Error whose Code a transport maps to its own status (api.Status). A
// context that ends is a caller that went away.

// Renew gives the live holder a new token and a fresh TTL.
func (s *Service) Renew(ctx context.Context, req api.RenewRequest) (api.Lease, error) {
	ttl, e := checkTTL(req.TTLMs)
	if e := firstErr(checkKey("key", req.Key), checkHolder(req.Holder), e, checkRequestID(req.RequestID), s.writable()); e != nil {
		return api.Lease{}, s.fail(e)
	}
	l, _, e := s.proposeLease(fsm.Command{Op: fsm.OpRenew, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, TTL: ttl}, "renew")
	return l, s.fail(e)
}

// Extend gives the live holder of req.Token a fresh TTL under the same
// token.
func (s *Service) Extend(ctx context.Context, req api.ExtendRequest) (api.Lease, error) {
	ttl, e := checkTTL(req.TTLMs)
	e = firstErr(checkKey("key", req.Key), checkHolder(req.Holder), e, checkRequestID(req.RequestID))
	if e == nil && req.Token == 0 {
		e = Invalid("token", "token is required")
	}
	if e := firstErr(e, s.writable()); e != nil {
		return api.Lease{}, s.fail(e)
	}
	l, refused, e := s.proposeLease(fsm.Command{Op: fsm.OpExtend, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, Token: req.Token, TTL: ttl}, "extend")
	switch {
	case refused:
		s.metrics.Extends.WithLabelValues("not_held").Inc()
	case e == nil:
		s.metrics.Extends.WithLabelValues("ok").Inc()
	}
	return l, s.fail(e)
}

// ExtendBatch extends up to api.MaxBatch leases of one holder in one log
// entry; each item answers for itself.
func (s *Service) ExtendBatch(ctx context.Context, req api.ExtendBatchRequest) (api.ExtendBatchResponse, error) {
	r, e := s.extendBatch(req)
	return r, s.fail(e)
}

func (s *Service) extendBatch(req api.ExtendBatchRequest) (api.ExtendBatchResponse, *Error) {
	var none api.ExtendBatchResponse
	ttl, e := checkTTL(req.TTLMs)
	if e := firstErr(checkHolder(req.Holder), e, checkRequestID(req.RequestID)); e != nil {
		return none, e
	}
	switch {
	case len(req.Leases) == 0:
		return none, Invalid("leases", "leases is required: at least one {key, token}")
	case len(req.Leases) > api.MaxBatch:
		return none, Invalid("leases", "leases has %d items; the limit is %d", len(req.Leases), api.MaxBatch)
	}
	items := make([]fsm.Item, len(req.Leases))
	for i, it := range req.Leases {
		field := "leases[" + strconv.Itoa(i) + "]"
		if e := checkKey(field+".key", it.Key); e != nil {
			return none, e
		}
		if it.Token == 0 {
			return none, Invalid(field+".token", "%s.token is required", field)
		}
		items[i] = fsm.Item{Key: it.Key, Token: it.Token}
	}
	if e := s.writable(); e != nil {
		return none, e
	}
	res, err := s.propose(fsm.Command{Op: fsm.OpExtendBatch, RequestID: req.RequestID, Holder: req.Holder, TTL: ttl, Items: items})
	if err != nil {
		return none, proposalError(err)
	}
	now := s.answerNow(res.Now)
	out := make([]api.BatchResult, len(res.Batch))
	for i, b := range res.Batch {
		out[i] = api.BatchResult{Key: b.Key, Token: b.Token}
		if b.Err != nil {
			s.metrics.Extends.WithLabelValues("not_held").Inc()
			ae := s.commandError(b.Err, res.Now)
			out[i].Code, out[i].Error = ae.Code, ae.Message
			continue
		}
		s.metrics.Extends.WithLabelValues("ok").Inc()
		l := wireLease(b.Lease, now)
		out[i].OK, out[i].Lease = true, &l
	}
	return api.ExtendBatchResponse{Results: out}, nil
}

// Release ends req.Holder's lease on req.Key (only the grant req.Token if
// it is not 0).
func (s *Service) Release(ctx context.Context, req api.ReleaseRequest) (api.ReleaseResponse, error) {
	if e := firstErr(checkKey("key", req.Key), checkHolder(req.Holder), checkRequestID(req.RequestID), s.writable()); e != nil {
		return api.ReleaseResponse{}, s.fail(e)
	}
	res, err := s.propose(fsm.Command{Op: fsm.OpRelease, RequestID: req.RequestID, Key: req.Key, Holder: req.Holder, Token: req.Token})
	if err != nil {
		return api.ReleaseResponse{}, s.fail(proposalError(err))
	}
	if res.Err != nil {
		return api.ReleaseResponse{}, s.fail(s.commandError(res.Err, res.Now))
	}
	return api.ReleaseResponse{Released: res.Released}, nil
}

// Check reports whether token is the live grant on key now. Reads are
// linearizable: a quorum confirms this node still leads first.
func (s *Service) Check(ctx context.Context, key string, token uint64) (api.CheckResponse, error) {
	if e := checkKey("key", key); e != nil {
		return api.CheckResponse{}, s.fail(e)
	}
	now, e := s.readNow()
	if e != nil {
		return api.CheckResponse{}, s.fail(e)
	}
	return api.CheckResponse{Key: key, Token: token, Valid: s.fsm.Check(key, token, now)}, nil
}

// Get answers the live lease on key, or not_found.
func (s *Service) Get(ctx context.Context, key string) (api.Lease, error) {
	if e := checkKey("key", key); e != nil {
		return api.Lease{}, s.fail(e)
	}
	now, e := s.readNow()
	if e != nil {
		return api.Lease{}, s.fail(e)
	}
	l, ok := s.fsm.Get(key, now)
	if !ok {
		return api.Lease{}, s.fail(NewError(api.CodeNotFound, "no live lease on this key"))
	}
	head, n := s.fsm.QueueOf(key, 1)
	return withQueue(s.withHolders(wireLease(l, now), key, now), l.Kind, head, n, now), nil
}

// List answers up to limit live leases whose keys start with prefix, in
// key order; limit 0 is api.DefaultLimit.
func (s *Service) List(ctx context.Context, prefix string, limit int) (api.ListResponse, error) {
	return s.ListAfter(ctx, prefix, "", limit)
}

// ListAfter is List of the keys after after, the last key of the previous
// page ("" for the first page). A page costs O(log n + limit) under the
// state machine's read lock, so lists cannot stall writes for long: the
// lock is held while the page is copied out of the key index, and the
// answer is made after it is released.
func (s *Service) ListAfter(ctx context.Context, prefix, after string, limit int) (api.ListResponse, error) {
	if limit == 0 {
		limit = api.DefaultLimit
	}
	e := checkPrefix(prefix)
	if e == nil && len(after) > api.MaxKeyLen {
		e = Invalid("after", "after is %d bytes; the limit is %d", len(after), api.MaxKeyLen)
	}
	if e == nil && (limit < 1 || limit > api.MaxLimit) {
		e = Invalid("limit", "limit must be an integer between 1 and %d", api.MaxLimit)
	}
	if e != nil {
		return api.ListResponse{}, s.fail(e)
	}
	now, e := s.readNow()
	if e != nil {
		return api.ListResponse{}, s.fail(e)
	}
	leases := s.fsm.ListQueues(prefix, after, now, limit, 1)
	out := make([]api.Lease, len(leases))
	for i, l := range leases {
		out[i] = withQueue(wireLease(l.Lease, now), l.Lease.Kind, l.Waiters, l.Queued, now)
	}
	return api.ListResponse{Locks: out}, nil
}

// CheckReady answers nil when this node serves writes: it leads, has
// caught up, and a quorum confirms it still leads.
func (s *Service) CheckReady(ctx context.Context) error {
	// Ask the quorum only when this node believes it can serve.
	if e := s.writable(); e != nil {
		return s.fail(e)
	}
	return s.fail(s.verifyLeader())
}

// proposeLease proposes a command that answers a lease (acquire, renew,
// extend) and answers that lease, or the refusal, counted under what.
func (s *Service) proposeLease(cmd fsm.Command, what string) (l api.Lease, refused bool, e *Error) {
	res, err := s.propose(cmd)
	if err != nil {
		return l, false, proposalError(err)
	}
	if res.Err != nil {
		s.metrics.Refusals.WithLabelValues(what).Inc()
		return l, true, s.commandError(res.Err, res.Now)
	}
	return wireLease(res.Lease, s.answerNow(res.Now)), false, nil
}

// writable refuses writes until this node leads and has caught up.
func (s *Service) writable() *Error {
	// A node whose log cannot write says why, whether or not it still
	// leads (it steps down after the failed append), unless another node
	// leads: then not_leader sends the client there.
	if st := s.node.Status(); st.Fault != nil && (st.LeaderID == "" || st.LeaderID == s.cfg.NodeID) {
		return storageError(st.Fault)
	}
	if !s.ready.Load() {
		return s.notReady()
	}
	select {
	case <-s.closing:
		return Unavailable("shutting down")
	default:
	}
	return nil
}

// readNow is the cluster time reads are answered at.
func (s *Service) readNow() (locktable.Time, *Error) {
	if !s.ready.Load() {
		return 0, s.notReady()
	}
	if e := s.verifyLeader(); e != nil {
		return 0, e
	}
	now, ok := s.clock.now()
	if !ok {
		return 0, Unavailable("not ready: no leader")
	}
	return now, nil
}

// answerNow is the cluster time a write's answer is measured at: now if
// the clock runs, else the time the command applied.
func (s *Service) answerNow(applied locktable.Time) locktable.Time {
	if now, ok := s.clock.now(); ok && now > applied {
		return now
	}
	return applied
}
