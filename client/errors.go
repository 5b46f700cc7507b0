package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/api"
)

// Sentinel errors. Every error the client returns matches at most one of the
// wire sentinels (ErrHeld … ErrInternal) with errors.Is; the server's error
// codes (docs/API.md) map onto them one to one, so a check written against a
// sentinel works the same whether the refusal happened here or on the server.
var (
	// ErrHeld: acquire was refused (or its wait elapsed) because a different
	// holder has a live lease. Wire code "held".
	ErrHeld = errors.New("fencelock: held by another holder")
	// ErrNotHeld: extend, renew or release named a (holder, token) that is
	// not the key's live grant. Wire code "not_held".
	ErrNotHeld = errors.New("fencelock: not the live holder")
	// ErrNotFound: no lease for the key. Wire code "not_found".
	ErrNotFound = errors.New("fencelock: not found")
	// ErrInvalid: the server (or the client, before sending) refused an
	// argument. Wire code "invalid_argument"; APIError.Field names it.
	ErrInvalid = errors.New("fencelock: invalid argument")
	// ErrUnavailable: the server answered but cannot serve: shutting down,
	// no quorum, or no leader could be found. Wire code "unavailable".
	ErrUnavailable = errors.New("fencelock: server unavailable")
	// ErrUnreachable: no server could be reached at all (refused, reset,
	// timed out before answering).
	ErrUnreachable = errors.New("fencelock: server unreachable")
	// ErrInternal: the server reported a bug. Wire code "internal".
	ErrInternal = errors.New("fencelock: server internal error")
	// ErrNoSpace: the server could not write its log for lack of disk
	// space. Wire code "no_space" (HTTP 507). Not a bug of the server, and
	// nothing was written: the same call may succeed on another node once
	// a leader with room is elected, or here once the operator frees space.
	ErrNoSpace = errors.New("fencelock: server's disk is full")
	// ErrUnauthenticated: the cluster's ACLs are on and the call carried
	// no known credential (WithAuthToken). Wire code "unauthenticated".
	ErrUnauthenticated = errors.New("fencelock: unauthenticated")
	// ErrPermissionDenied: the caller's policies do not allow the call, or
	// the holder is not the caller's. Wire code "permission_denied".
	ErrPermissionDenied = errors.New("fencelock: permission denied")
	// ErrKindMismatch: the key exists as another kind (exclusive,
	// semaphore, read/write lock) or as a semaphore of another number of
	// permits; APIError.Kind and Permits say which. Wire code
	// "kind_mismatch".
	ErrKindMismatch = errors.New("fencelock: key is of another kind")
	// ErrQuotaExceeded: the caller's principal is at one of its quotas
	// (APIError.Quota names it: sessions, locks, waiters); nothing
	// changed. Every node would answer the same: back off. Wire code
	// "quota_exceeded".
	ErrQuotaExceeded = errors.New("fencelock: quota exceeded")
)

// Reasons a Lease ends. Lease.Err and context.Cause(Lease.Context()) return
// ErrReleased after Release, or a *LostError, which matches ErrLeaseLost and
// its reason (ErrExpired, ErrUnreachable, ErrNotHeld, …).
var (
	// ErrReleased: the lease was given up by Release.
	ErrReleased = errors.New("fencelock: lease released")
	// ErrLeaseLost: the client can no longer prove it holds the lease.
	ErrLeaseLost = errors.New("fencelock: lease lost")
	// ErrExpired: no extension was confirmed by the lease's Deadline,
	// 0.89×TTL after sending the last confirmed one (for example because
	// this process was paused).
	ErrExpired = errors.New("fencelock: lease expired")
)

