// Package pgfence fences writes to PostgreSQL: the fencing-token check runs
// in the same transaction as the caller's write, so the write commits only if
// the token was still current when it did, and rolls back with the check
// otherwise.
//
// Two shapes, both plain SQL you can read (and run yourself):
//
// A fence table, one row per protected resource (CreateTable makes it):
//
//	CREATE TABLE IF NOT EXISTS fence (
//	    resource  text        PRIMARY KEY,
//	    token     bigint      NOT NULL,
//	    lock_key  text,                            -- the key it is bound to
//	    raised_at timestamptz NOT NULL DEFAULT now()
//	);
//
// and, as the first statement of the writing transaction:
//
//	INSERT INTO fence (resource, token, lock_key) VALUES ($1, $2, $3)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token,
//	    lock_key = COALESCE(EXCLUDED.lock_key, fence.lock_key),
//	    raised_at = CASE WHEN EXCLUDED.token > fence.token THEN now() ELSE fence.raised_at END
//	    WHERE fence.token <= EXCLUDED.token
//	      AND (EXCLUDED.lock_key IS NULL OR fence.lock_key IS NULL OR fence.lock_key = EXCLUDED.lock_key)
//	RETURNING token;
//
// ($3 is NULL unless the fence verifies.) One row back: the token is
// current (new resource, equal or higher token) and the transaction now
// holds the fence row's lock until it commits or rolls back. No row back:
// the stored token is higher (or, verifying, the row is bound to another
// key); Admit reads it for the error and rolls back.
//
// (It also sets write_token, the last write's token, to $2.) A read of a
// read/write lock's reader (CheckRead, DoRead, AdmitRead) upserts instead
// with token = GREATEST(token, $2) WHERE COALESCE(write_token, token) <=
// $2: readers do not stale each other, a reader from before the last
// write is refused, a writer must be at least every reader admitted.
//
// A verifying fence (WithVerification, CheckVerified) reads the row
// without locking it and asks the lock service about a token above the
// mark then (Fence.Do before it begins its transaction), so that no
// transaction waits for the service behind the row's lock; it then reads
// the row again with SELECT ... FOR UPDATE, confirms
// (fence.Verification.Confirm), and records the lock key the token came
// for.
//
// Why there is no read-then-write race, at READ COMMITTED and SERIALIZABLE:
// the comparison is not a SELECT followed by a write but the WHERE clause of
// the upsert, which PostgreSQL evaluates only after it has taken the
// conflicting row's lock, against the newest committed version of the row (a
// concurrent INSERT of the same new resource waits on the unique index and
// then takes the conflict path). Any two transactions that pass the fence for
// one resource therefore hold its row lock one after the other: the second
// waits until the first commits and then compares against the first's token.
// At SERIALIZABLE (and REPEATABLE READ) the second instead fails with a
// serialization failure (SQLSTATE 40001) when the row changed under its
// snapshot; that is an error, not an admission, and the caller may retry the
// whole transaction (IsSerializationFailure tells).
//
// A table that carries its own token column needs no fence table: Row.Update
// runs
//
//	UPDATE t SET <your assignments>, fence_token = $t
//	WHERE id = $k AND fence_token <= $t
//
// where zero rows means stale (or no such row: it tells the two apart).
//
// Errors match errors.Is(err, fence.ErrStaleToken) (a *fence.StaleTokenError
// naming both tokens) or fence.ErrMissingToken for token 0. Tokens are stored
// as bigint, so a token above 2^63-1 is refused with an error.
package pgfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTable is the fence table's name unless one is given.
const DefaultTable = "fence"

// ErrNoRow: Row.Update found no row with the key (distinct from stale).
var ErrNoRow = errors.New("pgfence: no row with that key")

