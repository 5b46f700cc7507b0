package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/fencelock/fencelock/internal/acl"
)

// The ACL tables (internal/acl) as replicated state: OpACL carries one
// change, every node applies it in log order, and snapshots carry the
// tables, so every node enforces the same rules, changes need no restart,
// and a restarted or new node has them.

// ACLKind is what an OpACL command changes.
type ACLKind uint8

// The ACL changes. Values are part of the log format: never renumber.
const (
	ACLBootstrap       ACLKind = 1 // Principal.TokenHash: turn ACLs on with an admin (once)
	ACLSetPrincipal    ACLKind = 2 // Principal, Replace
	ACLDeletePrincipal ACLKind = 3 // Name
	ACLSetPolicy       ACLKind = 4 // Policy
	ACLDeletePolicy    ACLKind = 5 // Name
	aclKindLimit       ACLKind = 6
)

// ACLChange is the payload of OpACL.
type ACLChange struct {
	Kind      ACLKind
	Principal acl.Principal
	// Replace: ACLSetPrincipal may replace an existing principal (a new
	// token, other policies); without it an existing name is refused.
	Replace bool
	Policy  acl.Policy
	Name    string
}

// ACL returns the ACL tables as of the last applied entry. The value is
// never changed afterwards; hold it as long as needed.
//
// It takes no lock, so it may be called from an Observer or from a reader
// of events the Observer published: an event is published after the
// tables its entry was applied under.
func (f *FSM) ACL() *acl.State { return f.acls.Load() }

// ACLRevision is the log index of the entry that made the ACL tables as
// this node has them (after a restore, the snapshot's index, which is no
// earlier): a node that has applied this index has them too.
func (f *FSM) ACLRevision() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.aclIndex
}

// ACLWatch returns the ACL tables and a channel closed once they are
// replaced (by a change or a restore).
func (f *FSM) ACLWatch() (*acl.State, <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.acls.Load(), f.aclChanged
}

// aclSwapped tells ACLWatch's callers that acls was replaced; under the
// lock.
func (f *FSM) aclSwapped() {
	close(f.aclChanged)
	f.aclChanged = make(chan struct{})
}

// applyACL runs one change; a refusal changes nothing.
func (f *FSM) applyACL(c *ACLChange) error {
	if c == nil {
		return fmt.Errorf("%w: acl command without a change", ErrBadCommand)
	}
	var (
		next *acl.State
		err  error
	)
	switch c.Kind {
	case ACLBootstrap:
		next, err = f.acls.Load().Bootstrap(c.Principal.TokenHash)
	case ACLSetPrincipal:
		next, err = f.acls.Load().SetPrincipal(c.Principal, c.Replace)
	case ACLDeletePrincipal:
		next, err = f.acls.Load().DeletePrincipal(c.Name)
	case ACLSetPolicy:
		next, err = f.acls.Load().SetPolicy(c.Policy)
	case ACLDeletePolicy:
		next, err = f.acls.Load().DeletePolicy(c.Name)
	default:
		err = fmt.Errorf("%w: unknown acl change %d", ErrBadCommand, c.Kind)
	}
	if err != nil {
		return err
	}
	f.acls.Store(next)
	f.aclIndex = f.index
	f.aclSwapped()
	return nil
}

func appendACLChange(b []byte, c *ACLChange) ([]byte, error) {
	if c == nil || c.Kind == 0 || c.Kind >= aclKindLimit {
		return nil, fmt.Errorf("%w: bad acl change", ErrBadCommand)
	}
	b = append(b, byte(c.Kind))
	switch c.Kind {
	case ACLBootstrap:
		if !c.Principal.HasToken() {
			return nil, fmt.Errorf("%w: bootstrap without a token hash", ErrBadCommand)
		}
		b = appendString(b, string(c.Principal.TokenHash[:]))
	case ACLSetPrincipal:
		if err := c.Principal.Check(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadCommand, err)
		}
		b = append(b, boolByte(c.Replace))
		b = appendPrincipal(b, c.Principal)
	case ACLDeletePrincipal, ACLDeletePolicy:
		if len(c.Name) > acl.MaxNameLen {
			return nil, fmt.Errorf("%w: acl name too long", ErrBadCommand)
		}
		b = appendString(b, c.Name)
	case ACLSetPolicy:
		if err := c.Policy.Check(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadCommand, err)
		}
		b = appendPolicy(b, c.Policy)
	}
	return b, nil
}

