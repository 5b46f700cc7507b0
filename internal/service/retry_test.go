package service

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/replicatest"
)

// Issue 41, item 4: another principal flushed the shared memory of the
// last 10,000 request ids, and a victim's renew, retried after a lost
// answer, was applied twice (the retry got token 18 where the first
// answer had said 17). A leader now marks what it proposes until the log
// keeps the memory by owner (a principal's holders); a new cluster's
// first leader has before it serves (it proposes the cluster's
// identity). The retry after another principal's 20,000 calls keeps its
// answer.
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

// recordingLog is the in-memory log that keeps what was proposed.
type recordingLog struct {
	*replicatest.Log
	mu       sync.Mutex
	proposed []fsm.Command
}

func (l *recordingLog) Propose(data []byte, timeout time.Duration) (*fsm.Result, error) {
	c, err := fsm.Decode(data)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.proposed = append(l.proposed, c)
	l.mu.Unlock()
	return l.Log.Propose(data, timeout)
}

// A node upgraded over a log of an older version: the log keeps the
// shared memory until the first entry this version's leader writes,
// which it marks ByOwner, as it does every entry until one has applied;
// the entries after it are not marked.
func TestAnUpgradedLeaderSwitchesTheMemoryAtItsFirstEntry(t *testing.T) {
	old, err := os.ReadFile("../fsm/testdata/snapshot-issue40.bin")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(testConfig(clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FSM().UnmarshalBinary(old); err != nil {
		t.Fatal(err)
	}
	if s.FSM().RemembersByOwner() {
		t.Fatal("the older version's snapshot restored with the memory by owner")
	}
	log := &recordingLog{Log: replicatest.New("n1", s.FSM())}
	s.Start(log)
	t.Cleanup(s.Close)
	waitReady(t, s)
	if _, err := s.Acquire(context.Background(), "", api.AcquireRequest{Key: "jobs/z", Holder: "zoe", TTLMs: 60000}); err != nil {
		t.Fatal(err)
	}
	if !s.FSM().RemembersByOwner() {
		t.Fatal("the memory is still shared after the new leader's entries")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.proposed) < 2 || !log.proposed[0].ByOwner || log.proposed[len(log.proposed)-1].ByOwner {
		t.Fatalf("marks of the proposals (first and last): %v", log.proposed)
	}
}