// Querier is what the checks need of a connection or transaction: pgx.Tx,
// *pgx.Conn and *pgxpool.Pool all have it. Run the checks in the transaction
// that writes, or they fence nothing.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner starts transactions: *pgx.Conn and *pgxpool.Pool have it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ident quotes a possibly schema-qualified name ("s.t" -> "s"."t").
func ident(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

// TableDDL is the statement CreateTable runs for table. lock_key is the
// lock key the resource is bound to (NULL: none; set by a verifying
// fence), raised_at when its mark last rose, write_token the last write's
// token (a reader's must reach it; NULL in a row from before reads were
// fenced, when token was).
func TableDDL(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + ident(table) +
		" (resource text PRIMARY KEY, token bigint NOT NULL, write_token bigint, lock_key text, raised_at timestamptz NOT NULL DEFAULT now())"
}

// UpgradeDDL adds to a fence table made by an older TableDDL (resource
// and token only) the columns this version writes. CreateTable runs it
// after TableDDL; it changes nothing on a table that has them.
func UpgradeDDL(table string) string {
	return "ALTER TABLE " + ident(table) +
		" ADD COLUMN IF NOT EXISTS write_token bigint, ADD COLUMN IF NOT EXISTS lock_key text, ADD COLUMN IF NOT EXISTS raised_at timestamptz NOT NULL DEFAULT now()"
}

// ResetsDDL is the table CreateTable makes beside the fence table (its
// name with _resets): one row per reset (Fence.Reset, `fencelock fence
// reset --sql`), when, by whom, why, and the marks before and after
// (token_after 0: the resource was forgotten).
func ResetsDDL(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + ident(table+"_resets") +
		" (at timestamptz NOT NULL DEFAULT now(), os_user text NOT NULL, reason text NOT NULL, resource text NOT NULL," +
		" token_before bigint NOT NULL, write_token_before bigint NOT NULL, token_after bigint NOT NULL, write_token_after bigint NOT NULL, lock_key text)"
}

// MarksSQL lists a fence table's marks: what `fencelock fence marks` shows
// of a file fence.
func MarksSQL(table string) string {
	return "SELECT resource, token, COALESCE(write_token, token) AS write_token, lock_key, raised_at FROM " + ident(table) + " ORDER BY resource"
}

// CreateTable creates the fence table if it does not exist, adds the
// columns of this version to one made by an older one, and creates the
// table of its resets (ResetsDDL); idempotent.
func CreateTable(ctx context.Context, q Querier, table string) error {
	for _, stmt := range []string{TableDDL(table), UpgradeDDL(table), ResetsDDL(table)} {
		if _, err := q.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgfence: create table %s: %w", table, err)
		}
	}
	return nil
}

// admitSQL raises the mark to $2 if it is not above it and the resource
// is bound to no key or to $3's; the binding is set when $3 is not NULL.
func admitSQL(table string) string {
	t := ident(table)
	return "INSERT INTO " + t + " (resource, token, write_token, lock_key) VALUES ($1, $2, $2, $3) " +
		"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, write_token = EXCLUDED.token, lock_key = COALESCE(EXCLUDED.lock_key, " + t + ".lock_key), " +
		"raised_at = CASE WHEN EXCLUDED.token > " + t + ".token THEN now() ELSE " + t + ".raised_at END " +
		"WHERE " + t + ".token <= EXCLUDED.token AND (EXCLUDED.lock_key IS NULL OR " + t + ".lock_key IS NULL OR " + t + ".lock_key = EXCLUDED.lock_key) " +
		"RETURNING token"
}

// readSQL admits a read: $2 at least the last write's token; token rises
// to $2 if it is higher, write_token stays.
func readSQL(table string) string {
	t := ident(table)
	return "INSERT INTO " + t + " (resource, token, write_token, lock_key) VALUES ($1, $2, 0, $3) " +
		"ON CONFLICT (resource) DO UPDATE SET token = GREATEST(" + t + ".token, EXCLUDED.token), lock_key = COALESCE(EXCLUDED.lock_key, " + t + ".lock_key), " +
		"raised_at = CASE WHEN EXCLUDED.token > " + t + ".token THEN now() ELSE " + t + ".raised_at END " +
		"WHERE COALESCE(" + t + ".write_token, " + t + ".token) <= EXCLUDED.token AND (EXCLUDED.lock_key IS NULL OR " + t + ".lock_key IS NULL OR " + t + ".lock_key = EXCLUDED.lock_key) " +
		"RETURNING token"
}

