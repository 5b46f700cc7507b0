package client

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"
)

// DefaultTTL is the lease TTL when WithTTL is not given. The handle extends
// about every DefaultTTL/3 and gives the lease up as lost 0.89×DefaultTTL
// (8.9 s) after the last confirmed extension was sent.
const DefaultTTL = 10 * time.Second

// maxWaitRound is the longest wait one acquire request asks the server for
// (its limit is an hour); a longer wait is several rounds.
const maxWaitRound = time.Hour

type leaseOptions struct {
	key       string
	ttl       time.Duration
	holder    string
	generated bool          // holder is DefaultHolder's, unique to this lease
	wait      time.Duration // < 0: until ctx ends
	// grant: a lock-delay, a semaphore permit or a read/write mode
	// (WithLockDelay, WithPermits, WithRead, WithWrite).
	grant GrantOptions
}

// LeaseOption configures Acquire and TryAcquire.
type LeaseOption func(*leaseOptions)

// WithTTL sets the lease TTL (default DefaultTTL). The server accepts 100ms
// to 24h.
func WithTTL(ttl time.Duration) LeaseOption { return func(o *leaseOptions) { o.ttl = ttl } }

// WithHolder names the holder (default DefaultHolder(), new for each lease).
// Two leases with the same holder on the same key are the same lease to the
// server: acquiring again renews it under a new token.
func WithHolder(holder string) LeaseOption { return func(o *leaseOptions) { o.holder = holder } }

// WithWait bounds how long Acquire waits in the key's queue before giving up
// with ErrHeld (default: until ctx ends). TryAcquire ignores it.
func WithWait(d time.Duration) LeaseOption { return func(o *leaseOptions) { o.wait = d } }

// WithLockDelay asks that, should the lease expire (not be released), the
// key be granted to nobody for d afterwards (at most api.MaxLockDelay): a
// mitigation for resources that cannot check a fencing token, never a
// substitute for the check (docs/PRIMITIVES.md, "Lock-delay").
func WithLockDelay(d time.Duration) LeaseOption {
	return func(o *leaseOptions) { o.grant.LockDelay = d }
}

func newLeaseOptions(opts []LeaseOption) leaseOptions {
	o := leaseOptions{ttl: DefaultTTL, wait: -1}
	for _, f := range opts {
		f(&o)
	}
	if o.holder == "" {
		o.holder, o.generated = DefaultHolder(), true
	}
	return o
}

// DefaultHolder returns hostname-pid-random: unique to this process and,
// through the random part, to each call, so two leases never renew each
// other by accident.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
