package service

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/fsm"
)

// The ACL operations. Changes are proposed through raft on the leader and
// answer once applied on it; every node then enforces them.

// ACLBootstrap turns ACLs on with the principal admin (policy admin:
// every verb on every key) and answers its secret, once per cluster; later
// calls are refused permission_denied.
func (s *Service) ACLBootstrap(ctx context.Context) (api.ACLSecret, error) {
	if s.fsm.ACL().On {
		return api.ACLSecret{}, s.fail(Denied("the cluster's ACLs are already bootstrapped; bootstrap works once"))
	}
	secret, err := acl.NewSecret()
	if err != nil {
		return api.ACLSecret{}, s.fail(&Error{Code: api.CodeInternal, Message: err.Error()})
	}
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLBootstrap, Principal: acl.Principal{TokenHash: acl.HashToken(secret)}}); e != nil {
		return api.ACLSecret{}, s.fail(e)
	}
	return api.ACLSecret{Principal: acl.BootstrapPrincipal, Policies: []string{acl.AdminPolicy}, Secret: secret}, nil
}

// ACLCreateToken creates (or with Replace replaces) a principal and
// answers its new secret.
func (s *Service) ACLCreateToken(ctx context.Context, req api.ACLTokenRequest) (api.ACLSecret, error) {
	p := acl.Principal{Name: req.Name, Policies: req.Policies}
	if err := p.Check(); err != nil {
		return api.ACLSecret{}, s.fail(Invalid("name", "%v", err))
	}
	out := api.ACLSecret{Principal: p.Name, Policies: append([]string{}, p.Policies...)}
	if !req.NoSecret {
		secret, err := acl.NewSecret()
		if err != nil {
			return api.ACLSecret{}, s.fail(&Error{Code: api.CodeInternal, Message: err.Error()})
		}
		p.TokenHash, out.Secret = acl.HashToken(secret), secret
	}
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLSetPrincipal, Principal: p, Replace: req.Replace}); e != nil {
		return api.ACLSecret{}, s.fail(e)
	}
	return out, nil
}

// ACLDeleteToken deletes a principal; its token stops working at once.
func (s *Service) ACLDeleteToken(ctx context.Context, req api.ACLDeleteRequest) (api.ACLDeleted, error) {
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLDeletePrincipal, Name: req.Name}); e != nil {
		return api.ACLDeleted{}, s.fail(e)
	}
	return api.ACLDeleted{Deleted: req.Name}, nil
}

// ACLSetPolicy adds or replaces a policy.
func (s *Service) ACLSetPolicy(ctx context.Context, req api.ACLPolicy) (api.ACLPolicy, error) {
	p := acl.Policy{Name: req.Name}
	for i, r := range req.Rules {
		v, err := acl.ParseVerbs(strings.Join(r.Verbs, ","))
		if err != nil {
			return api.ACLPolicy{}, s.fail(Invalid("rules", "rules[%d]: %v", i, err))
		}
		if e := checkText("rules["+strconv.Itoa(i)+"].prefix", r.Prefix); e != nil {
			return api.ACLPolicy{}, s.fail(e)
		}
		p.Rules = append(p.Rules, acl.Rule{Prefix: r.Prefix, Verbs: v, Deny: r.Deny})
	}
	if err := p.Check(); err != nil {
		return api.ACLPolicy{}, s.fail(Invalid("rules", "%v", err))
	}
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLSetPolicy, Policy: p}); e != nil {
		return api.ACLPolicy{}, s.fail(e)
	}
	return wirePolicy(p), nil
}

// ACLDeletePolicy deletes a policy; principals naming it lose its rules.
func (s *Service) ACLDeletePolicy(ctx context.Context, req api.ACLDeleteRequest) (api.ACLDeleted, error) {
	if e := s.proposeACL(fsm.ACLChange{Kind: fsm.ACLDeletePolicy, Name: req.Name}); e != nil {
		return api.ACLDeleted{}, s.fail(e)
	}
	return api.ACLDeleted{Deleted: req.Name}, nil
}

