package service

import (
	"context"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// Issue 41, item 4: another principal flushed the shared memory of the
// last 10,000 request ids, and a victim's renew, retried after a lost
// answer, was applied twice (the retry got token 18 where the first
// answer had said 17). A leader now switches the log to a memory kept by
// owner (a principal's holders) before it serves: the retry after
// another principal's 20,000 calls keeps its answer.
func TestRetriedRenewKeepsItsAnswerAfterAnotherPrincipalsCalls(t *testing.T) {
	s, _, _ := newTestService(t)
	ctx := context.Background()
	if !s.FSM().RemembersByOwner() {
		t.Fatal("the leader is ready with the request-id memory still shared")
	}
	if _, err := s.Acquire(ctx, "alice", api.AcquireRequest{Key: "jobs/x", Holder: "alice/app", TTLMs: 600000}); err != nil {
		t.Fatal(err)
	}
	renew := api.RenewRequest{Key: "jobs/x", Holder: "alice/app", TTLMs: 600000, RequestID: "renew-1"}
	first, err := s.Renew(ctx, renew)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Acquire(ctx, "mallory", api.AcquireRequest{Key: "m/1", Holder: "mallory", TTLMs: 600000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		if _, err := s.Extend(ctx, api.ExtendRequest{Key: "m/1", Holder: "mallory", Token: m.Token, TTLMs: 600000, RequestID: "m-" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	last := s.FSM().LastToken()
	again, err := s.Renew(ctx, renew)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token != first.Token || s.FSM().LastToken() != last {
		t.Fatalf("the retried renew got token %d (last token %d -> %d); its first answer was %d", again.Token, last, s.FSM().LastToken(), first.Token)
	}
}