// APIError is an error answer from the server. It matches the sentinel of
// its code with errors.Is.
type APIError struct {
	Status  int    // HTTP status
	Code    string // wire code, one of the api.Code* constants
	Message string // the server's message
	Field   string // for invalid_argument: the offending field
	// For "held": the holder in the way and what is left of its lease.
	Holder    string
	Remaining time.Duration
	// For "not_leader": the leader's client address, when known.
	Leader string
	// For "kind_mismatch": what the key is (api.Kind*) and a semaphore's
	// permits.
	Kind    string
	Permits int
	// For "compacted": the oldest revision a watch may start after.
	CompactRevision *Revision
	// For "quota_exceeded" (and a caller's "too_many_watchers"): the
	// quota (api.Quota*).
	Quota string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", e.Status)
	}
	if e.Code == api.CodeHeld && e.Holder != "" {
		return fmt.Sprintf("fencelock: %s (holder %q, %v left)", msg, e.Holder, e.Remaining)
	}
	return "fencelock: " + msg
}

// Unwrap maps the wire code (or, when the answer had none, the HTTP status)
// to a sentinel.
func (e *APIError) Unwrap() error {
	if err := sessionSentinel(e.Code); err != nil {
		return err
	}
	switch e.Code {
	case api.CodeHeld:
		return ErrHeld
	case api.CodeNotHeld:
		return ErrNotHeld
	case api.CodeNotFound:
		return ErrNotFound
	case api.CodeInvalid:
		return ErrInvalid
	case api.CodeUnavailable, api.CodeNotLeader:
		return ErrUnavailable
	case api.CodeInternal:
		return ErrInternal
	case api.CodeNoSpace:
		return ErrNoSpace
	case api.CodeUnauthenticated:
		return ErrUnauthenticated
	case api.CodePermissionDenied:
		return ErrPermissionDenied
	case api.CodeKindMismatch:
		return ErrKindMismatch
	case api.CodeCompacted:
		return ErrCompacted
	case api.CodeQuotaExceeded:
		return ErrQuotaExceeded
	}
	switch {
	case e.Status == 400:
		return ErrInvalid
	case e.Status == 404:
		return ErrNotFound
	case e.Status == 503 || e.Status == 502 || e.Status == 504:
		return ErrUnavailable
	case e.Status >= 500:
		return ErrInternal
	}
	return nil
}

// LostError says why a Lease was lost. It matches ErrLeaseLost and Reason.
type LostError struct {
	Key    string
	Token  uint64
	Reason error // ErrExpired, or the error of the last failed extension
}

func (e *LostError) Error() string {
	return fmt.Sprintf("fencelock: lease on %q (token %d) lost: %v", e.Key, e.Token, e.Reason)
}

func (e *LostError) Unwrap() []error { return []error{ErrLeaseLost, e.Reason} }

// firstText refuses, before anything is sent, the first of the (field,
// value) pairs whose value a key, holder or prefix may not hold: a
// control character, a line or paragraph separator, a zero-width or
// bidirectional formatting character (api.BadText), as the server would.
func firstText(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := api.CheckText(pairs[i], pairs[i+1]); err != nil {
			return invalidf(pairs[i], "%v", err)
		}
	}
	return nil
}

