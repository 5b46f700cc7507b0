// Package sqlitefence is a fence.Fence kept in a SQLite database, checked
// in the same transaction as the caller's own writes: the token is admitted
// and the data written together, or neither.
//
// The marks live in a table (CreateTable makes it; DDL is the statement):
//
//	CREATE TABLE IF NOT EXISTS fencelock_fence (
//	    resource    TEXT PRIMARY KEY,
//	    token       INTEGER NOT NULL CHECK (token > 0),
//	    write_token INTEGER,   -- the last write's token (reads must reach it)
//	    lock_key    TEXT,      -- the lock key it is bound to (a verifying fence)
//	    raised_ms   INTEGER    -- when the mark last rose, Unix ms
//	)
//
// Admit takes one connection from the pool and runs, on it:
//
//	BEGIN IMMEDIATE;  -- the write lock now, not at the first write
//	INSERT INTO fencelock_fence (resource, token, lock_key, raised_ms) VALUES (?1, ?2, ?3, ?4)
//	    ON CONFLICT (resource) DO UPDATE SET token = excluded.token,
//	        lock_key = COALESCE(excluded.lock_key, fencelock_fence.lock_key),
//	        raised_ms = CASE WHEN excluded.token > fencelock_fence.token
//	            THEN excluded.raised_ms ELSE fencelock_fence.raised_ms END
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
// (The statement also sets write_token = ?2.) AdmitRead, a read/write
// lock's reader (fence.RWFence), upserts instead with token =
// MAX(token, ?2) WHERE ?2 >= the last write's token: readers do not stale
// each other, a reader from before the last write is refused, and a
// writer must be at least every reader admitted.
//
// A verifying fence (WithVerification) reads the row before BEGIN
// IMMEDIATE and asks the lock service about a token above the mark then,
// holding nothing (so no writer of the database waits for the service,
// nor gets SQLITE_BUSY because of it); after BEGIN IMMEDIATE it reads the
// row again, confirms (fence.Verification.Confirm) and stores the key in
// lock_key (?3; NULL when not verifying, which keeps the key stored).
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
	"strings"
	"time"

	"github.com/fencelock/fencelock/clock"
	"github.com/fencelock/fencelock/fence"

	_ "modernc.org/sqlite" // the pure-Go driver, registered as "sqlite"
)

// DefaultTable is the fence table's name unless New is given another.
const DefaultTable = "fencelock_fence"

// DDL is the statement CreateTable runs, with %s for the table's name.
const DDL = `CREATE TABLE IF NOT EXISTS %s (
    resource    TEXT PRIMARY KEY,
    token       INTEGER NOT NULL CHECK (token > 0),
    write_token INTEGER,
    lock_key    TEXT,
    raised_ms   INTEGER
)`

// ResetsDDL is the table CreateTable makes beside the fence table %s (its
// name with _resets): one row per reset (Reset, `fencelock fence reset
// --sql`), when, by whom, why, and the marks before and after.
const ResetsDDL = `CREATE TABLE IF NOT EXISTS %s_resets (
    at_ms              INTEGER NOT NULL,
    os_user            TEXT    NOT NULL,
    reason             TEXT    NOT NULL,
    resource           TEXT    NOT NULL,
    token_before       INTEGER NOT NULL,
    write_token_before INTEGER NOT NULL,
    token_after        INTEGER NOT NULL,  -- 0: the resource was forgotten
    write_token_after  INTEGER NOT NULL,
    lock_key           TEXT               -- the key it was bound to
)`

// MarksSQL lists the marks of the table %s: what ` + "`fencelock fence marks`" + `
// shows of a file fence.
const MarksSQL = `SELECT resource, token, COALESCE(write_token, token), lock_key, strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', raised_ms / 1000.0, 'unixepoch') FROM %s ORDER BY resource`

// columns a table made by an older DDL lacks, added by CreateTable.
var columns = []struct{ name, decl string }{
	{"write_token", "INTEGER"},
	{"lock_key", "TEXT"},
	{"raised_ms", "INTEGER"},
}

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
	db     *sql.DB
	table  string
	verify *fence.Verification
	now    func() time.Time
}

// Option configures New.
type Option func(*Fence)