// ACLTokens lists the principals (never their secrets).
func (s *Service) ACLTokens(ctx context.Context) (api.ACLTokenList, error) {
	if _, e := s.readNow(); e != nil {
		return api.ACLTokenList{}, s.fail(e)
	}
	st := s.fsm.ACL()
	out := api.ACLTokenList{Principals: []api.ACLPrincipal{}}
	for _, n := range acl.Names(st.Principals) {
		p := st.Principals[n]
		out.Principals = append(out.Principals, api.ACLPrincipal{Name: n, Policies: append([]string{}, p.Policies...), HasToken: p.HasToken()})
	}
	return out, nil
}

// ACLPolicies lists the policies.
func (s *Service) ACLPolicies(ctx context.Context) (api.ACLPolicyList, error) {
	if _, e := s.readNow(); e != nil {
		return api.ACLPolicyList{}, s.fail(e)
	}
	st := s.fsm.ACL()
	out := api.ACLPolicyList{Policies: []api.ACLPolicy{}}
	for _, n := range acl.Names(st.Policies) {
		out.Policies = append(out.Policies, wirePolicy(st.Policies[n]))
	}
	return out, nil
}

func wirePolicy(p acl.Policy) api.ACLPolicy {
	out := api.ACLPolicy{Name: p.Name, Rules: []api.ACLRule{}}
	for _, r := range p.Rules {
		out.Rules = append(out.Rules, api.ACLRule{Prefix: r.Prefix, Verbs: strings.Split(r.Verbs.String(), ","), Deny: r.Deny})
	}
	return out
}

func (s *Service) proposeACL(c fsm.ACLChange) *Error {
	if e := s.writable(); e != nil {
		return e
	}
	res, err := s.propose(fsm.Command{Op: fsm.OpACL, ACL: &c})
	if err != nil {
		if errors.Is(err, fsm.ErrBadCommand) {
			return Invalid("body", "%v", err)
		}
		return proposalError(err)
	}
	switch {
	case res.Err == nil:
		return nil
	case errors.Is(res.Err, acl.ErrBootstrapped):
		return Denied("the cluster's ACLs are already bootstrapped; bootstrap works once")
	case errors.Is(res.Err, acl.ErrNotBootstrapped):
		return Invalid("acl", "the cluster's ACLs are not bootstrapped: run fencelock acl bootstrap first (nothing made before it may survive it)")
	case errors.Is(res.Err, acl.ErrLastAdmin):
		return Invalid("name", "refused: no principal would be left with admin on \"\", and nothing could change the ACLs again")
	case errors.Is(res.Err, acl.ErrNotFound):
		return NewError(api.CodeNotFound, "%v", res.Err)
	case errors.Is(res.Err, acl.ErrExists):
		return NewError(api.CodeAlreadyExists, "a principal named %q exists; ask with \"replace\": true to give it a new token (its old one stops working)", c.Principal.Name)
	}
	return Invalid("body", "%v", res.Err)
}

// aclKnown reports whether this node has applied every entry its log held
// when it started. Until then its tables may be older than its own log
// (a restarted follower applies nothing until a leader tells it what is
// committed), so tables that say ACLs are off cannot be believed.
func (s *Service) aclKnown() bool {
	if s.aclCaughtUp.Load() {
		return true
	}
	if s.node.AppliedIndex() < s.node.StartIndex() {
		return false
	}
	s.aclCaughtUp.Store(true)
	return true
}

// ACL is the cluster's ACL tables as this node has applied them, and
// whether it can vouch for them: a node that has not yet applied the log
// it had at start may hold tables older than its own log, and a node
// waiting to be joined holds none of its cluster's, so tables that say
// ACLs are off cannot be believed until known is true.
func (s *Service) ACL() (st *acl.State, known bool) {
	st = s.fsm.ACL()
	return st, st.On || s.aclKnown() && s.inCluster()
}

// inCluster reports whether this node has applied its cluster's identity
// (chosen by the cluster's first leader, so among the first entries of
// every cluster's log): a node waiting to be joined has not.
func (s *Service) inCluster() bool {
	if s.clusterKnown.Load() {
		return true
	}
	if s.fsm.ClusterID() == "" {
		return false
	}
	s.clusterKnown.Store(true)
	return true
}
