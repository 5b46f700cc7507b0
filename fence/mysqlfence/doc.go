// Package mysqlfence fences writes to MySQL 8 and MariaDB 10.11 (InnoDB):
// the fencing-token check runs in the same transaction as the caller's
// write, so the write commits only if the token was still current when it
// did, and rolls back with the check otherwise. It is pgfence's contract on
// InnoDB, through database/sql (github.com/go-sql-driver/mysql).
//
// A fence table, one row per protected resource (CreateTable makes it):
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
// Verification (WithVerification, Verify) asks the lock service before
// the transaction takes the fence row: it reads the mark with a plain
// autocommit SELECT, asks about a token above it (bounded by
// WithVerifyTimeout), and only then begins; under the row lock it checks
// that the mark has not moved in a way the answer does not cover (it
// rose above the token: stale; it was lowered, or bound to a key, in
// between: Fence retries, Verified.Check says ErrMarkMoved). A current
// holder (its token equal to the mark) is not asked about again, so it goes
// on writing while the lock service is unreachable. A resource is bound
// only to the key the configuration names (fence.Verification.Key), not to
// the key its first request names, unless WithBindOnFirstUse says so.
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
