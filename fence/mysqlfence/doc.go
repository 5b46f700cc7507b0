// Package mysqlfence fences writes to MySQL 8 and MariaDB 10.11 (InnoDB):
// the fencing-token check runs in the same transaction as the caller's
// write, so the write commits only if the token was still current when it
// did, and rolls back with the check otherwise. It is pgfence's contract on
// InnoDB, through database/sql (github.com/go-sql-driver/mysql).
//
// A fence table, one row per protected resource (CreateTable makes it,
// and the table of its resets beside it):
//
//	CREATE TABLE IF NOT EXISTS fence (
//	    resource    VARBINARY(1024) NOT NULL PRIMARY KEY,
//	    token       BIGINT NOT NULL,
//	    write_token BIGINT NULL,            -- the last write's token
//	    lock_key    VARBINARY(1024) NULL,   -- the lock key it is bound to
//	    raised_at   DATETIME(6) NULL        -- when the mark last rose, UTC
//	) ENGINE=InnoDB
//
// Bytes, not text: under a _ci or PAD SPACE collation "acct", "ACCT" and
// "acct " would be one row, so one resource's holder would fence another's.
//
// In the writing transaction, before the caller's write:
//
//	INSERT INTO fence (resource, token, write_token) VALUES (?, 0, 0)
//	    ON DUPLICATE KEY UPDATE token = token;           -- the row's exclusive lock, made if new
//	SELECT token, COALESCE(write_token, token), COALESCE(lock_key, '')
//	    FROM fence WHERE resource = ? FOR UPDATE;        -- the newest committed mark
//	-- token < mark: refused, the caller rolls back; else, if it rises:
//	UPDATE fence SET token = ?, write_token = ?, lock_key = ?, raised_at = ... WHERE resource = ?;
//
// Why this order. The insert comes first because InnoDB's SELECT ... FOR
// UPDATE of a row that does not exist yet takes a gap lock at REPEATABLE
// READ (the default), and gap locks do not exclude each other: two first
// writers of one new resource would both pass it, both insert, and one
// would die in a deadlock (at READ COMMITTED the second fails with a
// duplicate key instead). INSERT ... ON DUPLICATE KEY UPDATE takes the
// row's exclusive lock whether it makes the row or finds it, so the second
// writer waits for the first's commit. The SELECT is a locking read, which
// InnoDB answers from the newest committed version at every isolation
// level (a plain SELECT at REPEATABLE READ would answer from the
// transaction's snapshot, possibly from before the previous holder's
// commit). The comparison is then made in Go, with the row locked until
// the transaction ends: two transactions that pass the fence for one
// resource hold its row one after the other, and the second compares
// against the first's token. A refused token leaves its (rolled back)
// placeholder nowhere; a placeholder that a careless caller commits has
// token 0, which no token is below.
//
// Verification (WithVerification) is package fence's, in its steps
// (fence.Verification): before the transaction, the mark is read with a
// plain autocommit SELECT (a consistent read, which waits for no row
// lock), a stale token is refused, and Verification.Ask asks the lock
// service about a token that needs it, bounded by Verification.Timeout
// (default 2 s; past it a *fence.UnavailableError, 503 fence_unavailable
// behind fence.Middleware); then, holding the fence row, the mark is read
// again, a stale token refused, and Verification.Confirm (which never
// asks) decides on the mark found there. When the mark moved in a way
// the answer does not cover (a reset lowered it below a token nobody asked
// about) Confirm says fence.ErrReverify and Fence.Do starts again from
// the read, at most fence.MaxReverify times. A current holder (its token
// equal to a mark that records a key) is never asked about, so it goes
// on writing while the lock service is unreachable. A resource is bound
// to the key recorded with its mark, else to the one the configuration
// names (Verification.Key); one bound to none is refused
// (fence.ErrUnbound) unless Verification.BindOnFirstUse. Fence.Verify
// and Verified.Check are the two steps for a transaction of the caller's.
//
// Reset mends a mark (lowers it, unless asked to raise it) and records
// the reset in the table <fence table>_resets (ResetsDDL) in the same
// transaction; `fencelock fence reset --sql mysql://DSN` runs it.
//
// A table that carries its own token column needs no fence table: Row.Update
// runs UPDATE t SET <yours>, fence_token = ? WHERE id = ? AND fence_token <= ?.
//
// What InnoDB does differently from PostgreSQL, and the fence's tests show
// (pitfalls_test.go): REPEATABLE READ does not refuse a write to a row that
// changed after the snapshot (an increment read before another holder's
// commit is lost, where PostgreSQL fails with 40001); a read made in the
// transaction before the check is from a snapshot as old as that read; DDL
// in the effect commits the transaction on the spot; a MyISAM table's
// writes are not rolled back. IsRetryable tells a deadlock or lock wait
// timeout, after which the whole transaction may be retried.
//
// Tokens are stored as BIGINT: a token above 2^63-1 is refused with an
// error. Errors match errors.Is(err, fence.ErrStaleToken) (a
// *fence.StaleTokenError naming both tokens) or fence.ErrMissingToken.
package mysqlfence
