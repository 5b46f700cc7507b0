// Package keepalive is the keep-alive a client Lease and a Session share:
// one goroutine that extends on the cadence of BudgetFor(TTL) after the
// send of the last confirmed extension (TTL/3, or sooner when that would
// leave less than a failover's time before the give-up point), tries the
// cluster's addresses in turn when one fails, asking the next beside an
// attempt left unanswered for a while, and declares the lease or session
// lost at the give-up point: TTL less a stop grace and a clock allowance
// after that send (DESIGN.md §4, docs/RELIABILITY.md).
//
// What one extension sends, what a failure means and what a loss is
// called are the owner's (Config): the package knows neither the wire nor
// the client's errors.
package keepalive