// WithVerification makes the fence confirm each new token with the lock
// service before it raises a mark (fence.Verification).
func WithVerification(v *fence.Verification) Option { return func(f *Fence) { f.verify = v } }

// WithClock is the clock raised_ms is read from (clock.System).
func WithClock(c clock.Clock) Option { return func(f *Fence) { f.now = c.Now } }

var _ fence.Fence = (*Fence)(nil)

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// New fences with the table named table in db ("" for DefaultTable). The
// table must exist (CreateTable).
func New(db *sql.DB, table string, opts ...Option) (*Fence, error) {
	if table == "" {
		table = DefaultTable
	}
	if !identifier.MatchString(table) {
		return nil, fmt.Errorf("sqlitefence: table name %q: want letters, digits and _", table)
	}
	f := &Fence{db: db, table: table, now: time.Now}
	for _, o := range opts {
		o(f)
	}
	if err := f.verify.Validate(); err != nil {
		return nil, fmt.Errorf("sqlitefence: %w", err)
	}
	return f, nil
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

// CreateTable creates the fence table if it is not there (DDL) and the
// table of its resets (ResetsDDL), and adds to a fence table made by an
// older version the columns it lacks.
func (f *Fence) CreateTable(ctx context.Context) error {
	for _, ddl := range []string{DDL, ResetsDDL} {
		if _, err := f.db.ExecContext(ctx, fmt.Sprintf(ddl, f.table)); err != nil {
			return fmt.Errorf("sqlitefence: creating %s: %w", f.table, err)
		}
	}
	have := map[string]bool{}
	rows, err := f.db.QueryContext(ctx, "SELECT name FROM pragma_table_info(?)", f.table)
	if err != nil {
		return fmt.Errorf("sqlitefence: reading %s's columns: %w", f.table, err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("sqlitefence: reading %s's columns: %w", f.table, err)
		}
		have[name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlitefence: reading %s's columns: %w", f.table, err)
	}
	for _, c := range columns {
		if have[c.name] {
			continue
		}
		if _, err := f.db.ExecContext(ctx, "ALTER TABLE "+f.table+" ADD COLUMN "+c.name+" "+c.decl); err != nil {
			return fmt.Errorf("sqlitefence: adding %s to %s: %w", c.name, f.table, err)
		}
	}
	return nil
}

// Mark is one row of the fence table.
type Mark struct {
	Resource  string
	Token     uint64    // the highest token admitted, reads included
	LastWrite uint64    // the last write's token
	Key       string    // the lock key it is bound to ("" none)
	Raised    time.Time // when the mark last rose (zero: unknown)
}

// Marks lists the marks, by resource.
func (f *Fence) Marks(ctx context.Context) ([]Mark, error) {
	rows, err := f.db.QueryContext(ctx, "SELECT resource, token, COALESCE(write_token, token), COALESCE(lock_key, ''), COALESCE(raised_ms, 0) FROM "+f.table+" ORDER BY resource")
	if err != nil {
		return nil, fmt.Errorf("sqlitefence: %w", err)
	}
	defer rows.Close()
	var out []Mark
	for rows.Next() {
		var m Mark
		var tok, last, ms int64
		if err := rows.Scan(&m.Resource, &tok, &last, &m.Key, &ms); err != nil {
			return nil, fmt.Errorf("sqlitefence: %w", err)
		}
		m.Token, m.LastWrite = uint64(tok), uint64(last)
		if ms != 0 {
			m.Raised = time.UnixMilli(ms)
		}
		out = append(out, m)
	}
	return out, rows.Err()
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
func (f *Fence) AdmitTx(ctx context.Context, resource string, token uint64, effect func(context.Context, Tx) error) error {
	return f.admit(ctx, resource, token, true, effect)
}

// AdmitWrite is Admit: a read/write lock writer's write (fence.RWFence),
// admitted iff token is at least every token admitted, reads included.
func (f *Fence) AdmitWrite(ctx context.Context, resource string, token uint64, effect func(context.Context) error) error {
	return f.Admit(ctx, resource, token, effect)
}

// AdmitRead admits a read/write lock reader's read (fence.RWFence): token
// must be at least the last write's (write_token); a higher one raises
// token, the mark writes are checked against. Like a write it holds the
// database's write lock while it runs: reads of a fenced resource go one
// at a time.
func (f *Fence) AdmitRead(ctx context.Context, resource string, token uint64, effect func(context.Context) error) error {
	var fn func(context.Context, Tx) error
	if effect != nil {
		fn = func(ctx context.Context, _ Tx) error { return effect(ctx) }
	}
	return f.AdmitReadTx(ctx, resource, token, fn)
}

// AdmitReadTx is AdmitRead with the transaction handed to effect.
func (f *Fence) AdmitReadTx(ctx context.Context, resource string, token uint64, effect func(context.Context, Tx) error) error {
	return f.admit(ctx, resource, token, false, effect)
}

var _ fence.RWFence = (*Fence)(nil)

func (f *Fence) admit(ctx context.Context, resource string, token uint64, write bool, effect func(context.Context, Tx) error) error {
	if token == 0 {
		return fence.ErrMissingToken
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("sqlitefence: token %d does not fit SQLite's INTEGER", token)
	}
	for attempt := 1; ; attempt++ {
		// The lock service is asked before BEGIN IMMEDIATE: nobody waits
		// for it behind SQLite's write lock (fence.Verification).
		var pre fence.Verified
		if f.verify != nil {
			highest, last, bound, err := f.read(ctx, f.db, resource)
			if err != nil {
				return err
			}
			if err := stale(resource, token, write, highest, last); err != nil {
				return err
			}
			if pre, err = f.verify.Ask(ctx, resource, token, highest, bound); err != nil {
				return err
			}
		}
		err := f.admitTx(ctx, resource, token, write, pre, effect)
		if !errors.Is(err, fence.ErrReverify) || attempt == fence.MaxReverify {
			return err
		}
	}
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// read is resource's marks and binding as q sees them (0, 0, "" for none).
func (f *Fence) read(ctx context.Context, q querier, resource string) (highest, last uint64, bound string, err error) {
	var h, l int64
	err = q.QueryRowContext(ctx, "SELECT token, COALESCE(write_token, token), COALESCE(lock_key, '') FROM "+f.table+" WHERE resource = ?", resource).Scan(&h, &l, &bound)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, "", nil
	}
	if err != nil {
		return 0, 0, "", f.explain(fmt.Errorf("sqlitefence: reading the mark of %q: %w", resource, err))
	}
	return uint64(h), uint64(l), bound, nil
}

func stale(resource string, token uint64, write bool, highest, last uint64) error {
	switch {
	case write && highest > token:
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: highest}
	case !write && last > token:
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: last}
	}
	return nil
}

// explain adds to a "no such column" error that the table is an old one.
func (f *Fence) explain(err error) error {
	if strings.Contains(err.Error(), "no such column") || strings.Contains(err.Error(), "has no column") {
		return fmt.Errorf("%w (the table %s is from an older sqlitefence: run CreateTable once)", err, f.table)
	}
	return err
}

// admitTx is one transaction of admit: the mark checked, confirmed and
// raised, and effect run, under SQLite's write lock.
func (f *Fence) admitTx(ctx context.Context, resource string, token uint64, write bool, pre fence.Verified, effect func(context.Context, Tx) error) (err error) {
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
	t := f.table
	var key string
	if f.verify != nil {
		highest, last, bound, err := f.read(ctx, conn, resource)
		if err != nil {
			return err
		}
		if err := stale(resource, token, write, highest, last); err != nil {
			return err
		}
		if key, err = f.verify.Confirm(ctx, resource, token, highest, bound, pre); err != nil {
			return err
		}
	}
	var lockKey any
	if key != "" {
		lockKey = key
	}
	// A write sets both marks; a read raises token only, and needs token
	// at least the last write's (write_token; NULL in a row from before
	// reads were fenced, when every admission was a write).
	stmt := "INSERT INTO " + t + " (resource, token, write_token, lock_key, raised_ms) VALUES (?1, ?2, ?2, ?3, ?4)" +
		" ON CONFLICT (resource) DO UPDATE SET token = excluded.token, write_token = excluded.token," +
		" lock_key = COALESCE(excluded.lock_key, " + t + ".lock_key)," +
		" raised_ms = CASE WHEN excluded.token > " + t + ".token THEN excluded.raised_ms ELSE " + t + ".raised_ms END" +
		" WHERE excluded.token >= " + t + ".token RETURNING token"
	if !write {
		stmt = "INSERT INTO " + t + " (resource, token, write_token, lock_key, raised_ms) VALUES (?1, ?2, 0, ?3, ?4)" +
			" ON CONFLICT (resource) DO UPDATE SET token = MAX(" + t + ".token, excluded.token)," +
			" lock_key = COALESCE(excluded.lock_key, " + t + ".lock_key)," +
			" raised_ms = CASE WHEN excluded.token > " + t + ".token THEN excluded.raised_ms ELSE " + t + ".raised_ms END" +
			" WHERE excluded.token >= COALESCE(" + t + ".write_token, " + t + ".token) RETURNING token"
	}
	var stored int64
	err = conn.QueryRowContext(ctx, stmt, resource, int64(token), lockKey, f.now().UnixMilli()).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		col := "token"
		if !write {
			col = "COALESCE(write_token, token)"
		}
		var highest int64
		if err := conn.QueryRowContext(ctx, "SELECT "+col+" FROM "+t+" WHERE resource = ?", resource).Scan(&highest); err != nil {
			return fmt.Errorf("sqlitefence: reading the mark of %q: %w", resource, err)
		}
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: uint64(highest)}
	}
	if err != nil {
		return f.explain(fmt.Errorf("sqlitefence: raising the mark of %q: %w", resource, err))
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

// ResetsTable is the table Reset records in.
func (f *Fence) ResetsTable() string { return f.table + "_resets" }

// Reset mends one mark (fence.ResetRequest: lowered only, unless
// r.Raise), and records it in ResetsTable, in one transaction: both or
// neither. It answers the mark as it was. A resource with no mark is
// fence.ErrNoMark; a raise not asked for, fence.ErrResetRaises.
func (f *Fence) Reset(ctx context.Context, r fence.ResetRequest) (Mark, error) {
	if r.To > math.MaxInt64 {
		return Mark{}, fmt.Errorf("sqlitefence: token %d does not fit SQLite's INTEGER", r.To)
	}
	conn, err := f.db.Conn(ctx)
	if err != nil {
		return Mark{}, fmt.Errorf("sqlitefence: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return Mark{}, fmt.Errorf("sqlitefence: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	var m Mark
	var tok, last, ms int64
	err = conn.QueryRowContext(ctx, "SELECT resource, token, COALESCE(write_token, token), COALESCE(lock_key, ''), COALESCE(raised_ms, 0) FROM "+f.table+" WHERE resource = ?", r.Resource).Scan(&m.Resource, &tok, &last, &m.Key, &ms)
	if errors.Is(err, sql.ErrNoRows) {
		return Mark{}, fmt.Errorf("%w %q in %s", fence.ErrNoMark, r.Resource, f.table)
	}
	if err != nil {
		return Mark{}, f.explain(fmt.Errorf("sqlitefence: reading the mark of %q: %w", r.Resource, err))
	}
	m.Token, m.LastWrite = uint64(tok), uint64(last)
	if ms != 0 {
		m.Raised = time.UnixMilli(ms)
	}
	if err := r.Check(m.Token); err != nil {
		return m, err
	}
	after := min(r.To, m.LastWrite)
	if r.To == 0 {
		_, err = conn.ExecContext(ctx, "DELETE FROM "+f.table+" WHERE resource = ?", r.Resource)
	} else {
		_, err = conn.ExecContext(ctx, "UPDATE "+f.table+" SET token = ?, write_token = ?, raised_ms = ? WHERE resource = ?", int64(r.To), int64(after), f.now().UnixMilli(), r.Resource)
	}
	if err != nil {
		return m, fmt.Errorf("sqlitefence: resetting %q: %w", r.Resource, err)
	}
	var key any
	if m.Key != "" {
		key = m.Key
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO "+f.ResetsTable()+" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		f.now().UnixMilli(), r.User, r.Reason, r.Resource, tok, last, int64(r.To), int64(after), key); err != nil {
		return m, fmt.Errorf("sqlitefence: recording the reset of %q in %s (run CreateTable once): %w", r.Resource, f.ResetsTable(), err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return m, fmt.Errorf("sqlitefence: commit: %w", err)
	}
	done = true
	return m, nil
}
