package lab

import (
	"errors"
	"fmt"
	"time"
)

// Blocks is how many numbered blocks the lab has; the assembly follows them.
const Blocks = 6

// ErrNoSuchBlock is returned for a block number outside 1..Blocks.
var ErrNoSuchBlock = errors.New("lab: no such block")

// Block renders block n (1..Blocks) with cfg. Only block 5 reads cfg; the
// others are fixed scenarios.
func Block(n int, cfg Config) (string, error) {
	if err := cfg.Validate(); err != nil {
		return "", err
	}
	switch n {
	case 1:
		return blockNoExpiry(), nil
	case 2:
		return blockLease()
	case 3:
		return blockFencing()
	case 4:
		return blockWhereToCheck()
	case 5:
		return blockSizing(cfg)
	case 6:
		return blockReplication()
	}
	return "", fmt.Errorf("%w: %d (there are %d)", ErrNoSuchBlock, n, Blocks)
}

// ---- block 1 ----------------------------------------------------------

// foreverLock is the lock block 1 is about: an owner and nothing else. It
// is correct, and that is the trouble.
type foreverLock struct{ owner string }

func (l *foreverLock) acquire(who string) bool {
	if l.owner != "" {
		return false
	}
	l.owner = who
	return true
}

// release frees the lock only for its owner; anyone else is ignored.
func (l *foreverLock) release(who string) {
	if l.owner == who {
		l.owner = ""
	}
}

// takeTurns lets n clients use the lock in order; client crash (if >= 0)
// dies while holding it. It returns how many clients finished.
func takeTurns(n, crash int) int {
	var l foreverLock
	finished := 0
	for c := range n {
		who := fmt.Sprintf("client-%d", c)
		if !l.acquire(who) {
			break // held by someone who will never give it back
		}
		if c == crash {
			break
		}
		l.release(who)
		finished++
	}
	return finished
}

const (
	turnClients = 10
	turnCrash   = 3
)

func blockNoExpiry() string {
	var t text
	t.heading("Block 1 · A lock that never expires", "a lock can be perfectly correct and still stop everything")
	t.lines(fmt.Sprintf("%d clients use one lock in turn. In the second run client %d dies", turnClients, turnCrash),
		"while it is the holder.")
	t.printf("  %12s %10s   %s\n", "crashed", "finished", "result")
	for _, crash := range []int{-1, turnCrash} {
		done := takeTurns(turnClients, crash)
		who, result := "nobody", "all finished"
		if crash >= 0 {
			who = fmt.Sprintf("client %d", crash)
		}
		if done < turnClients {
			result = fmt.Sprintf("WEDGED after %d", done)
		}
		t.printf("  %12s %10d   %s\n", who, done, result)
	}
	t.lines("Two clients never held the lock at once; exclusion was never the",
		"problem. The problem is that only the holder can let go, and from the",
		"outside a holder that died looks exactly like one that is still busy.",
		"So the lock waits, and everyone queued behind it waits, for ever: the",
		"whole system is now as reliable as its least reliable client. Guessing",
		"that a silent holder is dead is what a lease does, in block 2.")
	return t.String()
}

// ---- block 2 ----------------------------------------------------------

// The page's scenario lease and pauses, in nanoseconds for the lock table.
var (
	pageTTL    = 10 * time.Second
	pagePauses = []time.Duration{2 * time.Second, 9900 * time.Millisecond, 10100 * time.Millisecond, 30 * time.Second}
	pagePause  = 10100 * time.Millisecond
)

