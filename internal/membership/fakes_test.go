package membership

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
)

// idPeers answers Identity for the nodes it lists, by client address;
// nobody answers anywhere else.
type idPeers map[string]api.Identity

func (p idPeers) Identity(_ context.Context, addr string) (api.Identity, error) {
	id, ok := p[addr]
	if !ok {
		return id, fmt.Errorf("nobody at %s", addr)
	}
	return id, nil
}

func (p idPeers) Announce(context.Context, string, api.JoinRequest) error { return nil }

func (p idPeers) Members(_ context.Context, addr string) (api.MembersResponse, error) {
	return api.MembersResponse{}, fmt.Errorf("nobody at %s", addr)
}

// configured is the in-memory log with a raft port others can dial and
// the configuration a test sets (the log's own until set).
type configured struct {
	*replicatest.Log
	mu      sync.Mutex
	servers []replica.Server
}

func (c *configured) Dialable() bool { return true }

func (c *configured) Configuration() ([]replica.Server, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.servers == nil {
		return c.Log.Configuration()
	}
	return append([]replica.Server(nil), c.servers...), nil
}

// set makes the configuration the voters ids.
func (c *configured) set(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers = []replica.Server{}
	for _, id := range ids {
		c.servers = append(c.servers, replica.Server{ID: id, Addr: id, Suffrage: "Voter", Voter: true})
	}
}

// wantError fails t unless e has code and message.
func wantError(t *testing.T, what string, e *api.Error, code, msg string) {
	t.Helper()
	switch {
	case e == nil:
		t.Fatalf("%s: no error, want %s %q", what, code, msg)
	case e.Code != code || e.Message != msg:
		t.Fatalf("%s: %s %q\nwant %s %q", what, e.Code, e.Message, code, msg)
	}
}
