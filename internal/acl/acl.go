// Package acl is fencelock's policy engine: principals, their bearer
// token hashes, and policies of key-prefix rules. It is pure: it keeps no
// state of its own beyond the values it is given, reads no clock and does
// no I/O. The replicated copy of the tables lives in the state machine
// (package internal/fsm); the server authenticates a request to a
// Principal and asks Allowed before an operation runs.
//
// Evaluation (docs/SECURITY.md, "Authentication and ACLs"): among the
// rules of all the principal's policies whose prefix is a prefix of the
// key and whose verbs include the verb asked for, the one with the
// longest prefix decides; at the same prefix a deny beats an allow; no
// such rule is a deny.
package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Verb is a set of permissions.
type Verb uint8

// The verbs.
const (
	// Lock: acquire (and wait), extend, renew, release of one's own holders.
	Lock Verb = 1 << iota
	// Read: check, get, list.
	Read
	// Admin: membership, token and policy changes (on the prefix ""),
	// releasing another principal's holder (force-release, on the key).
	Admin

	allVerbs = Lock | Read | Admin
)

var verbNames = []struct {
	v    Verb
	name string
}{{Lock, "lock"}, {Read, "read"}, {Admin, "admin"}}

func (v Verb) String() string {
	var parts []string
	for _, n := range verbNames {
		if v&n.v != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ",")
}

// ParseVerbs parses a comma-separated verb list such as "lock,read".
func ParseVerbs(s string) (Verb, error) {
	var v Verb
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		found := false
		for _, n := range verbNames {
			if p == n.name {
				v |= n.v
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("acl: unknown verb %q (lock, read, admin)", p)
		}
	}
	return v, nil
}

// Rule allows (or, with Deny, denies) Verbs on every key that starts with
// Prefix. The prefix "" matches every key.
type Rule struct {
	Prefix string
	Verbs  Verb
	Deny   bool
}

func (r Rule) String() string {
	s := r.Prefix + ":" + r.Verbs.String()
	if r.Deny {
		s += ":deny"
	}
	return s
}

// ParseRule parses "prefix:verbs" or "prefix:verbs:deny" (or ":allow").
// The prefix is everything before the last colon-separated verb list, so
// it may itself hold colons.
func ParseRule(s string) (Rule, error) {
	deny := false
	if rest, ok := strings.CutSuffix(s, ":deny"); ok {
		s, deny = rest, true
	} else if rest, ok := strings.CutSuffix(s, ":allow"); ok {
		s = rest
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Rule{}, fmt.Errorf("acl: rule %q is not prefix:verbs[:deny]", s)
	}
	v, err := ParseVerbs(s[i+1:])
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Prefix: s[:i], Verbs: v, Deny: deny}
	return r, r.check()
}

// Limits of the tables; they bound the state machine's memory and the
// size of one command.
const (
	MaxNameLen         = 128
	MaxPrefixLen       = 1024
	MaxRules           = 100
	MaxPolicies        = 16 // per principal
	MaxPrincipals      = 10000
	MaxPoliciesInTable = 1000
)

func (r Rule) check() error {
	switch {
	case len(r.Prefix) > MaxPrefixLen:
		return fmt.Errorf("acl: rule prefix of %d bytes; the limit is %d", len(r.Prefix), MaxPrefixLen)
	case r.Verbs == 0 || r.Verbs&^allVerbs != 0:
		return fmt.Errorf("acl: rule %q has no verbs", r.Prefix)
	}
	return nil
}

// CheckName checks a principal or policy name: 1..MaxNameLen bytes of
// letters, digits and . _ - @ (no "/": a holder name is "<principal>/...").
func CheckName(what, name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("acl: %s name must be 1..%d bytes", what, MaxNameLen)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-@", c)
		if !ok {
			return fmt.Errorf("acl: %s name %q: only letters, digits and . _ - @ are allowed", what, name)
		}
	}
	return nil
}

