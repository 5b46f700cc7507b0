package fence

import (
	"context"
	"errors"
	"fmt"
)

// KeyHeader is the request header that names the lock key whose grant the
// Fencing-Token header carries. A verifying fence needs the key of a
// resource that is not bound to one yet; Middleware puts it in the
// request's context (WithKey).
const KeyHeader = "Fencing-Key"

// A Verifier asks the lock service whether token is a live grant of key:
// issued for key, and key's lease on it not ended. The one the cluster
// backs is client.Verifier; its answer is one linearizable read. Verify
// returns nil when it is, an error matching ErrUnverifiedToken (a
// *UnverifiedTokenError) when the service says it is not, and any other
// error when the service could not be asked: the fence then refuses the
// token without deciding it is bad.
type Verifier interface {
	Verify(ctx context.Context, key string, token uint64) error
}

var (
	// ErrUnverifiedToken: the lock service does not hold the token as a
	// live grant of the key, so the fence does not honour it.
	ErrUnverifiedToken = errors.New("fence: token not verified by the lock service")
	// ErrWrongKey: the token is for another lock key than the one the
	// resource is bound to.
	ErrWrongKey = errors.New("fence: token of another lock key")
	// ErrNoKey: a verifying fence was given a token for a resource bound
	// to no lock key, and the request named none.
	ErrNoKey = errors.New("fence: no lock key for the resource")
)

// UnverifiedTokenError is the lock service's "no": Token is not a live
// grant of Key. Issued, when not 0, is the highest token the service had
// issued; a Token above it was never issued at all (made up, mistyped, or
// from before a cluster was rebuilt without a token floor). Current is
// Key's live token (0: none, or not known).
type UnverifiedTokenError struct {
	Resource string
	Key      string
	Token    uint64
	Issued   uint64
	Current  uint64
}

func (e *UnverifiedTokenError) Error() string {
	on := ""
	if e.Resource != "" {
		on = fmt.Sprintf(" on %q", e.Resource)
	}
	if e.Issued != 0 && e.Token > e.Issued {
		return fmt.Sprintf("fence: token %d for lock key %q%s was never issued: the lock service's highest token is %d", e.Token, e.Key, on, e.Issued)
	}
	live := "it has no live lease"
	if e.Current != 0 {
		live = fmt.Sprintf("its live token is %d", e.Current)
	}
	return fmt.Sprintf("fence: token %d%s is not a live grant of lock key %q (%s): the token is another key's, or its lease has ended", e.Token, on, e.Key, live)
}

func (e *UnverifiedTokenError) Unwrap() error { return ErrUnverifiedToken }

// WrongKeyError: Resource is bound to lock key Bound, and Token came for
// lock key Key.
type WrongKeyError struct {
	Resource string
	Bound    string
	Key      string
	Token    uint64
}

func (e *WrongKeyError) Error() string {
	return fmt.Sprintf("fence: resource %q is bound to lock key %q; token %d is for lock key %q", e.Resource, e.Bound, e.Token, e.Key)
}

func (e *WrongKeyError) Unwrap() error { return ErrWrongKey }

type keyCtx struct{}

// WithKey returns ctx naming key as the lock key of the token a fence is
// about to be given (what the Fencing-Key header carries).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyFrom is the lock key WithKey put in ctx ("" if none).
func KeyFrom(ctx context.Context) string {
	k, _ := ctx.Value(keyCtx{}).(string)
	return k
}

// Verification makes a fence ask the lock service before it honours a new
// token: a token above a resource's mark raises it only once Verifier has
// confirmed that the token is a live grant of the lock key that guards
// the resource. An equal token was verified when it raised the mark and is
// not asked about again; an older one is stale and refused without asking.
// So the service is asked once per new token per resource, and a fence
// that verifies needs the service reachable to accept a new token (not to
// accept more writes under the current one).
//
// A resource is bound to one lock key: the key recorded with its mark,
// else Key(resource) when Key is set and answers non-empty, else the key
// the request names (KeyFrom), which is then recorded with the first mark
// it raises. A request naming another key than the binding is refused
// (*WrongKeyError) before anything is asked, whatever its token.
//
// Every adapter takes a *Verification (nil: no verification, the fence as
// it always was); it calls Check under the resource's lock, between the
// stale check and raising the mark, and records the key Check returns
// with the mark.
type Verification struct {
	Verifier Verifier
	// Key is the configured binding of a resource to its lock key; nil,
	// or "" for a resource, leaves the binding to the first verified
	// token's request.
	Key func(resource string) string
}

// Check is the verification of token for resource, whose mark is highest
// (the highest token admitted, reads included)
// and whose recorded key is bound ("" for none), on behalf of a request
// whose ctx may name a key (WithKey). It returns the key to record with
// the mark. A nil v checks nothing and returns bound.
func (v *Verification) Check(ctx context.Context, resource string, token, highest uint64, bound string) (string, error) {
	if v == nil || v.Verifier == nil {
		return bound, nil
	}
	key := bound
	if configured := v.configured(resource); configured != "" {
		if bound != "" && configured != bound {
			return "", &WrongKeyError{Resource: resource, Bound: bound, Key: configured, Token: token}
		}
		key = configured
	}
	claimed := KeyFrom(ctx)
	switch {
	case key == "" && claimed == "":
		return "", fmt.Errorf("%w %q: it is not bound to one yet and the request names none (send %s, or configure the binding)", ErrNoKey, resource, KeyHeader)
	case key == "":
		key = claimed
	case claimed != "" && claimed != key:
		return "", &WrongKeyError{Resource: resource, Bound: key, Key: claimed, Token: token}
	}
	if token <= highest && bound != "" {
		// A token at the mark was verified when it raised it; one below
		// it (a read, which a write's mark does not stale) raises
		// nothing and cannot fence anyone out.
		return bound, nil
	}
	if err := v.Verifier.Verify(ctx, key, token); err != nil {
		var ue *UnverifiedTokenError
		if errors.As(err, &ue) && ue.Resource == "" {
			c := *ue
			c.Resource = resource
			return "", &c
		}
		return "", err
	}
	return key, nil
}

func (v *Verification) configured(resource string) string {
	if v.Key == nil {
		return ""
	}
	return v.Key(resource)
}
