package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// The client refuses, before sending, a key or holder that the server
// would refuse for a character not shown as itself (issue 41, item 4):
// ErrInvalid naming the field, and no request reaches the server.
func TestClientRefusesKeysWithCharactersNotShownAsThemselves(t *testing.T) {
	ctx := context.Background()
	srv, c := newPair(t, newFakeClock())
	check := func(what, field string, err error) {
		t.Helper()
		var ae *client.APIError
		if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &ae) || ae.Field != field {
			t.Errorf("%s: %v, want ErrInvalid naming %s", what, err, field)
		}
	}
	for _, bad := range []string{"\u0085", "\u2028", "\u200b", "\u202e", "\x07"} {
		_, err := c.Grant(ctx, "jobs/a"+bad, "alice", time.Second, 0)
		check("Grant's key", "key", err)
		_, err = c.Grant(ctx, "jobs/a", "alice"+bad, time.Second, time.Second)
		check("Grant's holder", "holder", err)
		_, err = c.AcquireAll(ctx, []string{"jobs/a", "jobs/b" + bad}, "alice", time.Second, client.GrantOptions{})
		check("AcquireAll's keys", "keys[1]", err)
		_, err = c.OpenSession(ctx, "alice"+bad, time.Minute)
		check("OpenSession's holder", "holder", err)
		_, err = c.TryAcquire(ctx, "jobs/a"+bad, client.WithHolder("alice"))
		check("TryAcquire's key", "key", err)
	}
	for _, route := range []string{api.PathAcquire, api.PathAcquireAll, api.PathSessionOpen} {
		if n := srv.Count(route); n != 0 {
			t.Errorf("%d requests to %s reached the server", n, route)
		}
	}
}
