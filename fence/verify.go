package fence

import (
	"context"
	"errors"
	"fmt"
	"time"
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

// DefaultVerifyTimeout bounds a Verification's question to the lock
// service when its Timeout is 0.
const DefaultVerifyTimeout = 2 * time.Second

var (
	// ErrUnavailable: the lock service could not be asked about a new
	// token (it did not answer within the Verification's Timeout, or
	// could not be reached). The token is refused, not judged: it is
	// neither stale nor unverified.
	ErrUnavailable = errors.New("fence: the lock service could not be asked")
	// ErrUnbound: a verifying fence was given a token for a resource its
	// configuration binds to no lock key (Verification.Key), and binding
	// on first use is off.
	ErrUnbound = errors.New("fence: resource not bound to a lock key")
	// ErrReverify: the mark an adapter read before it asked the lock
	// service changed, before it took the resource, in a way the answer
	// does not cover (a reset lowered or forgot it): the adapter lets the
	// resource go and asks again (Ask, Confirm).
	ErrReverify = errors.New("fence: the mark changed while the token was verified")
)

// UnavailableError is ErrUnavailable for one token: Err is why (the
// Verifier's error, or context.DeadlineExceeded when Timeout ran out).
type UnavailableError struct {
	Resource string
	Key      string
	Token    uint64
	Timeout  time.Duration // the bound that ran out; 0 when it did not
	Err      error
}

func (e *UnavailableError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("fence: token %d on %q not verified: the lock service did not answer about lock key %q within %v (refused, not judged; the current holder is not affected)", e.Token, e.Resource, e.Key, e.Timeout)
	}
	return fmt.Sprintf("fence: token %d on %q not verified: the lock service could not be asked about lock key %q: %v (refused, not judged)", e.Token, e.Resource, e.Key, e.Err)
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

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
// else Key(resource). A resource neither records nor is configured with
// a key is refused (ErrUnbound), unless BindOnFirstUse: then the key the
// request names (KeyFrom) binds it, recorded with the first mark it
// raises, whoever sent it. A request naming another key than the binding
// is refused (*WrongKeyError) before anything is asked, whatever its
// token.
//
// Every adapter takes a *Verification (nil: no verification, the fence as
// it always was) and follows the same two steps, so that the lock service
// is never asked while the resource is held:
//
//  1. Before it takes the resource (its lock, its transaction, its row
//     lock), the adapter reads the mark as it stands, without waiting for
//     anyone, and calls Ask with it. Ask asks the service when the token
//     needs it, bounded by Timeout.
//  2. Holding the resource, it reads the mark again, refuses a stale
//     token, and calls Confirm with that mark and Ask's answer. Confirm
//     never asks: it returns the key to record with the mark, a refusal,
//     or ErrReverify when the mark changed in a way Ask's answer does not
//     cover; the adapter then lets the resource go and starts again from
//     step 1 (a few times at most, then it returns the error).
//
// A current holder (a token equal to a mark that records a key) needs no
// question at step 1, so it never waits for the service, nor behind a
// newcomer who does.
type Verification struct {
	Verifier Verifier
	// Key is the configured binding of a resource to its lock key (a
	// KeyMap's Key, or any function); "" for a resource it does not bind.
	Key func(resource string) string
	// BindOnFirstUse lets a resource that Key does not bind, and whose
	// mark records no key, be bound to the key named by the first request
	// whose token the service confirms for it. Anyone who can reach the
	// resource with a live token of any key can then take it: leave it
	// off where writers of other keys can reach the resource.
	BindOnFirstUse bool
	// Timeout bounds each question to the service: past it the token is
	// refused with an *UnavailableError. 0 is DefaultVerifyTimeout; a
	// negative Timeout leaves the bound to the caller's ctx.
	Timeout time.Duration
	// OnBind, when not nil, is told of each first-use binding Confirm
	// returns (the adapter may still fail to record it).
	OnBind func(resource, key string, token uint64)
}

// Validate says whether v can bind any resource: a Verifier with neither
// Key nor BindOnFirstUse refuses every token. Adapters that return
// errors call it when they are made.
func (v *Verification) Validate() error {
	if v == nil || v.Verifier == nil || v.Key != nil || v.BindOnFirstUse {
		return nil
	}
	return fmt.Errorf("%w: a Verification binds resources with Key (a KeyMap, say), or with BindOnFirstUse set", ErrUnbound)
}

// Verified is what Ask learned, for Confirm.
type Verified struct {
	key   string
	token uint64
	ok    bool
}

// keyFor is the key resource is bound to for this request, or why there
// is none.
func (v *Verification) keyFor(ctx context.Context, resource string, token uint64, bound string) (string, error) {
	key := bound
	if configured := v.configured(resource); configured != "" {
		if bound != "" && configured != bound {
			return "", &WrongKeyError{Resource: resource, Bound: bound, Key: configured, Token: token}
		}
		key = configured
	}
	claimed := KeyFrom(ctx)
	switch {
	case key == "" && !v.BindOnFirstUse:
		return "", fmt.Errorf("%w: %q: the fence's configuration binds it to none, and binding on first use is off (configure its lock key: Verification.Key, fence-proxy --lock-key or --key-map)", ErrUnbound, resource)
	case key == "" && claimed == "":
		return "", fmt.Errorf("%w %q: it is not bound to one yet and the request names none (send %s, or configure the binding)", ErrNoKey, resource, KeyHeader)
	case key == "":
		key = claimed
	case claimed != "" && claimed != key:
		return "", &WrongKeyError{Resource: resource, Bound: key, Key: claimed, Token: token}
	}
	return key, nil
}

// needsAsk: a token at or below a mark that records a key raises nothing
// the service has not confirmed (equal: it was asked when it raised the
// mark; below: a read, which cannot fence anyone out).
func needsAsk(token, highest uint64, bound string) bool {
	return token > highest || bound == ""
}

// Ask is step 1: called before the adapter takes resource, with the mark
// as it stands (highest, the highest token admitted, reads included;
// bound, its recorded key, "" for none; both 0 and "" for a new
// resource). It refuses a request naming another key than the binding,
// and asks the service, within Timeout, when the token needs it. A nil v
// asks nothing.
func (v *Verification) Ask(ctx context.Context, resource string, token, highest uint64, bound string) (Verified, error) {
	if v == nil || v.Verifier == nil {
		return Verified{}, nil
	}
	key, err := v.keyFor(ctx, resource, token, bound)
	if err != nil || !needsAsk(token, highest, bound) {
		return Verified{}, err
	}
	timeout := v.Timeout
	if timeout == 0 {
		timeout = DefaultVerifyTimeout
	}
	qctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err = v.Verifier.Verify(qctx, key, token)
	var ue *UnverifiedTokenError
	switch {
	case err == nil:
		return Verified{key: key, token: token, ok: true}, nil
	case errors.As(err, &ue):
		if ue.Resource == "" {
			c := *ue
			c.Resource = resource
			return Verified{}, &c
		}
		return Verified{}, err
	case ctx.Err() != nil:
		return Verified{}, ctx.Err() // the caller gave up
	}
	e := &UnavailableError{Resource: resource, Key: key, Token: token, Err: err}
	if qctx.Err() != nil {
		e.Timeout, e.Err = timeout, context.DeadlineExceeded
	}
	return Verified{}, e
}

// Confirm is step 2: called holding resource, with the mark read there
// and after the stale check, and with Ask's answer. It never asks the
// service. It returns the key to record with the mark, a refusal, or
// ErrReverify (let the resource go and start again from Ask). A nil v
// returns bound.
func (v *Verification) Confirm(ctx context.Context, resource string, token, highest uint64, bound string, pre Verified) (string, error) {
	if v == nil || v.Verifier == nil {
		return bound, nil
	}
	key, err := v.keyFor(ctx, resource, token, bound)
	if err != nil {
		return "", err
	}
	if !needsAsk(token, highest, bound) {
		return bound, nil
	}
	if !pre.ok || pre.token != token || pre.key != key {
		return "", fmt.Errorf("%w: %q (mark %d, key %q) since it was read; ask again", ErrReverify, resource, highest, bound)
	}
	if bound == "" && v.configured(resource) == "" && v.OnBind != nil {
		v.OnBind(resource, key, token)
	}
	return key, nil
}

// Check is Ask then Confirm on one reading of the mark, for a caller
// that holds no lock of the resource while it runs (a check made under
// the resource's lock would make every writer of it wait for the
// service). It returns the key to record with the mark. A nil v checks
// nothing and returns bound.
func (v *Verification) Check(ctx context.Context, resource string, token, highest uint64, bound string) (string, error) {
	pre, err := v.Ask(ctx, resource, token, highest, bound)
	if err != nil {
		return "", err
	}
	return v.Confirm(ctx, resource, token, highest, bound, pre)
}

func (v *Verification) configured(resource string) string {
	if v.Key == nil {
		return ""
	}
	return v.Key(resource)
}

// MaxReverify is how many times an adapter starts again from Ask when
// Confirm answers ErrReverify, before it returns that error.
const MaxReverify = 3
