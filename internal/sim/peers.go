package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/api"
)

// peers is how one node calls another's client port (service.Peers): over
// the links between nodes, so a node cut off reaches nobody, a crashed one
// refuses, and a frozen one answers once it runs again. Only the call a
// follower makes on every guarded request (the leader's ACL revision) is
// served; the membership calls have nothing to do in a fixed world.
type peers struct{ from *simNode }

var errNoPeerCall = errors.New("sim: the world's membership is fixed")

func (p peers) Identity(context.Context, string) (api.Identity, error) {
	return api.Identity{}, errNoPeerCall
}
func (p peers) Announce(context.Context, string, api.JoinRequest) error { return errNoPeerCall }
func (p peers) Members(context.Context, string) (api.MembersResponse, error) {
	return api.MembersResponse{}, errNoPeerCall
}

func (p peers) ACLRevision(ctx context.Context, addr string) (api.ACLRevision, error) {
	c := p.from.c
	to := c.node(strings.TrimSuffix(addr, ":7470"))
	if to == nil {
		return api.ACLRevision{}, errors.New("sim: no node at " + addr)
	}
	c.mu.Lock()
	d := c.w.cfg.replDelay(c.rnd)
	c.mu.Unlock()
	if !sleepCtx(ctx, d) {
		return api.ACLRevision{}, ctx.Err()
	}
	c.mu.Lock()
	cut := p.from.isolated || to.isolated
	c.mu.Unlock()
	if cut {
		<-ctx.Done()
		return api.ACLRevision{}, ctx.Err()
	}
	svc, crashed, running := to.service()
	if crashed {
		return api.ACLRevision{}, errRefused
	}
	if !waitRunning(ctx, running) {
		return api.ACLRevision{}, ctx.Err()
	}
	r, err := svc.ACLRevision(ctx)
	if err != nil {
		// As over HTTP: the caller sees an answer, not the callee's error.
		return api.ACLRevision{}, fmt.Errorf("sim: %s answered: %v", addr, err)
	}
	if !sleepCtx(ctx, d) {
		return api.ACLRevision{}, ctx.Err()
	}
	return r, nil
}
