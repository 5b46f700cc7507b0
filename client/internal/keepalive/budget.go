package keepalive

import "time"

// The keep-alive's timing: when to extend and when to give up, as offsets
// from the send time of the last confirmed extension, measured on the
// client's monotonic clock (docs/RELIABILITY.md, "The safe-stop rule").
//
// The server cannot grant the key to anyone else before TTL after that
// send by its own clock. Everything under the lease must therefore have
// stopped by TTL less clockAllowance, which covers a server clock that runs
// faster than the client's and the time a SIGKILL takes to land; the
// lease is declared lost StopGrace before that, so that a command can be
// sent SIGTERM and then SIGKILL within the bound. Between the due time of
// an extension and that give-up point there must be room for a leader to
// die and another to be elected (FailoverAllowance), so the extension is
// sent earlier than TTL/3 when TTL/3 would leave less.

// FailoverAllowance is the time the keep-alive keeps free, between an
// extension falling due and the lease being given up, for a failover: a
// new leader elected (0.3–0.85 s with the server's default raft timing
// on a busy 2-core machine, docs/RELIABILITY.md "On a busy machine") and
// found by the retries. Extensions are sent
// earlier than TTL/3 to keep it free, never more often than every TTL/8:
// for a TTL under about 2 s it no longer fits, and a leader lost just
// before an extension is due can cost the lease (a safe stop).
const FailoverAllowance = 1500 * time.Millisecond

// clockAllowance is the part of the TTL kept as a bound on clock-rate
// error between client and server (and on the moment a kill takes to
// land): everything under a lease must have stopped TTL×(1−1/100) after the
// send of the last confirmed extension (Lease.StopBy). Clocks disciplined
// by NTP differ in rate by at most 500 ppm each; 1% is twenty times that.
func clockAllowance(ttl time.Duration) time.Duration { return ttl / 100 }

// StopGrace is how long before StopBy the lease is declared lost: the time
// `fencelock lock` gives its command between SIGTERM and SIGKILL, and the
// time a holder has to stop its work once Done is closed. It is TTL/10.
func StopGrace(ttl time.Duration) time.Duration { return ttl / 10 }

// Budget is one TTL's timing, each an offset from the send of the last
// confirmed extension.
type Budget struct {
	Every  time.Duration // extend this long after (less up to 10% jitter)
	GiveUp time.Duration // declare the lease lost at this offset (Deadline)
	StopBy time.Duration // everything under the lease stopped by then (StopBy)
}

// BudgetFor is the timing of a lease of ttl.
func BudgetFor(ttl time.Duration) Budget {
	stopBy := ttl - clockAllowance(ttl)
	giveUp := stopBy - StopGrace(ttl)
	every := min(max(giveUp-FailoverAllowance, ttl/8), ttl/3)
	return Budget{Every: every, GiveUp: giveUp, StopBy: stopBy}
}