func blockLease() (string, error) {
	var t text
	t.heading("Block 2 · A lease", "expiry ends the deadlock and opens a quieter failure")
	t.lines(fmt.Sprintf("fencelock's lock table, %s lease. A acquires at t=0, is paused (a", secondsLabel(pageTTL)),
		"GC pause, VM steal, swap), then writes 200 the moment it runs again.",
		"If the lease has run out by then, B acquires it and writes 100 first.")
	t.printf("  %10s %12s %8s %9s   %s\n", "A paused", "B acquired", "final", "writers", "verdict")
	for _, p := range pagePauses {
		out, err := episode{ttl: pageTTL, pause: p}.run()
		if err != nil {
			return "", err
		}
		verdict := "safe"
		if out.bGranted() {
			verdict = "SPLIT BRAIN"
		}
		t.printf("  %9.1fs %12s %8d %9s   %s\n", seconds(p), yesNo(out.bGranted()), out.final(), out.writers(), verdict)
	}
	edge, err := episode{ttl: pageTTL, pause: pageTTL}.run()
	if err != nil {
		return "", err
	}
	t.lines("",
		fmt.Sprintf("Paused for exactly %s, B acquired: %s. The table ends a lease at", secondsLabel(pageTTL), yesNo(edge.bGranted())),
		"now >= expiry, so the boundary instant already belongs to B.",
		"",
		"Past the TTL, B holds the lease by every rule and writes 100. A then",
		"resumes with no idea that any time went by and writes 200 on top.",
		"Nothing failed: the table, A and B each did what their contracts say,",
		"no error was raised, and the value left behind is the stale one.",
		"Of everything involved, only the resource could have noticed.")
	return t.String(), nil
}

// ---- block 3 ----------------------------------------------------------

func okOr(err error) string {
	if err != nil {
		return "REJECTED"
	}
	return "ok"
}

func blockFencing() (string, error) {
	var t text
	t.heading("Block 3 · Fencing tokens", "one counter, checked where the write lands, stops the stale writer")
	t.lines(fmt.Sprintf("The same %s pause. Tokens come from the lock table; the fenced", secondsLabel(pagePause)),
		"resource is a fence.Guard, the resource-side check fencelock ships.")
	t.printf("  %-10s %8s %8s %10s %10s %7s\n", "resource", "A token", "B token", "A write", "B write", "final")
	var fenced outcome
	for _, f := range []bool{false, true} {
		out, err := episode{ttl: pageTTL, pause: pagePause, fenced: f}.run()
		if err != nil {
			return "", err
		}
		name := "unfenced"
		if f {
			name, fenced = "fenced", out
		}
		t.printf("  %-10s %8d %8d %10s %10s %7d\n", name, out.tokenA, out.tokenB, okOr(out.errA), okOr(out.errB), out.final())
	}

	// Two more requests to the fenced resource: a repeat under B's token,
	// and a client that sends no token at all.
	again, err := fenced.res.write("B", 150, fenced.tokenB)
	if err != nil {
		return "", err
	}
	none, err := fenced.res.write("C", 999, 0)
	if err != nil {
		return "", err
	}
	t.lines("",
		"Then, on the fenced resource:",
		fmt.Sprintf("  B writes again with token %d     %s", fenced.tokenB, acceptedOr(again)),
		fmt.Sprintf("  a client sends no token at all  %s", acceptedOr(none)),
		"",
		"The lock table hands each grant a number that only ever grows, and the",
		"client carries it to the resource. The resource remembers the highest",
		"number it has honoured and turns away anything lower, so A is refused",
		"for being superseded, not for being slow, and the resource decides that",
		"alone, without asking the lock service anything. Equal tokens pass, so",
		"one grant may write many times; a missing token is refused, so a client",
		"nobody migrated to fencing fails loudly instead of slipping through.")
	return t.String(), nil
}

func acceptedOr(err error) string {
	if err != nil {
		return "refused: " + err.Error()
	}
	return "accepted"
}

// ---- block 4 ----------------------------------------------------------

