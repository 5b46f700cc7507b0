// Package sqlitefence is a fence.Fence kept in a SQLite database, checked
// in the same transaction as the caller's own writes: the token is admitted
// and the data written together, or neither.
//
// The marks live in a table (CreateTable makes it; DDL is the statement):
//
//	CREATE TABLE IF NOT EXISTS fencelock_fence (
//	    resource TEXT PRIMARY KEY,
//	    token    INTEGER NOT NULL CHECK (token > 0)
//	)
//
// Admit takes one connection from the pool and runs, on it:
//
//	BEGIN IMMEDIATE;  -- the write lock now, not at the first write
//	INSERT INTO fencelock_fence (resource, token) VALUES (?1, ?2)
//	    ON CONFLICT (resource) DO UPDATE SET token = excluded.token
//	    WHERE excluded.token >= fencelock_fence.token
//	    RETURNING token;  -- no row: a higher token is stored, so ?2 is stale
//	SAVEPOINT fencelock_effect;
//	-- the caller's effect, on the same connection
//	RELEASE fencelock_effect;  -- or ROLLBACK TO it if the effect failed
//	COMMIT;
//
// A stale token rolls the whole transaction back before the effect runs. A
// failed effect has its writes rolled back to the savepoint and the raised
// mark committed, which is fence.Fence's rule (a newer holder that showed
// up makes older ones stale even if its write failed). BEGIN IMMEDIATE
// takes SQLite's write lock at once, so two admits never both read the
// same mark and then race to upgrade; concurrent admits queue on the
// database's busy timeout (Open sets one; set _pragma=busy_timeout(ms) in
// your own DSN).
//
// The effect reaches the transaction through its ctx (TxFrom) when called
// through Admit, e.g. behind fence.Middleware, or as an argument through
// AdmitTx. It must write through that Tx only: a write through another
// connection of the pool is outside the transaction, unfenced, and would
// wait for the lock this one holds.
//
// SQLite's INTEGER is a signed 64-bit number; a token above 2^63-1 is
// refused with an error (fencelock issues tokens from 1 upwards).
package sqlitefence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/fencelock/fencelock/fence"

	_ "modernc.org/sqlite" // the pure-Go driver, registered as "sqlite"
)

// DefaultTable is the fence table's name unless New is given another.
const DefaultTable = "fencelock_fence"

// DDL is the statement CreateTable runs, with %s for the table's name.
const DDL = `CREATE TABLE IF NOT EXISTS %s (
    resource TEXT PRIMARY KEY,
    token    INTEGER NOT NULL CHECK (token > 0)
)`

// Tx is the transaction an effect writes through (a *sql.Conn inside
// BEGIN IMMEDIATE ... COMMIT).
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type txKey struct{}

// TxFrom is the transaction of the Admit whose effect received ctx.
func TxFrom(ctx context.Context) (Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(Tx)
	return tx, ok
}

// Fence is a fence.Fence on a SQLite database. Use New.
type Fence struct {
	db    *sql.DB
	table string
}

var _ fence.Fence = (*Fence)(nil)

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// New fences with the table named table in db ("" for DefaultTable). The
// table must exist (CreateTable).
func New(db *sql.DB, table string) (*Fence, error) {
	if table == "" {
		table = DefaultTable
	}
	if !identifier.MatchString(table) {
		return nil, fmt.Errorf("sqlitefence: table name %q: want letters, digits and _", table)
	}
	return &Fence{db: db, table: table}, nil
}

// Open opens the SQLite database file path with the settings a fence
// wants: WAL (readers do not block the writer) and a 10 s busy timeout
// (concurrent admits wait for the write lock rather than fail).
func Open(path string) (*sql.DB, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlitefence: %w", err)
	}
	return db, nil
}

// CreateTable creates the fence table if it is not there (DDL).
func (f *Fence) CreateTable(ctx context.Context) error {
	if _, err := f.db.ExecContext(ctx, fmt.Sprintf(DDL, f.table)); err != nil {
		return fmt.Errorf("sqlitefence: creating %s: %w", f.table, err)
	}
	return nil
}

// Highest is the highest token honoured on resource (0 if none).
func (f *Fence) Highest(ctx context.Context, resource string) (uint64, error) {
	var tok int64
	err := f.db.QueryRowContext(ctx, "SELECT token FROM "+f.table+" WHERE resource = ?", resource).Scan(&tok)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlitefence: %w", err)
	}
	return uint64(tok), nil
}

// Admit implements fence.Fence; effect finds the transaction with TxFrom.
func (f *Fence) Admit(ctx context.Context, resource string, token uint64, effect func(context.Context) error) error {
	var fn func(context.Context, Tx) error
	if effect != nil {
		fn = func(ctx context.Context, _ Tx) error { return effect(ctx) }
	}
	return f.AdmitTx(ctx, resource, token, fn)
}

// AdmitTx is Admit with the transaction handed to effect.
func (f *Fence) AdmitTx(ctx context.Context, resource string, token uint64, effect func(context.Context, Tx) error) (err error) {
	if token == 0 {
		return fence.ErrMissingToken
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("sqlitefence: token %d does not fit SQLite's INTEGER", token)
	}
	conn, err := f.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlitefence: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlitefence: begin: %w", err)
	}
	open := true
	defer func() {
		if open {
			// A panic or an error before COMMIT: undo everything.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	var stored int64
	err = conn.QueryRowContext(ctx, "INSERT INTO "+f.table+" (resource, token) VALUES (?1, ?2)"+
		" ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE excluded.token >= "+f.table+".token"+
		" RETURNING token", resource, int64(token)).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		var highest int64
		if err := conn.QueryRowContext(ctx, "SELECT token FROM "+f.table+" WHERE resource = ?", resource).Scan(&highest); err != nil {
			return fmt.Errorf("sqlitefence: reading the mark of %q: %w", resource, err)
		}
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: uint64(highest)}
	}
	if err != nil {
		return fmt.Errorf("sqlitefence: raising the mark of %q: %w", resource, err)
	}
	var effectErr error
	if effect != nil {
		if _, err := conn.ExecContext(ctx, "SAVEPOINT fencelock_effect"); err != nil {
			return fmt.Errorf("sqlitefence: %w", err)
		}
		effectErr = effect(context.WithValue(ctx, txKey{}, Tx(conn)), conn)
		if effectErr != nil {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO fencelock_effect"); err != nil {
				return errors.Join(effectErr, fmt.Errorf("sqlitefence: rolling back the effect: %w", err))
			}
		}
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "RELEASE fencelock_effect"); err != nil {
			return errors.Join(effectErr, fmt.Errorf("sqlitefence: %w", err))
		}
	}
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		if effectErr != nil {
			return errors.Join(effectErr, fmt.Errorf("sqlitefence: commit: %w", err))
		}
		return fmt.Errorf("sqlitefence: commit: %w", err)
	}
	open = false
	return effectErr
}