func storedSQL(table string) string {
	return "SELECT token, COALESCE(write_token, token), COALESCE(lock_key, '') FROM " + ident(table) + " WHERE resource = $1"
}

func lockedSQL(table string) string {
	return storedSQL(table) + " FOR UPDATE"
}

// nullKey is key as the admit statement's $3.
func nullKey(key string) any {
	if key == "" {
		return nil
	}
	return key
}

func checkToken(token uint64) error {
	if token == 0 {
		return fence.ErrMissingToken
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("pgfence: token %d does not fit a bigint", token)
	}
	return nil
}

// Check is the fence-table check inside the caller's transaction tx: nil if
// token is current for resource (and tx now holds the fence row's lock), a
// *fence.StaleTokenError if a higher token is stored. After a stale answer
// the caller must roll tx back rather than commit its writes.
func Check(ctx context.Context, tx Querier, table, resource string, token uint64) error {
	return CheckVerified(ctx, tx, nil, table, resource, token)
}

// CheckVerified is Check with v's verification (fence.Verification): a
// token that would raise the mark is confirmed with the lock service
// first, after a read of the fence row that locks nothing, and the lock
// key it came for is recorded in lock_key. Call it first in tx, before tx
// takes locks of its own: tx waits for the lock service while it is asked.
// The answer fence.ErrReverify (the row was reset meanwhile) means: roll
// tx back and run it again. A nil v is Check.
func CheckVerified(ctx context.Context, tx Querier, v *fence.Verification, table, resource string, token uint64) error {
	return check(ctx, tx, v, table, resource, token, true)
}

// CheckRead is Check for a read of a read/write lock's reader
// (fence.RWFence): token must be at least the last write's (write_token),
// and a higher one raises token, the mark writes are checked against.
// Like Check it takes the fence row's lock: readers of one resource go
// one transaction at a time.
func CheckRead(ctx context.Context, tx Querier, table, resource string, token uint64) error {
	return check(ctx, tx, nil, table, resource, token, false)
}

// CheckReadVerified is CheckRead with v's verification (CheckVerified).
func CheckReadVerified(ctx context.Context, tx Querier, v *fence.Verification, table, resource string, token uint64) error {
	return check(ctx, tx, v, table, resource, token, false)
}

func check(ctx context.Context, tx Querier, v *fence.Verification, table, resource string, token uint64, write bool) error {
	if err := checkToken(token); err != nil {
		return err
	}
	var pre fence.Verified
	if v != nil {
		// Read without locking the row; ask; then lock it and confirm.
		var err error
		if pre, err = ask(ctx, tx, v, table, resource, token, write); err != nil {
			return err
		}
	}
	return admitChecked(ctx, tx, v, pre, table, resource, token, write)
}