func blockWhereToCheck() (string, error) {
	var t text
	t.heading("Block 4 · Where the check belongs", "a token check outside the resource is a race, not a fence")
	t.lines("A now asks the lock table whether its token is still the current one",
		fmt.Sprintf("before it writes. Same %s pause; what moves is where it lands.", secondsLabel(pagePause)))
	t.printf("  %-36s %8s %6s   %s\n", "where A's token is checked", "writers", "final", "verdict")
	for _, row := range []struct {
		name string
		e    episode
	}{
		{"by A, after the pause", episode{check: checkAfterPause}},
		{"by A, before the pause", episode{check: checkBeforePause}},
		{"by the resource (fence.Guard)", episode{fenced: true}},
	} {
		row.e.ttl, row.e.pause = pageTTL, pagePause
		out, err := row.e.run()
		if err != nil {
			return "", err
		}
		verdict := "safe"
		if out.staleWon() {
			verdict = "STILL WRONG"
		}
		t.printf("  %-36s %8s %6d   %s\n", row.name, out.writers(), out.final(), verdict)
	}
	t.lines("",
		"The first row looks like a cure, and it is one only because nothing",
		"happened between A's check and A's write. The second row is the same",
		"code with the pause landing one step later, after the check passed:",
		"A acted on an answer that went stale between reading it and using",
		"it. That is a time-of-check/time-of-use race, and no client-side",
		"check can close it, because the client cannot stop itself from being",
		"paused. The check has to happen in the same atomic step as the write,",
		"which only the resource can do: the third row. The assembly measures",
		"how much the client-side check leaks as its check→write gap grows.")
	return t.String(), nil
}

// ---- block 5 ----------------------------------------------------------

func blockSizing(cfg Config) (string, error) {
	rows, err := Sizing(cfg)
	if err != nil {
		return "", err
	}
	var t text
	t.heading("Block 5 · Sizing the lease", "both directions cost something, in different currencies")
	t.lines(fmt.Sprintf("%s simulated lease holders (seed %d). Work ~ Exp(mean %gs). Most",
		thousands(cfg.Ops), cfg.SizingSeed, sizingModel.workMean),
		fmt.Sprintf("holders then stall ~ Exp(mean %gs); %g%% stall ~ Exp(mean %gs) instead,",
			sizingModel.shortMean, sizingModel.longShare*100, sizingModel.longMean),
		fmt.Sprintf("a GC pause or VM steal. %g%% crash, and everyone waits out their lease.", crashShare*100))
	t.printf("  %9s %13s %15s   %s\n", "lease", "zombie rate", "wedge per op", "dominant cost")
	for _, r := range rows {
		t.printf("  %9s %12.2f%% %12.1f ms   %s\n", secondsLabel(r.TTL), r.ZombieRate*100, r.WedgePerOp*1000, sizingVerdict(r))
	}
	t.lines("",
		"A zombie is a holder still working after its lease ran out: the writer",
		"of block 2. A short lease passes a crashed holder's lock on quickly but",
		"breeds zombies; a long one starves them and lets every crash hold its",
		"lock hostage for a whole TTL. The two columns move in opposite",
		"directions, so no lease length makes both small. With a fence in front",
		"of the resource (block 3) a zombie can no longer do damage, only waste",
		"work, and the TTL can then be chosen for failover speed alone.")
	return t.String(), nil
}

// ---- block 6 ----------------------------------------------------------

func blockReplication() (string, error) {
	var t text
	t.heading("Block 6 · One server or a replicated service", "consensus protects the lock service, not the resource")
	t.printf("  %-20s %-11s %-17s %s\n", "design", "tolerates", "mutual exclusion", "fencing needed")
	for _, r := range [][4]string{
		{"single server", "0 faults", "yes", "yes"},
		{"Raft / ZooKeeper", "f of 2f+1", "yes", "yes"},
		{"Redlock (N Redis)", "f of 2f+1", "clock-dependent", "yes"},
	} {
		t.printf("  %-20s %-11s %-17s %s\n", r[0], r[1], r[2], r[3])
	}
	steps, err := quorumStory()
	if err != nil {
		return "", err
	}
	t.lines("", "A 5-node majority in front of fencelock's lock table:")
	for _, s := range steps {
		t.lines("  " + s)
	}
	t.lines("",
		"Replication keeps the service granting leases while a minority of",
		"nodes is down, and gives it a durable, never-reset counter to draw",
		"tokens from (a Raft log index, a ZooKeeper zxid). It cannot reach into",
		"a paused client, and the dangerous interval, from grant to write, is",
		"spent entirely in the client. So every row still needs the fence.",
		"Redlock has a weakness of its own: it is only safe if clocks drift",
		"little and pauses stay short, and a virtualised host promises neither.",
		"If the resource fences anyway, Redlock was not what kept it safe.")
	return t.String(), nil
}
