package peerbench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Failover's plumbing on a server the test owns: the kill and revive are
// the test's own functions, the "cluster" lists two dead addresses before
// the live one, and every round must be timed after its kill and revived.
func TestFailoverRounds(t *testing.T) {
	live := startFencelock(t)
	var log []string
	killedAt := map[int]time.Time{}
	round := 0
	f := Failover{
		System:  "fencelock",
		Options: Options{Addr: "127.0.0.1:1,127.0.0.1:2," + live, TTL: 5 * time.Second},
		Kill: func(context.Context) error {
			round++
			killedAt[round] = time.Now()
			log = append(log, "kill")
			return nil
		},
		Revive:  func(context.Context) error { log = append(log, "revive"); return nil },
		Rounds:  3,
		Attempt: 2 * time.Second, Timeout: 10 * time.Second, Every: 10 * time.Millisecond,
		Progress: func(r int, d time.Duration) { log = append(log, "time") },
	}
	res, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, ","); got != "kill,time,revive,kill,time,revive,kill,time,revive" {
		t.Fatalf("order of the rounds: %s", got)
	}
	if len(res.Times) != 3 || res.Summary.N != 3 {
		t.Fatalf("times %v, summary %+v", res.Times, res.Summary)
	}
	for i, d := range res.Times {
		if d <= 0 {
			t.Fatalf("round %d: time %v, want a time after its kill", i+1, d)
		}
	}
	if res.Summary.Max < res.Summary.P50 {
		t.Fatalf("summary %+v", res.Summary)
	}
}

func TestFailoverErrors(t *testing.T) {
	live := startFencelock(t)
	boom := errors.New("boom")
	ok := func(context.Context) error { return nil }
	f := Failover{System: "fencelock", Options: Options{Addr: live}, Kill: func(context.Context) error { return boom }, Revive: ok,
		Rounds: 1, Attempt: time.Second, Timeout: 5 * time.Second}
	if _, err := f.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("a failed kill: %v", err)
	}
	f = Failover{System: "fencelock", Options: Options{Addr: "127.0.0.1:1"}, Kill: ok, Revive: ok,
		Rounds: 1, Attempt: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, Every: 20 * time.Millisecond}
	if _, err := f.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "grants nothing before the kill") {
		t.Fatalf("a cluster that never grants: %v", err)
	}
	if _, err := (Failover{}).Run(context.Background()); err == nil {
		t.Fatal("an empty Failover ran")
	}
}

// The leases held across a kill are checked after it: on a server that
// keeps them none is lost; one whose "kill" lets them lapse loses them all.
func TestFailoverChecksTheHeldLeases(t *testing.T) {
	live := startFencelock(t)
	ok := func(context.Context) error { return nil }
	f := Failover{System: "fencelock", Options: Options{Addr: live}, Kill: ok, Revive: ok,
		Rounds: 2, Attempt: 2 * time.Second, Timeout: 10 * time.Second, Every: 10 * time.Millisecond,
		Hold: 5, HoldTTL: 30 * time.Second}
	res, err := f.Run(context.Background())
	if err != nil || res.Held != 10 || res.Lost != 0 {
		t.Fatalf("held %d lost %d (%v), want 10 held, none lost", res.Held, res.Lost, err)
	}
	// A kill that returns once round 1's held leases have expired.
	lapsed := func(ctx context.Context) error {
		for i := range 3 {
			for {
				resp, err := http.Get(fmt.Sprintf("http://%s/v1/lock?key=lapse/1/%d", live, i))
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusNotFound {
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
		return nil
	}
	f = Failover{System: "fencelock", Options: Options{Addr: live}, Kill: lapsed, Revive: ok,
		Rounds: 1, Attempt: 2 * time.Second, Timeout: 10 * time.Second, Every: 10 * time.Millisecond,
		Hold: 3, HoldTTL: 200 * time.Millisecond, HoldPrefix: "lapse"}
	res, err = f.Run(context.Background())
	if err != nil || res.Held != 3 || res.Lost != 3 {
		t.Fatalf("held %d lost %d (%v), want all 3 lost", res.Held, res.Lost, err)
	}
}
