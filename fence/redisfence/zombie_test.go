package redisfence_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/redisfence"
	"github.com/fencelock/fencelock/internal/redistest"
)

// The zombie against a real redis-server, under faults. Each round,
// holder A has token 2r+1 and stalls (its lease runs out); B gets 2r+2,
// sets the value and adds 1 to a counter; A wakes and does the same with
// its old token, which must be refused. The rounds cycle through what
// fails:
//
//   - plain;
//   - server kill after B: B's write is acknowledged, redis-server is
//     killed (SIGKILL) and restarted, and A finds B's mark (the
//     append-only file, fsynced before the reply);
//   - server kill before B: B's first try fails on the dead server, and
//     goes through after the restart;
//   - A in flight: A, still current, sends its write to a frozen server
//     (SIGSTOP), which is then killed: A's write is lost, and its retry
//     after B's is refused.
//
// After each round the mark is B's token, the value B's and the counter
// the number of B's writes: none of A's ever lands.
func TestZombieUnderKills(t *testing.T) {
	c, f, r := newFence(t)
	v, n := "{"+r+"}:v", "{"+r+"}:n"
	faults := []string{"plain", "server kill after B", "server kill before B", "A in flight"}
	var landed, refused, kills int
	for round := range 3 * len(faults) {
		fault := faults[round%len(faults)]
		tokA, tokB := uint64(2*round+1), uint64(2*round+2)
		write := func(who string, tok uint64) error {
			_, err := f.Write(ctx, r, tok, redisfence.Set(v, fmt.Sprintf("%s %d", who, tok)), redisfence.IncrBy(n, 1))
			return err
		}
		switch fault {
		case "server kill before B":
			redistest.Kill(t)
			if err := write("B", tokB); err == nil {
				t.Fatalf("round %d: a write to a dead server succeeded", round)
			}
			redistest.Restart(t)
			kills++
		case "A in flight":
			redistest.Stop(t)
			doneA := make(chan error, 1)
			go func() { doneA <- write("A", tokA) }()
			redistest.Kill(t) // A's command is in the frozen server's socket, unread
			if err := <-doneA; err == nil {
				t.Fatalf("round %d: A's write to a killed server succeeded", round)
			}
			redistest.Restart(t)
			kills++
		}
		if err := write("B", tokB); err != nil {
			t.Fatalf("round %d (%s): B: %v", round, fault, err)
		}
		landed++
		if fault == "server kill after B" {
			redistest.Kill(t)
			redistest.Restart(t)
			kills++
		}
		err := write("A", tokA)
		var se *fence.StaleTokenError
		if !errors.As(err, &se) || se.Token != tokA || se.Highest != tokB {
			t.Fatalf("round %d (%s): the zombie's write: %v, want stale %d < %d", round, fault, err, tokA, tokB)
		}
		refused++
		m := markOf(t, f, r)
		if m.Token != tokB || get(t, c, v) != fmt.Sprintf("B %d", tokB) || get(t, c, n) != strconv.Itoa(landed) {
			t.Fatalf("round %d (%s): mark %+v value %q counter %q, want B's %d and %d", round, fault, m, get(t, c, v), get(t, c, n), tokB, landed)
		}
	}
	t.Logf("%d rounds: %d newer writes landed, %d zombie writes refused, %d server kills", 3*len(faults), landed, refused, kills)
}