// stored is resource's row as q sees it (0, 0, "" for none), locked
// FOR UPDATE when lock.
func stored(ctx context.Context, q Querier, table, resource string, lock bool) (highest, last uint64, bound string, err error) {
	stmt := storedSQL(table)
	if lock {
		stmt = lockedSQL(table)
	}
	var h, l int64
	err = q.QueryRow(ctx, stmt, resource).Scan(&h, &l, &bound)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, "", nil
	}
	if err != nil {
		return 0, 0, "", checkError(table, resource, err)
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

// ask is a verification's first step: the row read through q without
// locking it, a stale token refused, the lock service asked.
func ask(ctx context.Context, q Querier, v *fence.Verification, table, resource string, token uint64, write bool) (fence.Verified, error) {
	highest, last, bound, err := stored(ctx, q, table, resource, false)
	if err != nil {
		return fence.Verified{}, err
	}
	if err := stale(resource, token, write, highest, last); err != nil {
		return fence.Verified{}, err
	}
	return v.Ask(ctx, resource, token, highest, bound)
}

// admitChecked raises the mark in tx: verifying, it locks the row FOR
// UPDATE, refuses a stale token and confirms Ask's answer (pre) first.
func admitChecked(ctx context.Context, tx Querier, v *fence.Verification, pre fence.Verified, table, resource string, token uint64, write bool) error {
	var key string
	if v != nil {
		highest, last, bound, err := stored(ctx, tx, table, resource, true)
		if err != nil {
			return err
		}
		if err := stale(resource, token, write, highest, last); err != nil {
			return err
		}
		if key, err = v.Confirm(ctx, resource, token, highest, bound, pre); err != nil {
			return err
		}
	}
	stmt := admitSQL(table)
	if !write {
		stmt = readSQL(table)
	}
	var got int64
	err := tx.QueryRow(ctx, stmt, resource, int64(token), nullKey(key)).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return checkError(table, resource, err)
	}
	var storedTok, last int64
	var bound string
	if err := tx.QueryRow(ctx, storedSQL(table), resource).Scan(&storedTok, &last, &bound); err != nil {
		return fmt.Errorf("pgfence: token %d for %q refused, and reading the stored token failed: %w", token, resource, err)
	}
	if !write {
		storedTok = last
	}
	return refusal(resource, token, key, uint64(storedTok), bound)
}

func checkError(table, resource string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42703" { // undefined_column
		return fmt.Errorf("pgfence: check %q: %w (the fence table %s is from an older pgfence: run pgfence.CreateTable, or UpgradeDDL, once)", resource, err, table)
	}
	return fmt.Errorf("pgfence: check %q: %w", resource, err)
}

// refusal says why the upsert changed no row: a higher token, or (a
// concurrent first admit having bound the resource) another key.
func refusal(resource string, token uint64, key string, stored uint64, bound string) error {
	if stored <= token && key != "" && bound != "" && bound != key {
		return &fence.WrongKeyError{Resource: resource, Bound: bound, Key: key, Token: token}
	}
	return &fence.StaleTokenError{Resource: resource, Token: token, Highest: stored}
}

// CheckSQL is Check for a database/sql transaction (for example on the pgx
// stdlib driver).
func CheckSQL(ctx context.Context, tx *sql.Tx, table, resource string, token uint64) error {
	if err := checkToken(token); err != nil {
		return err
	}
	var got int64
	err := tx.QueryRowContext(ctx, admitSQL(table), resource, int64(token), nil).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return checkError(table, resource, err)
	}
	var stored, last int64
	var bound string
	if err := tx.QueryRowContext(ctx, storedSQL(table), resource).Scan(&stored, &last, &bound); err != nil {
		return fmt.Errorf("pgfence: token %d for %q refused, and reading the stored token failed: %w", token, resource, err)
	}
	return refusal(resource, token, "", uint64(stored), bound)
}

// Fence admits tokens with the fence table, running each effect in the
// transaction that checked it. It implements fence.Fence.
type Fence struct {
	db     Beginner
	table  string
	opts   pgx.TxOptions
	verify *fence.Verification
}

// Option configures a Fence.
type Option func(*Fence)

// WithTable names the fence table (default DefaultTable).
func WithTable(name string) Option { return func(f *Fence) { f.table = name } }

// WithTxOptions sets the transactions' options, e.g. the isolation level
// (default: the server's, normally READ COMMITTED).
func WithTxOptions(o pgx.TxOptions) Option { return func(f *Fence) { f.opts = o } }

// WithVerification makes the fence confirm each new token with the lock
// service before it raises a mark, inside the transaction (CheckVerified).
func WithVerification(v *fence.Verification) Option { return func(f *Fence) { f.verify = v } }