// Policy is a named set of rules.
type Policy struct {
	Name  string
	Rules []Rule
}

// Check reports what is wrong with p.
func (p Policy) Check() error {
	if err := CheckName("policy", p.Name); err != nil {
		return err
	}
	if len(p.Rules) > MaxRules {
		return fmt.Errorf("acl: policy %s has %d rules; the limit is %d", p.Name, len(p.Rules), MaxRules)
	}
	for _, r := range p.Rules {
		if err := r.check(); err != nil {
			return err
		}
	}
	return nil
}

// Principal is who a request acts as: a name, the policies that apply to
// it, and the hash of its bearer token (zero: it has no token and is
// reached only by a client certificate naming it).
type Principal struct {
	Name      string
	Policies  []string
	TokenHash [32]byte
}

// HasToken reports whether p can authenticate with a bearer token.
func (p Principal) HasToken() bool { return p.TokenHash != [32]byte{} }

// Check reports what is wrong with p.
func (p Principal) Check() error {
	if err := CheckName("principal", p.Name); err != nil {
		return err
	}
	if len(p.Policies) > MaxPolicies {
		return fmt.Errorf("acl: principal %s has %d policies; the limit is %d", p.Name, len(p.Policies), MaxPolicies)
	}
	for _, n := range p.Policies {
		if err := CheckName("policy", n); err != nil {
			return err
		}
	}
	return nil
}

// AdminPolicy is the policy bootstrap creates: every verb on every key.
const AdminPolicy = "admin"

// BootstrapPrincipal is the principal bootstrap creates.
const BootstrapPrincipal = "admin"

// AdminRules are AdminPolicy's rules.
func AdminRules() []Rule { return []Rule{{Prefix: "", Verbs: allVerbs}} }

// State is the ACL tables at one point of the log. A State is never
// changed once built: the state machine replaces it whole (copy on
// write), so readers hold it without a lock.
type State struct {
	// On: the cluster was bootstrapped; from then on every call needs a
	// credential, even if every principal has since been deleted.
	On         bool
	Principals map[string]Principal
	Policies   map[string]Policy
	byHash     map[[32]byte]string
}

// Empty is the state of a cluster that was never bootstrapped.
func Empty() *State {
	return &State{Principals: map[string]Principal{}, Policies: map[string]Policy{}, byHash: map[[32]byte]string{}}
}

// Clone returns a copy to change.
func (s *State) Clone() *State {
	c := &State{On: s.On, Principals: make(map[string]Principal, len(s.Principals)),
		Policies: make(map[string]Policy, len(s.Policies)), byHash: make(map[[32]byte]string, len(s.byHash))}
	for k, v := range s.Principals {
		c.Principals[k] = v
	}
	for k, v := range s.Policies {
		c.Policies[k] = v
	}
	for k, v := range s.byHash {
		c.byHash[k] = v
	}
	return c
}

// Errors of the changes.
var (
	ErrBootstrapped = errors.New("acl: the cluster's ACLs are already bootstrapped")
	ErrNotFound     = errors.New("acl: no such principal or policy")
	ErrExists       = errors.New("acl: a principal of that name exists")
	ErrTooMany      = errors.New("acl: table full")
	ErrTokenInUse   = errors.New("acl: that token hash is already in use")
	// ErrNotBootstrapped: tables change only once ACLs are on, so that
	// nothing made while anyone could call (before bootstrap) survives it.
	ErrNotBootstrapped = errors.New("acl: the cluster's ACLs are not bootstrapped")
	// ErrLastAdmin: the change would leave no principal with admin on
	// "", and with it no way to change the tables again (there is no
	// reset).
	ErrLastAdmin = errors.New("acl: the change would leave no principal with admin on \"\"")
)

