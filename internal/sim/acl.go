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
)

// ACLs in the world (Config.ACL): once the first leader is up, an
// operator bootstraps the cluster's ACLs and gives each client process a
// principal of its own ("c<i>", acting as holders "c<i>/...") with a
// policy of its own: the actors lock and read under lock/, sem/ and rw/;
// the prober and the watcher, never changed, every key. The nemesis's
// acl fault deletes an actor's token or takes its policy's rules away,
// and gives them back when it heals (a new token: the old secret is
// never good again). The check, on every answer the world's network
// carries: no call sent after a token's deletion was acknowledged is
// answered OK under that token, and none sent after a policy's rules
// were taken away (acknowledged) and answered before they were given
// back is answered OK where it needed them.

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

// revocation is one acknowledged change that took something from a
// principal: its token (secret), or its policy's rules (until restored,
// when given back).
type revocation struct {
	client   int
	secret   string    // the token deleted; "" for rules taken away
	began    time.Time // when the operator's call began
	acked    time.Time // when the operator's call was answered
	restored time.Time // rules: when the call giving them back began (zero: not yet)
	back     time.Time // rules: when that call was answered (zero: not yet)
}

// lockPaths are the calls that need the lock verb on their keys.
var lockPaths = map[string]bool{api.PathAcquire: true, api.PathRenew: true, api.PathExtend: true,
	api.PathExtendBatch: true, api.PathAcquireAll: true, api.PathRelease: true}

// openPaths need no token; the members view is answered by a node cut
// off from every leader under the tables it has applied (DESIGN.md,
// Service.OwnACL), so it is not judged here either.
var openPaths = map[string]bool{api.PathHealth: true, api.PathReady: true, api.PathIdentity: true, api.PathACLRevision: true,
	api.PathMembers: true}

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
	err := c.operate(func(ctx context.Context, s *service.Service) error {
		_, err := s.ACLBootstrap(ctx)
		if err != nil && tried && strings.Contains(err.Error(), "already bootstrapped") {
			// Only this operator bootstraps: an earlier try of its own
			// was applied, though not answered.
			return nil
		}
		tried = true
		return err
	})
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
	took := make(chan *revocation, 1)
	w.ops.Add(1)
	go func() {
		defer w.ops.Done()
		// A fault may begin before the operator has given the clients
		// their tokens: it takes the token it was given.
		w.aclWait()
		rev := &revocation{client: a.i, began: time.Now()}
		var err error
		if token {
			w.mu.Lock()
			rev.secret = a.secret
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
		rev.acked = time.Now()
		w.hand(func() { w.tracef("w", "acl: client %d: %s: %v", a.i, what, err) })
		if err != nil {
			took <- nil
			return
		}
		w.mu.Lock()
		w.revoked = append(w.revoked, rev)
		w.mu.Unlock()
		took <- rev
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
			w.mu.Lock()
			rev.restored = time.Now()
			w.mu.Unlock()
			err := w.cl.operate(func(ctx context.Context, s *service.Service) error {
				_, err := s.ACLSetPolicy(ctx, aclPolicy(a.i, false))
				return err
			})
			w.mu.Lock()
			rev.back = time.Now()
			w.mu.Unlock()
			w.hand(func() { w.tracef("w", "acl: client %d: its policy's rules back: %v", a.i, err) })
		}()
	}
}

// checkAnswer judges an answer the world's network carries to actor
// client: sent at sent under secret, for path, served with status code.
func (w *world) checkAnswer(client int, secret, path string, sent time.Time, code int) {
	if code < 200 || code > 299 || openPaths[path] {
		return
	}
	now := time.Now()
	var found []string
	w.mu.Lock()
	for _, rev := range w.revoked {
		if rev.client != client || !sent.After(rev.acked) {
			continue
		}
		switch {
		case rev.secret != "" && rev.secret == secret:
			found = append(found, fmt.Sprintf("acl: client %d's %s sent at %s answered %d under a token deleted at %s",
				client, path, sent.Sub(w.t0), code, rev.acked.Sub(w.t0)))
		case rev.secret == "" && lockPaths[path] && (rev.restored.IsZero() || now.Before(rev.restored)) && w.rulesGoneBy(rev, sent):
			found = append(found, fmt.Sprintf("acl: client %d's %s sent at %s answered %d after its lock rules were taken away at %s",
				client, path, sent.Sub(w.t0), code, rev.acked.Sub(w.t0)))
		}
	}
	w.mu.Unlock()
	for _, v := range found {
		w.violate(principal(client), "%s", v)
	}
}

// rulesGoneBy says whether rev's taking away of the rules is sure to
// have been in force for a call sent at sent (under w.mu): not if an
// earlier fault's giving back of the rules overlapped rev's call (began
// before rev was acknowledged, answered after rev's call began, or not
// yet), for the two may have been applied in either order.
func (w *world) rulesGoneBy(rev *revocation, sent time.Time) bool {
	for _, o := range w.revoked {
		if o == rev || o.client != rev.client || o.secret != "" || o.restored.IsZero() || !o.restored.Before(rev.acked) {
			continue
		}
		if o.back.IsZero() || o.back.After(rev.began) {
			return false
		}
	}
	return sent.After(rev.acked)
}

// bearer is the token a request carries.
func bearer(req *http.Request) string {
	const p = "Bearer "
	h := req.Header.Get("Authorization")
	if len(h) > len(p) && h[:len(p)] == p {
		return h[len(p):]
	}
	return ""
}

// newClient is a's client of the world's nodes, with secret as its token
// ("": none).
func (a *actor) newClient(secret string) *client.Client {
	return a.newClientNamed(secret, fmt.Sprintf("client%d", a.i))
}

// newClientNamed is newClient drawing from the random source name.
func (a *actor) newClientNamed(secret, name string) *client.Client {
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: a.net}), client.WithFramed(false),
		client.WithClock(a.clk), client.WithRandom(a.w.instantSource(name))}
	if secret != "" {
		opts = append(opts, client.WithAuthToken(secret))
	}
	c, err := client.New(a.addrs, opts...)
	if err != nil {
		panic(err) // the addresses are the world's own
	}
	return c
}