// New returns a Fence on db (a *pgxpool.Pool or *pgx.Conn).
func New(db Beginner, opts ...Option) *Fence {
	f := &Fence{db: db, table: DefaultTable}
	for _, o := range opts {
		o(f)
	}
	return f
}

var _ fence.Fence = (*Fence)(nil)

// Table is the fence table's name.
func (f *Fence) Table() string { return f.table }

// Do begins a transaction, checks token for resource, runs fn in the same
// transaction and commits, following fence.Fence's rule: a refused token
// rolls back and fn does not run (the refusal matches fence.ErrStaleToken or
// fence.ErrMissingToken); an admitted token's mark is committed even if fn
// fails, in which case fn's writes are rolled back (to a savepoint taken
// after the check) and Do returns fn's error unchanged. A failed commit
// returns its error, and then neither the mark nor fn's writes are kept. Do
// does not retry: with SERIALIZABLE, retry on IsSerializationFailure if fn
// may run again.
func (f *Fence) Do(ctx context.Context, resource string, token uint64, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return f.do(ctx, resource, token, true, fn)
}

// DoRead is Do for a read/write lock's reader (CheckRead's rule).
func (f *Fence) DoRead(ctx context.Context, resource string, token uint64, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return f.do(ctx, resource, token, false, fn)
}

func (f *Fence) do(ctx context.Context, resource string, token uint64, write bool, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := checkToken(token); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The lock service is asked before the transaction begins: nobody
		// waits for it behind the fence row's lock (fence.Verification).
		var pre fence.Verified
		if f.verify != nil {
			var err error
			if pre, err = f.ask(ctx, resource, token, write); err != nil {
				if ctx.Err() != nil && !isRefusal(err) {
					return ctx.Err()
				}
				return err
			}
		}
		err := f.doTx(ctx, resource, token, write, pre, fn)
		if !errors.Is(err, fence.ErrReverify) || attempt == fence.MaxReverify {
			return err
		}
	}
}

// ask reads the fence row outside any transaction of the fence's (on
// the pool when it can query, else in a transaction of its own that
// ends before the question) and asks the lock service.
func (f *Fence) ask(ctx context.Context, resource string, token uint64, write bool) (fence.Verified, error) {
	if q, ok := f.db.(Querier); ok {
		return ask(ctx, q, f.verify, f.table, resource, token, write)
	}
	tx, err := f.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fence.Verified{}, fmt.Errorf("pgfence: begin: %w", err)
	}
	highest, last, bound, err := stored(ctx, tx, f.table, resource, false)
	_ = tx.Rollback(context.WithoutCancel(ctx))
	if err != nil {
		return fence.Verified{}, err
	}
	if err := stale(resource, token, write, highest, last); err != nil {
		return fence.Verified{}, err
	}
	return f.verify.Ask(ctx, resource, token, highest, bound)
}

// doTx is one transaction of do.
func (f *Fence) doTx(ctx context.Context, resource string, token uint64, write bool, pre fence.Verified, fn func(ctx context.Context, tx pgx.Tx) error) (err error) {
	tx, err := f.db.BeginTx(ctx, f.opts)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("pgfence: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := admitChecked(ctx, tx, f.verify, pre, f.table, resource, token, write); err != nil {
		if ctx.Err() != nil && !isRefusal(err) {
			return ctx.Err()
		}
		return err
	}
	var fnErr error
	if fn != nil {
		// One round trip buys fence.Fence's rule: the mark outlives a
		// failed effect. Committing releases the savepoint.
		if _, err := tx.Exec(ctx, "SAVEPOINT pgfence_effect"); err != nil {
			return fmt.Errorf("pgfence: savepoint: %w", err)
		}
		if fnErr = fn(ctx, tx); fnErr != nil {
			if _, err := tx.Exec(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT pgfence_effect"); err != nil {
				return errors.Join(fnErr, fmt.Errorf("pgfence: rollback to savepoint: %w", err))
			}
		}
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		committed = true // Commit rolled back; nothing left to undo
		return errors.Join(fnErr, fmt.Errorf("pgfence: commit: %w", err))
	}
	committed = true
	return fnErr
}