// keepsAdmin refuses next unless some principal still has admin on "".
func keepsAdmin(next *State) (*State, error) {
	for _, p := range next.Principals {
		if next.Allowed(p, Admin, "") {
			return next, nil
		}
	}
	return nil, ErrLastAdmin
}

// SetPrincipal adds or replaces p (in a clone; s itself is not changed).
func (s *State) SetPrincipal(p Principal, replace bool) (*State, error) {
	if !s.On {
		return nil, ErrNotBootstrapped
	}
	next, err := s.setPrincipal(p, replace)
	if err != nil {
		return nil, err
	}
	return keepsAdmin(next)
}

func (s *State) setPrincipal(p Principal, replace bool) (*State, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	if _, ok := s.Principals[p.Name]; ok && !replace {
		return nil, ErrExists
	} else if !ok && len(s.Principals) >= MaxPrincipals {
		return nil, ErrTooMany
	}
	if owner, ok := s.byHash[p.TokenHash]; ok && p.HasToken() && owner != p.Name {
		return nil, ErrTokenInUse
	}
	c := s.Clone()
	if old, ok := c.Principals[p.Name]; ok && old.HasToken() {
		delete(c.byHash, old.TokenHash)
	}
	p.Policies = append([]string(nil), p.Policies...)
	c.Principals[p.Name] = p
	if p.HasToken() {
		c.byHash[p.TokenHash] = p.Name
	}
	return c, nil
}

// DeletePrincipal removes the principal name.
func (s *State) DeletePrincipal(name string) (*State, error) {
	if !s.On {
		return nil, ErrNotBootstrapped
	}
	p, ok := s.Principals[name]
	if !ok {
		return nil, ErrNotFound
	}
	c := s.Clone()
	delete(c.Principals, name)
	if p.HasToken() {
		delete(c.byHash, p.TokenHash)
	}
	return keepsAdmin(c)
}

// SetPolicy adds or replaces p.
func (s *State) SetPolicy(p Policy) (*State, error) {
	if !s.On {
		return nil, ErrNotBootstrapped
	}
	next, err := s.setPolicy(p)
	if err != nil {
		return nil, err
	}
	return keepsAdmin(next)
}

func (s *State) setPolicy(p Policy) (*State, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	if _, ok := s.Policies[p.Name]; !ok && len(s.Policies) >= MaxPoliciesInTable {
		return nil, ErrTooMany
	}
	c := s.Clone()
	p.Rules = append([]Rule(nil), p.Rules...)
	c.Policies[p.Name] = p
	return c, nil
}

// DeletePolicy removes the policy name; principals that name it keep the
// name, which then grants nothing.
func (s *State) DeletePolicy(name string) (*State, error) {
	if !s.On {
		return nil, ErrNotBootstrapped
	}
	if _, ok := s.Policies[name]; !ok {
		return nil, ErrNotFound
	}
	c := s.Clone()
	delete(c.Policies, name)
	return keepsAdmin(c)
}

// Bootstrap turns ACLs on with one admin principal whose token hashes to
// hash, and the admin policy. It is refused once the state is On.
func (s *State) Bootstrap(hash [32]byte) (*State, error) {
	if s.On {
		return nil, ErrBootstrapped
	}
	c, err := s.setPolicy(Policy{Name: AdminPolicy, Rules: AdminRules()})
	if err != nil {
		return nil, err
	}
	if c, err = c.setPrincipal(Principal{Name: BootstrapPrincipal, Policies: []string{AdminPolicy}, TokenHash: hash}, true); err != nil {
		return nil, err
	}
	c.On = true
	return c, nil
}

// ByToken returns the principal whose token is secret. The table is
// indexed by the SHA-256 of the secret (a lookup reveals nothing about a
// high-entropy secret by its timing); the stored hash is then compared in
// constant time.
func (s *State) ByToken(secret string) (Principal, bool) {
	if secret == "" {
		return Principal{}, false
	}
	h := HashToken(secret)
	name, ok := s.byHash[h]
	if !ok {
		return Principal{}, false
	}
	p := s.Principals[name]
	if subtle.ConstantTimeCompare(p.TokenHash[:], h[:]) != 1 {
		return Principal{}, false
	}
	return p, true
}