func readACLChange(r *reader) *ACLChange {
	c := &ACLChange{Kind: ACLKind(r.Byte())}
	switch c.Kind {
	case ACLBootstrap:
		if c.Principal.TokenHash = readHash(r); r.Err() == nil && !c.Principal.HasToken() {
			r.fail("bootstrap without a token hash")
		}
	case ACLSetPrincipal:
		c.Replace = r.bool()
		c.Principal = readPrincipal(r)
		if err := c.Principal.Check(); r.Err() == nil && err != nil {
			r.fail("%v", err)
		}
	case ACLDeletePrincipal, ACLDeletePolicy:
		c.Name = r.String(acl.MaxNameLen)
	case ACLSetPolicy:
		c.Policy = readPolicy(r)
		if err := c.Policy.Check(); r.Err() == nil && err != nil {
			r.fail("%v", err)
		}
	default:
		r.fail("unknown acl change %d", c.Kind)
	}
	return c
}

// bool reads a byte that must be 0 or 1, so every encoding is canonical.
func (r *reader) bool() bool {
	switch b := r.Byte(); b {
	case 0, 1:
		return b == 1
	default:
		r.fail("flag byte %d", b)
		return false
	}
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// A principal: name | token hash (0 or 32 bytes) | policy count | names.
func appendPrincipal(b []byte, p acl.Principal) []byte {
	b = appendString(b, p.Name)
	if p.HasToken() {
		b = appendString(b, string(p.TokenHash[:]))
	} else {
		b = appendString(b, "")
	}
	b = binary.AppendUvarint(b, uint64(len(p.Policies)))
	for _, n := range p.Policies {
		b = appendString(b, n)
	}
	return b
}

func readHash(r *reader) [32]byte {
	var h [32]byte
	s := r.String(32)
	if r.Err() == nil && len(s) != 0 && len(s) != 32 {
		r.fail("token hash of %d bytes", len(s))
	}
	copy(h[:], s)
	if len(s) == 32 && h == ([32]byte{}) {
		r.fail("zero token hash") // written as "": not canonical
	}
	return h
}

func readPrincipal(r *reader) acl.Principal {
	p := acl.Principal{Name: r.String(acl.MaxNameLen), TokenHash: readHash(r)}
	n := r.bounded(acl.MaxPolicies)
	for i := 0; i < n && r.Err() == nil; i++ {
		p.Policies = append(p.Policies, r.String(acl.MaxNameLen))
	}
	return p
}

// A policy: name | rule count | each rule's prefix, verbs, deny.
func appendPolicy(b []byte, p acl.Policy) []byte {
	b = appendString(b, p.Name)
	b = binary.AppendUvarint(b, uint64(len(p.Rules)))
	for _, rule := range p.Rules {
		b = appendString(b, rule.Prefix)
		b = append(b, byte(rule.Verbs), boolByte(rule.Deny))
	}
	return b
}

func readPolicy(r *reader) acl.Policy {
	p := acl.Policy{Name: r.String(acl.MaxNameLen)}
	n := r.bounded(acl.MaxRules)
	for i := 0; i < n && r.Err() == nil; i++ {
		p.Rules = append(p.Rules, acl.Rule{Prefix: r.String(acl.MaxPrefixLen), Verbs: acl.Verb(r.Byte()), Deny: r.bool()})
	}
	return p
}

// bounded reads a count of at most limit items, each at least 2 bytes.
func (r *reader) bounded(limit int) int {
	n := r.Uvarint()
	if r.Err() != nil {
		return 0
	}
	if n > uint64(limit) || n > uint64(r.Len())/2 {
		r.fail("count of %d", n)
		return 0
	}
	return int(n)
}

// In a snapshot, after the cluster id: on byte | principals (sorted by
// name) | policies (sorted by name). Absent while ACLs were never
// bootstrapped, as in snapshots from before they existed.
func appendACLState(b []byte, s *acl.State) []byte {
	b = append(b, boolByte(s.On))
	names := acl.Names(s.Principals)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendPrincipal(b, s.Principals[n])
	}
	names = acl.Names(s.Policies)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendPolicy(b, s.Policies[n])
	}
	return b
}

func readACLState(r *reader) *acl.State {
	s := acl.Empty()
	s.On = r.bool()
	if r.Err() == nil && !s.On {
		r.fail("acl tables of a cluster not bootstrapped")
	}
	n := r.bounded(acl.MaxPrincipals)
	last := ""
	for i := 0; i < n && r.Err() == nil; i++ {
		p := readPrincipal(r)
		if err := p.Check(); r.Err() == nil && err != nil {
			r.fail("%v", err)
		}
		if i > 0 && p.Name <= last {
			r.fail("principals out of order")
		}
		last = p.Name
		s.Principals[p.Name] = p
	}
	n = r.bounded(acl.MaxPoliciesInTable)
	last = ""
	for i := 0; i < n && r.Err() == nil; i++ {
		p := readPolicy(r)
		if err := p.Check(); r.Err() == nil && err != nil {
			r.fail("%v", err)
		}
		if i > 0 && p.Name <= last {
			r.fail("policies out of order")
		}
		last = p.Name
		s.Policies[p.Name] = p
	}
	s.Rebuild()
	return s
}
