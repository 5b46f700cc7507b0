package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/service"
	"github.com/fencelock/fencelock/internal/sim/simcheck"
	"github.com/fencelock/fencelock/internal/sim/simrand"
)

// ACLs in the world (Config.ACL): once the first leader is up, an
// operator bootstraps the cluster's ACLs and gives each client process a
// principal of its own ("c<i>", acting as holders "c<i>/...") with a
// policy of its own: the actors lock and read under lock/, sem/ and rw/;
// the prober and the watcher, never changed, every key. The nemesis's
// acl fault deletes an actor's token or takes its policy's rules away,
// and gives them back when it heals (a new token: the old secret is
// never good again). The check (simcheck.ACL), on every answer the
// world's network carries: no call sent after a token's deletion was
// acknowledged is answered OK under that token, and none sent after a
// policy's rules were taken away (acknowledged) and answered before they
// were given back is answered OK where it needed them.

// actorPrefixes are the keys an actor's policy lets it lock and read.
var actorPrefixes = []string{"lock/", "sem/", "rw/"}

// principal is actor i's principal.
func principal(i int) string { return fmt.Sprintf("c%d", i) }

// policyOf is actor i's policy.
func policyOf(i int) string { return fmt.Sprintf("p-c%d", i) }

// own is holder h of a in this world: with ACLs, named under a's
// principal, as a principal may act only as holders it owns.
func (a *actor) own(h string) string {
	if !a.w.cfg.ACL {
		return h
	}
	return principal(a.i) + "/" + h
}

// aclPolicy is the rules of actor i's policy: lock and read on its
// prefixes; revoked, read on a prefix nothing uses.
func aclPolicy(i int, revoked bool) api.ACLPolicy {
	p := api.ACLPolicy{Name: policyOf(i)}
	if revoked {
		p.Rules = []api.ACLRule{{Prefix: "none/", Verbs: []string{"read"}}}
		return p
	}
	for _, pre := range actorPrefixes {
		p.Rules = append(p.Rules, api.ACLRule{Prefix: pre, Verbs: []string{"lock", "read"}})
	}
	return p
}

// bootACL is the operator's setup: bootstrap, a policy and a token for
// every client process, then each one's client with its token. It runs
// in a goroutine of its own; the client processes wait for ready.
func (w *world) bootACL(actors []*actor, clients int) {
	defer w.ops.Done()
	defer close(w.aclReady)
	c := w.cl
	tried := false
	bootstrap := func(ctx context.Context, s *service.Service) error {
		_, err := s.ACLBootstrap(ctx)
		if err != nil && tried && strings.Contains(err.Error(), "already bootstrapped") {
			// Only this operator bootstraps: an earlier try of its own
			// was applied, though not answered.
			return nil
		}
		tried = true
		return err
	}
	// An operator goes on trying while the cluster elects a leader that
	// is ready (seed 3008524: three elections at the start outlasted one
	// round of operate's tries).
	err := c.operate(bootstrap)
	for range 4 {
		if err == nil {
			break
		}
		err = c.operate(bootstrap)
	}
	for _, a := range actors {
		if err != nil {
			break
		}
		i := a.i
		pol := api.ACLPolicy{Name: policyOf(i), Rules: []api.ACLRule{{Prefix: "", Verbs: []string{"lock", "read"}}}}
		if i < clients {
			pol = aclPolicy(i, false)
		}
		err = c.operate(func(ctx context.Context, s *service.Service) error {
			_, err := s.ACLSetPolicy(ctx, pol)
			return err
		})
		if err != nil {
			break
		}
		var sec string
		sec, err = w.createToken(i)
		if err == nil {
			a.c = a.newClient(sec)
			w.mu.Lock()
			a.secret = sec
			w.mu.Unlock()
		}
	}
	w.hand(func() {
		if err != nil {
			// The world's faults start later than this takes.
			w.violate("w", "the ACLs could not be set up: %v", err)
			return
		}
		w.tracef("w", "acl: bootstrapped, a token for each of %d clients", len(actors))
	})
	if err != nil {
		for _, a := range actors {
			if a.c == nil {
				a.c = a.newClient("")
			}
		}
	}
}