// Allowed reports whether p may use verb on key (admin calls that name
// no key ask for the key "": only a rule on the prefix "" covers it).
func (s *State) Allowed(p Principal, verb Verb, key string) bool {
	best, allow := -1, false
	for _, name := range p.Policies {
		pol, ok := s.Policies[name]
		if !ok {
			continue
		}
		for _, r := range pol.Rules {
			if r.Verbs&verb == 0 || !strings.HasPrefix(key, r.Prefix) {
				continue
			}
			switch n := len(r.Prefix); {
			case n > best:
				best, allow = n, !r.Deny
			case n == best && r.Deny:
				allow = false
			}
		}
	}
	return allow
}

// ReadsAll reports whether p may read every key that starts with
// prefix: read on the prefix itself, and no deny of read on a longer
// prefix under it. A figure about all those keys (a count by prefix, the
// table's totals) tells no more than such a principal could read.
func (s *State) ReadsAll(p Principal, prefix string) bool {
	if !s.Allowed(p, Read, prefix) {
		return false
	}
	for _, name := range p.Policies {
		for _, r := range s.Policies[name].Rules {
			if r.Deny && r.Verbs&Read != 0 && len(r.Prefix) > len(prefix) && strings.HasPrefix(r.Prefix, prefix) {
				return false
			}
		}
	}
	return true
}

// OwnsHolder reports whether the principal name may act as holder: the
// holder is the name itself or starts with name + "/".
func OwnsHolder(name, holder string) bool {
	return holder == name || strings.HasPrefix(holder, name+"/")
}

// HashToken is the stored form of a bearer token secret.
func HashToken(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// TokenPrefix starts every secret NewSecret makes, so that one found in a
// log or a repository is recognised.
const TokenPrefix = "flk_"

// NewSecret returns a new bearer token secret: 32 random bytes.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("acl: random: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Names returns m's keys, sorted.
func Names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Rebuild restores the derived index after the tables were filled
// directly (decoding a snapshot).
func (s *State) Rebuild() {
	s.byHash = make(map[[32]byte]string, len(s.Principals))
	for n, p := range s.Principals {
		if p.HasToken() {
			s.byHash[p.TokenHash] = n
		}
	}
}

// CheckKey refuses a key whose meaning a prefix rule could misread: an
// empty, "." or ".." segment between slashes (a//x, a/./x, a/x/../y and
// a/ are other strings than the paths they look like, so a deny on a/y/
// would not cover them), or a control character or NUL. The server
// applies it to every key once ACLs are on (docs/SECURITY.md).
func CheckKey(key string) error { return checkPath(key, false) }

// CheckPrefix is CheckKey for a prefix of keys: its last segment may be
// partial (empty, ".", "a/." all begin real keys); the segments before
// it are checked as a key's.
func CheckPrefix(prefix string) error { return checkPath(prefix, true) }

func checkPath(s string, prefix bool) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("acl: byte %d is the control character %#02x; keys hold none once ACLs are on", i, c)
		}
	}
	segs := strings.Split(s, "/")
	if prefix {
		segs = segs[:len(segs)-1]
	}
	for i, seg := range segs {
		switch seg {
		case "":
			if !prefix && len(segs) == 1 {
				return nil // the empty key: the caller's own check refuses it
			}
			return fmt.Errorf("acl: segment %d is empty (a leading, doubled or trailing \"/\"); once ACLs are on a key has none, so that a prefix rule means what it reads", i+1)
		case ".", "..":
			return fmt.Errorf("acl: segment %d is %q; once ACLs are on a key has no \".\" or \"..\" segment, so that a prefix rule means what it reads", i+1, seg)
		}
	}
	return nil
}