// isRefusal: the fence said no (as opposed to failing to answer).
func isRefusal(err error) bool {
	return errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrUnverifiedToken) ||
		errors.Is(err, fence.ErrWrongKey) || errors.Is(err, fence.ErrNoKey) || errors.Is(err, fence.ErrUnbound)
}

type txKey struct{}

// Admit implements fence.Fence: Do for effects that take only a context.
// The effect finds the transaction with Tx(ctx) and must write through it.
func (f *Fence) Admit(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error {
	return f.Do(ctx, resource, token, func(ctx context.Context, tx pgx.Tx) error {
		if effect == nil {
			return nil
		}
		return effect(context.WithValue(ctx, txKey{}, tx))
	})
}

// AdmitWrite is Admit (fence.RWFence).
func (f *Fence) AdmitWrite(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error {
	return f.Admit(ctx, resource, token, effect)
}

// AdmitRead is Admit for a read/write lock's reader (fence.RWFence,
// CheckRead's rule).
func (f *Fence) AdmitRead(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error {
	return f.DoRead(ctx, resource, token, func(ctx context.Context, tx pgx.Tx) error {
		if effect == nil {
			return nil
		}
		return effect(context.WithValue(ctx, txKey{}, tx))
	})
}

var _ fence.RWFence = (*Fence)(nil)

// Tx is the transaction Admit runs an effect in (nil outside one).
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// IsSerializationFailure reports whether err is PostgreSQL's SQLSTATE 40001
// (the transaction may be retried) or 40P01 (deadlock detected).
func IsSerializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Row describes a table that carries its own token column, for fenced
// updates without a fence table.
type Row struct {
	Table       string // e.g. "accounts" or "app.accounts"
	Key         string // the key column, e.g. "id"
	TokenColumn string // e.g. "fence_token" (bigint NOT NULL)
}

// UpdateSQL is the statement Update runs for set with n arguments: set's
// placeholders are $1..$n, the token is $n+1 and the key $n+2.
func (r Row) UpdateSQL(set string, n int) string {
	tok := ident(r.TokenColumn)
	return fmt.Sprintf("UPDATE %s SET %s, %s = $%d WHERE %s = $%d AND %s <= $%d",
		ident(r.Table), set, tok, n+1, ident(r.Key), n+2, tok, n+1)
}

// Update runs, in tx, UPDATE table SET <set>, token_column = token WHERE
// key = key AND token_column <= token. set is a list of assignments whose
// placeholders are $1..$len(args). Zero rows updated means the stored token
// is higher (a *fence.StaleTokenError naming both) or there is no such row
// (ErrNoRow); tx is then unchanged.
func (r Row) Update(ctx context.Context, tx Querier, key any, token uint64, set string, args ...any) error {
	if err := checkToken(token); err != nil {
		return err
	}
	all := append(append([]any{}, args...), int64(token), key)
	tag, err := tx.Exec(ctx, r.UpdateSQL(set, len(args)), all...)
	if err != nil {
		return fmt.Errorf("pgfence: update %s: %w", r.Table, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var stored int64
	err = tx.QueryRow(ctx, "SELECT "+ident(r.TokenColumn)+" FROM "+ident(r.Table)+" WHERE "+ident(r.Key)+" = $1", key).Scan(&stored)
	return r.refusal(key, token, stored, err, pgx.ErrNoRows)
}

// UpdateSQLTx is Update for a database/sql transaction.
func (r Row) UpdateSQLTx(ctx context.Context, tx *sql.Tx, key any, token uint64, set string, args ...any) error {
	if err := checkToken(token); err != nil {
		return err
	}
	all := append(append([]any{}, args...), int64(token), key)
	res, err := tx.ExecContext(ctx, r.UpdateSQL(set, len(args)), all...)
	if err != nil {
		return fmt.Errorf("pgfence: update %s: %w", r.Table, err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	var stored int64
	err = tx.QueryRowContext(ctx, "SELECT "+ident(r.TokenColumn)+" FROM "+ident(r.Table)+" WHERE "+ident(r.Key)+" = $1", key).Scan(&stored)
	return r.refusal(key, token, stored, err, sql.ErrNoRows)
}

func (r Row) refusal(key any, token uint64, stored int64, err, noRows error) error {
	switch {
	case errors.Is(err, noRows):
		return fmt.Errorf("%w: %s.%s = %v", ErrNoRow, r.Table, r.Key, key)
	case err != nil:
		return fmt.Errorf("pgfence: token %d refused for %s %v, and reading the stored token failed: %w", token, r.Table, key, err)
	case uint64(stored) <= token:
		// Zero rows, yet the row now holds an older token: it changed
		// between the UPDATE and the read (deleted and re-inserted).
		return fmt.Errorf("pgfence: %s %v changed concurrently; retry", r.Table, key)
	}
	return &fence.StaleTokenError{Resource: fmt.Sprintf("%s/%v", r.Table, key), Token: token, Highest: uint64(stored)}
}

// Mark is one row of a fence table.
type Mark struct {
	Resource  string
	Token     uint64 // the highest token admitted, reads included
	LastWrite uint64 // the last write's token
	Key       string // the lock key it is bound to ("" none)
	Raised    time.Time
}

// ResetsTable is the table Reset records in.
func (f *Fence) ResetsTable() string { return f.table + "_resets" }

// Reset mends one mark (fence.ResetRequest: lowered only, unless
// r.Raise) and records it in ResetsTable, in one transaction that holds
// the fence row's lock: both or neither. It answers the mark as it was.
// A resource with no mark is fence.ErrNoMark; a raise not asked for,
// fence.ErrResetRaises.
func (f *Fence) Reset(ctx context.Context, r fence.ResetRequest) (Mark, error) {
	if r.To > math.MaxInt64 {
		return Mark{}, fmt.Errorf("pgfence: token %d does not fit a bigint", r.To)
	}
	tx, err := f.db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return Mark{}, fmt.Errorf("pgfence: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	t := ident(f.table)
	m := Mark{Resource: r.Resource}
	var tok, last int64
	err = tx.QueryRow(ctx, "SELECT token, COALESCE(write_token, token), COALESCE(lock_key, ''), raised_at FROM "+t+" WHERE resource = $1 FOR UPDATE", r.Resource).Scan(&tok, &last, &m.Key, &m.Raised)
	if errors.Is(err, pgx.ErrNoRows) {
		return Mark{}, fmt.Errorf("%w %q in %s", fence.ErrNoMark, r.Resource, f.table)
	}
	if err != nil {
		return Mark{}, checkError(f.table, r.Resource, err)
	}
	m.Token, m.LastWrite = uint64(tok), uint64(last)
	if err := r.Check(m.Token); err != nil {
		return m, err
	}
	after := min(r.To, m.LastWrite)
	if r.To == 0 {
		_, err = tx.Exec(ctx, "DELETE FROM "+t+" WHERE resource = $1", r.Resource)
	} else {
		_, err = tx.Exec(ctx, "UPDATE "+t+" SET token = $1, write_token = $2, raised_at = now() WHERE resource = $3", int64(r.To), int64(after), r.Resource)
	}
	if err != nil {
		return m, fmt.Errorf("pgfence: resetting %q: %w", r.Resource, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+ident(f.ResetsTable())+" (os_user, reason, resource, token_before, write_token_before, token_after, write_token_after, lock_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
		r.User, r.Reason, r.Resource, tok, last, int64(r.To), int64(after), nullKey(m.Key)); err != nil {
		return m, fmt.Errorf("pgfence: recording the reset of %q in %s (run pgfence.CreateTable, or ResetsDDL, once): %w", r.Resource, f.ResetsTable(), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return m, fmt.Errorf("pgfence: commit: %w", err)
	}
	return m, nil
}