// aclWait waits, with ACLs, until the client processes have their tokens.
func (w *world) aclWait() {
	if w.aclReady != nil {
		<-w.aclReady
	}
}

// createToken creates (again) actor i's principal and answers its secret.
func (w *world) createToken(i int) (string, error) {
	var sec string
	err := w.cl.operate(func(ctx context.Context, s *service.Service) error {
		out, err := s.ACLCreateToken(ctx, api.ACLTokenRequest{Name: principal(i), Policies: []string{policyOf(i)}, Replace: true})
		sec = out.Secret
		return err
	})
	return sec, err
}

// aclFault takes something from actor a (its token, or its policy's
// rules) in a goroutine of the operator's, and gives it back at heal.
// It answers the heal.
func (m *nemesis) aclFault(r *rand.Rand, a *actor, d time.Duration) (heal func()) {
	w := m.w
	token := r.IntN(2) == 0
	what := "its policy's rules taken away"
	if token {
		what = "its token deleted"
	}
	w.tracef("w", "acl: client %d: %s for %s", a.i, what, d)
	took := make(chan *simcheck.Revocation, 1)
	w.ops.Add(1)
	go func() {
		defer w.ops.Done()
		// A fault may begin before the operator has given the clients
		// their tokens: it takes the token it was given.
		w.aclWait()
		began := time.Now()
		var secret string
		var err error
		if token {
			w.mu.Lock()
			secret = a.secret
			w.mu.Unlock()
			err = w.cl.operate(func(ctx context.Context, s *service.Service) error {
				_, err := s.ACLDeleteToken(ctx, api.ACLDeleteRequest{Name: principal(a.i)})
				return err
			})
		} else {
			err = w.cl.operate(func(ctx context.Context, s *service.Service) error {
				_, err := s.ACLSetPolicy(ctx, aclPolicy(a.i, true))
				return err
			})
		}
		acked := time.Now()
		w.hand(func() { w.tracef("w", "acl: client %d: %s: %v", a.i, what, err) })
		if err != nil {
			took <- nil
			return
		}
		took <- w.acl.Revoked(a.i, secret, began, acked)
	}()
	return func() {
		w.ops.Add(1)
		go func() {
			defer w.ops.Done()
			rev := <-took
			if rev == nil {
				return
			}
			if token {
				sec, err := w.createToken(a.i)
				w.hand(func() { w.tracef("w", "acl: client %d: a new token: %v", a.i, err) })
				if err == nil {
					a.renew.Store(&sec)
				}
				return
			}
			w.acl.Restoring(rev)
			err := w.cl.operate(func(ctx context.Context, s *service.Service) error {
				_, err := s.ACLSetPolicy(ctx, aclPolicy(a.i, false))
				return err
			})
			w.acl.Restored(rev)
			w.hand(func() { w.tracef("w", "acl: client %d: its policy's rules back: %v", a.i, err) })
		}()
	}
}

// newClient is a's client of the world's nodes, with secret as its token
// ("": none).
func (a *actor) newClient(secret string) *client.Client {
	return a.newClientNamed(secret, fmt.Sprintf("client%d", a.i))
}

// newClientNamed is newClient drawing from the random source name.
func (a *actor) newClientNamed(secret, name string) *client.Client {
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: a.net}), client.WithFramed(false),
		client.WithClock(a.clk), client.WithRandom(simrand.Source(a.w.seed, name))}
	if secret != "" {
		opts = append(opts, client.WithAuthToken(secret))
	}
	c, err := client.New(a.addrs, opts...)
	if err != nil {
		panic(err) // the addresses are the world's own
	}
	return c
}
