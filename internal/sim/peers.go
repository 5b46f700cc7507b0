package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/sim/simclock"
)

// peers is how one node calls another's client port (service.Peers):
// over the links between nodes, so a node cut off reaches nobody, a
// crashed one refuses, and a stopped one answers once it runs again. As
// over HTTP, the caller sees an answer, not the callee's error.
type peers struct{ from *simNode }

// call runs f on the service at addr as a call over the link from p's
// node would, each way a delay of the link's.
func call[T any](ctx context.Context, p peers, addr string, f func(*service.Service) (T, error)) (T, error) {
	var zero T
	c := p.from.c
	to := c.reach(addr)
	if to == nil {
		return zero, errors.New("sim: no node at " + addr)
	}
	d := p.delay(to)
	if !simclock.Sleep(ctx, d) {
		return zero, ctx.Err()
	}
	if c.isCut(p.from, to) {
		<-ctx.Done()
		return zero, ctx.Err()
	}
	svc, down, running := to.service()
	if down {
		return zero, errRefused
	}
	if !waitRunning(ctx, running) {
		return zero, ctx.Err()
	}
	r, err := f(svc)
	if err != nil {
		return zero, fmt.Errorf("sim: %s answered: %v", addr, err)
	}
	if !simclock.Sleep(ctx, d) {
		return zero, ctx.Err()
	}
	if c.isCut(to, p.from) {
		<-ctx.Done()
		return zero, ctx.Err()
	}
	return r, nil
}

// delay is one call's delay each way to to.
func (p peers) delay(to *simNode) time.Duration {
	r := p.from.c.w.instants.Draw("peer:" + p.from.id + ">" + to.id)
	return 100*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
}

func (p peers) Identity(ctx context.Context, addr string) (api.Identity, error) {
	return call(ctx, p, addr, func(s *service.Service) (api.Identity, error) { return s.Identity(ctx), nil })
}

func (p peers) Announce(ctx context.Context, addr string, req api.JoinRequest) error {
	_, err := call(ctx, p, addr, func(s *service.Service) (api.JoinResponse, error) { return s.Announce(ctx, req) })
	return err
}

func (p peers) Members(ctx context.Context, addr string) (api.MembersResponse, error) {
	return call(ctx, p, addr, func(s *service.Service) (api.MembersResponse, error) { return s.Members(ctx) })
}

func (p peers) ACLRevision(ctx context.Context, addr string) (api.ACLRevision, error) {
	return call(ctx, p, addr, func(s *service.Service) (api.ACLRevision, error) { return s.ACLRevision(ctx) })
}