// invalidf is a refusal made before anything is sent.
func invalidf(field, format string, args ...any) error {
	return &APIError{Code: api.CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// TLSMismatchError is a server that speaks TLS met at an http:// address,
// or one that does not met at an https:// address: the handshake showed
// it. It matches ErrUnreachable; retrying cannot help.
type TLSMismatchError struct {
	Addr      string // the base URL tried
	Host      string // its host:port
	ServerTLS bool   // the server speaks TLS (and Addr is http://)
}

func (e *TLSMismatchError) Error() string {
	if e.ServerTLS {
		return fmt.Sprintf("%v: %s speaks TLS: use https://%s", ErrUnreachable, e.Addr, e.Host)
	}
	return fmt.Sprintf("%v: %s does not speak TLS: use http://%s", ErrUnreachable, e.Addr, e.Host)
}

func (e *TLSMismatchError) Unwrap() error { return ErrUnreachable }

// NoServerError is a call that found no server to ask: every address
// refused the connection (nothing listens there: the server is down, or
// the address is wrong) or names no host, and this Client had never had
// an answer from any node. Such a call is not retried: retries are for a
// node that timed out, a cluster in an election, a node that names the
// leader, and for a refusal once a node has answered (a restart, a
// failover in progress). It matches ErrUnreachable and each address's
// error (syscall.ECONNREFUSED, a *net.DNSError).
type NoServerError struct {
	Errs []error // one per address, in the order tried; each matches ErrUnreachable
}

func (e *NoServerError) Error() string {
	if len(e.Errs) == 0 {
		return ErrUnreachable.Error()
	}
	var b strings.Builder
	b.WriteString(e.Errs[0].Error())
	for _, err := range e.Errs[1:] {
		var ue *unreachedError
		if errors.As(err, &ue) {
			fmt.Fprintf(&b, "; %s: %v", ue.addr, ue.err)
		} else {
			fmt.Fprintf(&b, "; %v", err)
		}
	}
	return b.String()
}

func (e *NoServerError) Unwrap() []error { return append([]error{ErrUnreachable}, e.Errs...) }

// TLSError is a TLS handshake with the node at Addr that failed over
// certificates: this client did not trust the server's (signed by an
// unknown authority, issued for another name, expired), or the server
// refused this client's (none given where one is required, or one it
// does not trust: ClientCert). No retry can mend it, so the call fails at
// once. It matches ErrUnreachable and Err (errors.As finds an
// *x509.UnknownAuthorityError, an x509.HostnameError, …).
type TLSError struct {
	Addr string // the base URL tried
	Err  error  // the handshake's error
	// ClientCert: the server refused the handshake over this client's
	// certificate (Err is the alert it sent: "certificate required",
	// "bad certificate", "unknown certificate authority", …).
	ClientCert bool
	// HadCert: this client has a certificate of its own to offer. When
	// the server still says "certificate required", it asked for one
	// signed by a CA that this one's is not.
	HadCert bool
}

func (e *TLSError) Error() string {
	return fmt.Sprintf("fencelock: TLS handshake with %s failed: %s", e.Addr, strings.TrimPrefix(e.Err.Error(), "TLS: "))
}

func (e *TLSError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// unreachedError is one attempt that got no answer from the node at addr:
// it matches ErrUnreachable and what the attempt got (a refused
// connection, a reset, a timeout).
type unreachedError struct {
	addr string
	err  error
}

func (e *unreachedError) Error() string {
	return fmt.Sprintf("%v: %s: %v", ErrUnreachable, e.addr, e.err)
}

func (e *unreachedError) Unwrap() []error { return []error{ErrUnreachable, e.err} }

// tlsProblem is the *TLSError of an attempt at addr that failed with err
// over certificates, or nil.
func tlsProblem(addr string, err error) *TLSError {
	var ve *tls.CertificateVerificationError
	if errors.As(err, &ve) {
		return &TLSError{Addr: addr, Err: err}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil {
		switch strings.TrimPrefix(op.Err.Error(), "tls: ") {
		case "certificate required", "bad certificate", "unsupported certificate", "revoked certificate",
			"expired certificate", "unknown certificate", "unknown certificate authority", "access denied":
			return &TLSError{Addr: addr, Err: err, ClientCert: true}
		}
	}
	return nil
}

// noServerThere reports whether err says that nothing can be at its
// address: the connection was refused, or the name resolves to no host.
func noServerThere(err error) bool {
	var de *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &de) && de.IsNotFound
}

// final reports whether err is a call's failure that no retry can mend:
// no server anywhere, or TLS set up wrong.
func final(err error) bool {
	var ns *NoServerError
	var te *TLSError
	var tm *TLSMismatchError
	return errors.As(err, &ns) || errors.As(err, &te) || errors.As(err, &tm)
}
