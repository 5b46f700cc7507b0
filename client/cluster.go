package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/fencelock/fencelock/api"
)

// ErrChangeUnknown: a Join or Remove may or may not have been applied. An
// attempt was sent and its answer was lost, or a node answered
// change_unknown, and no later answer said which. The error matches how
// the last attempt ended too (ErrUnreachable, ErrNotFound, …); Members
// tells what the configuration is now.
var ErrChangeUnknown = errors.New("fencelock: the change may or may not have been applied")

// Members returns the cluster's configuration as the node that answers sees
// it: the members, the leader, and that node's own progress. Any node
// answers; the client moves to the next address when one cannot be
// reached.
func (c *Client) Members(ctx context.Context) (api.MembersResponse, error) {
	var out api.MembersResponse
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathMembers, out: &out})
	return out, err
}

// Join asks the leader to add the node id, which answers at raftAddr
// (raft) and clientAddr (HTTP). The leader checks that the node answers as
// id at both, runs the same engine and belongs to no other cluster, adds
// it as a non-voter, waits for it to catch up and promotes it: the
// answer's Joined.Suffrage says whether it is a voter now (Message says
// why not). A node that is
// already a voter is confirmed. A refusal is an *APIError whose Code says
// why (api.CodeNodeUnreachable, api.CodeWrongNode, api.CodeNoQuorum, …);
// nothing changed. An error matching ErrChangeUnknown leaves the outcome
// open.
//
// The call follows not_leader to the leader like every other call. A join
// waits for the node to catch up (10s by default on the server) before it
// answers, so give ctx room.
func (c *Client) Join(ctx context.Context, id, raftAddr, clientAddr string) (api.JoinResponse, error) {
	var out api.JoinResponse
	err := c.change(ctx, api.PathJoin, api.JoinRequest{ID: id, RaftAddr: raftAddr, ClientAddr: clientAddr}, &out)
	return out, err
}

// Remove asks the leader to take the node id out of the configuration,
// unless the voters left would have no reachable majority (a refusal with
// api.CodeNoQuorum). Removing the leader makes it hand leadership over
// first; the call then goes to the new leader. An id that is no member is
// ErrNotFound; after an attempt that may have applied the removal, that
// error matches ErrChangeUnknown too, and most likely means the removal
// was applied.
func (c *Client) Remove(ctx context.Context, id string) (api.RemoveResponse, error) {
	var out api.RemoveResponse
	err := c.change(ctx, api.PathRemove, api.RemoveRequest{ID: id}, &out)
	return out, err
}

// change sends a membership change and notes whether any attempt may have
// applied it without our learning so.
func (c *Client) change(ctx context.Context, path string, body, out any) error {
	var maybe atomic.Bool
	err := c.do(ctx, call{method: http.MethodPost, path: path, body: body, out: out, maybeApplied: func() { maybe.Store(true) }})
	if err != nil && maybe.Load() {
		return fmt.Errorf("%w (%w)", ErrChangeUnknown, err)
	}
	return err
}
