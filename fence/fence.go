package fence

import "context"

// Fence is the resource-side check, whatever keeps the high-water marks: a
// Guard in memory, a file (fence/filefence), a database (fence/sqlitefence,
// fence/pgfence). Middleware and the fencing proxy take any Fence.
//
// Admit admits token for resource atomically with effect. Every
// implementation follows the same rule, the one Guard has always had:
//
//   - token 0 means "no token" (fencelock never issues 0): Admit returns
//     ErrMissingToken, effect does not run, the mark is unchanged;
//   - token < the highest honoured for resource: Admit returns a
//     *StaleTokenError (errors.Is(err, ErrStaleToken)) naming Token and
//     Highest, effect does not run, the mark is unchanged;
//   - token >= the highest honoured (or resource is new): the token is
//     admitted. The mark becomes token, then effect runs. The mark stays
//     raised even if effect fails: once a newer holder has shown up, older
//     ones are stale whether or not its write worked. Admit returns
//     effect's error unchanged (nil effect: admit only).
//
// No other Admit on the same resource runs between the check and the end of
// effect. A durable implementation has recorded the raised mark (fsync,
// commit) before Admit returns nil; if it cannot record the mark, effect
// does not run, or is rolled back with it, and Admit returns that error.
// A transactional implementation runs effect inside the transaction that
// checks and raises the mark, hands that transaction to effect through ctx
// (each documents its accessor) and, when effect fails, rolls back effect's
// writes but commits the raised mark. If ctx is done before the token is
// admitted, Admit returns ctx.Err() and effect does not run.
type Fence interface {
	Admit(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error
}
