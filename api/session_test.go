package api_test

import (
	"encoding/json"
	"testing"

	"github.com/fencelock/fencelock/api"
)

func TestSessionWire(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{api.SessionOpenRequest{Holder: "h", TTLMs: 1000}, `{"holder":"h","ttl_ms":1000}`},
		{api.SessionRequest{ID: 7, Holder: "h"}, `{"id":7,"holder":"h"}`},
		{api.Session{ID: 7, Holder: "h", TTLMs: 1000, RemainingMs: 900, Locks: 3, Waiting: 1},
			`{"id":7,"holder":"h","ttl_ms":1000,"remaining_ms":900,"locks":3,"waiting":1}`},
		{api.AcquireAllRequest{Keys: []string{"a", "b"}, Holder: "h", Session: 7, LockDelayMs: 5},
			`{"keys":["a","b"],"holder":"h","session":7,"lock_delay_ms":5}`},
		{api.AcquireRequest{Key: "k", Holder: "h", Session: 7, LockDelayMs: 5},
			`{"key":"k","holder":"h","ttl_ms":0,"session":7,"lock_delay_ms":5}`},
		{api.Lease{Key: "k", Holder: "h", Token: 3, TTLMs: 1000, RemainingMs: 900, Session: 7},
			`{"key":"k","holder":"h","token":3,"ttl_ms":1000,"remaining_ms":900,"session":7}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%T:\n got %s\nwant %s", c.v, b, c.want)
		}
	}
	for code, want := range map[string]int{api.CodeNoSession: 404, api.CodeTooManySessions: 429, api.CodeLockDelay: 409} {
		if got := api.Status(code); got != want {
			t.Errorf("Status(%q) = %d, want %d", code, got, want)
		}
	}
}
