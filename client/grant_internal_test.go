package client

import (
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
)

// Every single-key grant goes on the wire through grantCall.request: the
// lease options a Lease's acquire passes, a session's TTL rule, and the
// refusal of a negative wait.
func TestGrantCallRequest(t *testing.T) {
	lease := newLeaseOptions([]LeaseOption{WithTTL(5 * time.Second), WithHolder("h"), WithLockDelay(time.Second), WithRead(), WithPermits(3)})
	for _, tc := range []struct {
		name string
		g    grantCall
		want api.AcquireRequest
	}{
		{"plain", grantCall{key: "k", holder: "h", ttl: 10 * time.Second, id: "r1"},
			api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 10000, RequestID: "r1"}},
		{"waiting", grantCall{key: "k", holder: "h", ttl: time.Second, wait: 300 * time.Millisecond, id: "r2"},
			api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 1000, WaitMs: 300, RequestID: "r2"}},
		{"under a session the ttl is the session's", grantCall{key: "k", holder: "h", ttl: time.Second, id: "r3",
			opts: GrantOptions{Session: 7, LockDelay: 2 * time.Second}},
			api.AcquireRequest{Key: "k", Holder: "h", Session: 7, LockDelayMs: 2000, RequestID: "r3"}},
		{"lease options, the last kind given wins", grantCall{key: "k", holder: lease.holder, ttl: lease.ttl, id: "r4", opts: lease.grant},
			api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 5000, LockDelayMs: 1000, Permits: 3, RequestID: "r4"}},
	} {
		got, err := tc.g.request()
		if err != nil || got != tc.want {
			t.Errorf("%s: request() = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	_, err := grantCall{key: "k", holder: "h", ttl: time.Second, wait: -1}.request()
	var ae *APIError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ae) || ae.Field != "wait_ms" {
		t.Fatalf("negative wait: %v, want ErrInvalid on wait_ms", err)
	}
}
