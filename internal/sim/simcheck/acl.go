package simcheck

import (
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/api"
)

// ACL is the record of the acknowledged changes that took something from
// a client's principal (its token, or its policy's rules until they were
// given back), on which the answers the world's network carries are
// judged (Check): no call sent after a token's deletion was acknowledged
// is answered OK under that token, and none sent after a policy's rules
// were taken away (acknowledged) and answered before they were given
// back is answered OK where it needed them.
type ACL struct {
	r       Reporter
	t0      time.Time
	mu      sync.Mutex
	revoked []*Revocation
}

// Revocation is one acknowledged change that took something from a
// client's principal.
type Revocation struct {
	client   int
	secret   string    // the token deleted; "" for rules taken away
	began    time.Time // when the operator's call began
	acked    time.Time // when the operator's call was answered
	restored time.Time // rules: when the call giving them back began (zero: not yet)
	back     time.Time // rules: when that call was answered (zero: not yet)
}

// NewACL is an empty record of a world that began at t0, reporting to r.
func NewACL(r Reporter, t0 time.Time) *ACL { return &ACL{r: r, t0: t0} }

// Revoked records the deletion of client's token secret ("": the taking
// away of its policy's rules), by an operator's call that began at began
// and was answered OK at acked.
func (l *ACL) Revoked(client int, secret string, began, acked time.Time) *Revocation {
	rev := &Revocation{client: client, secret: secret, began: began, acked: acked}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.revoked = append(l.revoked, rev)
	return rev
}

// Restoring notes that the call giving rev's rules back begins now.
func (l *ACL) Restoring(rev *Revocation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rev.restored = time.Now()
}

// Restored notes that the call giving rev's rules back is answered now.
func (l *ACL) Restored(rev *Revocation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rev.back = time.Now()
}

// lockPaths are the calls that need the lock verb on their keys.
var lockPaths = map[string]bool{api.PathAcquire: true, api.PathRenew: true, api.PathExtend: true,
	api.PathExtendBatch: true, api.PathAcquireAll: true, api.PathRelease: true}

// openPaths need no token; the members view is answered by a node cut
// off from every leader under the tables it has applied (DESIGN.md,
// Service.OwnACL), so it is not judged here either.
var openPaths = map[string]bool{api.PathHealth: true, api.PathReady: true, api.PathIdentity: true, api.PathACLRevision: true,
	api.PathMembers: true}

// Check judges an answer carried to client (src in the trace): sent at
// sent under secret, for path, served with status code.
func (l *ACL) Check(src string, client int, secret, path string, sent time.Time, code int) {
	if code < 200 || code > 299 || openPaths[path] {
		return
	}
	now := time.Now()
	var found []string
	l.mu.Lock()
	for _, rev := range l.revoked {
		if rev.client != client || !sent.After(rev.acked) {
			continue
		}
		switch {
		case rev.secret != "" && rev.secret == secret:
			found = append(found, fmt.Sprintf("acl: client %d's %s sent at %s answered %d under a token deleted at %s",
				client, path, sent.Sub(l.t0), code, rev.acked.Sub(l.t0)))
		case rev.secret == "" && lockPaths[path] && (rev.restored.IsZero() || now.Before(rev.restored)) && l.rulesGoneBy(rev, sent):
			found = append(found, fmt.Sprintf("acl: client %d's %s sent at %s answered %d after its lock rules were taken away at %s",
				client, path, sent.Sub(l.t0), code, rev.acked.Sub(l.t0)))
		}
	}
	l.mu.Unlock()
	for _, v := range found {
		l.r.Violate(src, "%s", v)
	}
}

// rulesGoneBy says whether rev's taking away of the rules is sure to
// have been in force for a call sent at sent (under mu): not if an
// earlier fault's giving back of the rules overlapped rev's call (began
// before rev was acknowledged, answered after rev's call began, or not
// yet), for the two may have been applied in either order.
func (l *ACL) rulesGoneBy(rev *Revocation, sent time.Time) bool {
	for _, o := range l.revoked {
		if o == rev || o.client != rev.client || o.secret != "" || o.restored.IsZero() || !o.restored.Before(rev.acked) {
			continue
		}
		if o.back.IsZero() || o.back.After(rev.began) {
			return false
		}
	}
	return sent.After(rev.acked)
}
