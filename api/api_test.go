package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// The wire names are the contract: a renamed field breaks every client.
func TestFieldNames(t *testing.T) {
	rem := int64(5)
	for _, c := range []struct {
		v    any
		want string
	}{
		{api.Lease{Key: "k", Holder: "h", Token: 3, TTLMs: 1000, RemainingMs: 900},
			`{"key":"k","holder":"h","token":3,"ttl_ms":1000,"remaining_ms":900}`},
		{api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 1000, WaitMs: 5, RequestID: "r"},
			`{"key":"k","holder":"h","ttl_ms":1000,"wait_ms":5,"request_id":"r"}`},
		{api.Error{Message: "m", Code: api.CodeHeld, Holder: "o", RemainingMs: &rem},
			`{"error":"m","code":"held","holder":"o","remaining_ms":5}`},
		{api.ExtendBatchRequest{Holder: "h", TTLMs: 100, Leases: []api.BatchItem{{Key: "a", Token: 1}}},
			`{"holder":"h","ttl_ms":100,"leases":[{"key":"a","token":1}]}`},
		{api.JoinResponse{Joined: api.Joined{ID: "n2", Suffrage: "Voter"}},
			`{"leader":"","leader_addr":"","members":null,"node":"","ready":false,"applied_index":0,"applied_time_ms":0,"cluster_id":"","health_from":"","unreachable_after_ms":0,"joined":{"id":"n2","suffrage":"Voter"}}`},
		{api.Lease{Key: "k", Holder: "h", Token: 3, Session: 7, Waiting: 2, NextWaiter: &api.Waiter{Holder: "w", WaitedMs: 1, LeftMs: 2, Mode: api.ModeWrite}},
			`{"key":"k","holder":"h","token":3,"ttl_ms":0,"remaining_ms":0,"session":7,"waiting":2,"next_waiter":{"holder":"w","waited_ms":1,"left_ms":2,"mode":"write"}}`},
		{api.Member{ID: "n2", Suffrage: "Voter", State: api.MemberHealthy, LastContactMs: &rem, LagEntries: new(uint64)},
			`{"id":"n2","raft_addr":"","suffrage":"Voter","leader":false,"state":"healthy","last_contact_ms":5,"lag_entries":0}`},
		{api.MembersResponse{Node: "n3", Removed: true, HealthFrom: "n1", UnreachableAfterMs: 1000},
			`{"leader":"","leader_addr":"","members":null,"node":"n3","ready":false,"applied_index":0,"applied_time_ms":0,"cluster_id":"","health_from":"n1","unreachable_after_ms":1000,"removed":true}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%T:\n got %s\nwant %s", c.v, b, c.want)
		}
	}
}

func TestStatus(t *testing.T) {
	for code, want := range map[string]int{
		api.CodeInvalid: 400, api.CodeHeld: 409, api.CodeNotHeld: 409, api.CodeNotFound: 404,
		api.CodeMethodNotAllowed: 405, api.CodeNotLeader: 503, api.CodeUnavailable: 503,
		api.CodeInternal: 500, api.CodeNoSpace: http.StatusInsufficientStorage,
		api.CodeTooManyOpenFiles: 503, api.CodeTooManyConns: 503, api.CodeNoQuorum: 409,
		api.CodeChangeUnknown: 503, api.CodeTooManyWaiters: 429, api.CodeRemoved: 503, api.CodeQuotaExceeded: 429,
		api.CodeUnauthenticated: 401, api.CodePermissionDenied: 403, "something new": 500,
	} {
		if got := api.Status(code); got != want {
			t.Errorf("Status(%q) = %d, want %d", code, got, want)
		}
	}
}
