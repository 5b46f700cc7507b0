package mysqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/fencelock/fencelock/fence"
	"github.com/go-sql-driver/mysql"
)

// DefaultTable is the fence table's name unless one is given.
const DefaultTable = "fence"

// ErrNoRow: Row.Update found no row with the key (distinct from stale).
var ErrNoRow = errors.New("mysqlfence: no row with that key")

// Querier is what the checks need of a transaction or a pool: *sql.Tx,
// *sql.DB and *sql.Conn all have it. Run Check in the transaction that
// writes, or it fences nothing.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ident quotes a possibly database-qualified name ("d.t" -> `d`.`t`).
func ident(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = "`" + strings.ReplaceAll(p, "`", "``") + "`"
	}
	return strings.Join(parts, ".")
}

// TableDDL is the statement CreateTable runs first for table.
func TableDDL(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + ident(table) + " (" +
		"resource VARBINARY(1024) NOT NULL PRIMARY KEY, " +
		"token BIGINT NOT NULL, " +
		"write_token BIGINT NULL, " +
		"lock_key VARBINARY(1024) NULL, " +
		"raised_at DATETIME(6) NULL" +
		") ENGINE=InnoDB"
}

// columns a fence table made by hand as (resource, token) lacks, in the
// order UpgradeDDL adds them.
var columns = []struct{ name, decl string }{
	{"write_token", "BIGINT NULL"},
	{"lock_key", "VARBINARY(1024) NULL"},
	{"raised_at", "DATETIME(6) NULL"},
}

// UpgradeDDL is the ALTER TABLE that adds the columns named in missing
// (of write_token, lock_key, raised_at) to an older fence table. MySQL 8
// has no ADD COLUMN IF NOT EXISTS (MariaDB does), so CreateTable asks
// information_schema which are missing and runs this for them.
func UpgradeDDL(table string, missing []string) string {
	var adds []string
	for _, c := range columns {
		for _, m := range missing {
			if m == c.name {
				adds = append(adds, "ADD COLUMN "+c.name+" "+c.decl)
			}
		}
	}
	if len(adds) == 0 {
		return ""
	}
	return "ALTER TABLE " + ident(table) + " " + strings.Join(adds, ", ")
}

// ResetsDDL is the table CreateTable makes beside the fence table (its
// name with _resets): one row per reset (Fence.Reset, `fencelock fence
// reset --sql mysql://...`), in the order made (id), when (UTC), by whom,
// why, and the marks before and after (token_after 0: the resource was
// forgotten). Resource and lock key are bytes, as in the fence table; who
// and why are text.
func ResetsDDL(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + ident(table+"_resets") + " (" +
		"id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, " +
		"at DATETIME(6) NOT NULL, " +
		"os_user VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL, " +
		"reason TEXT CHARACTER SET utf8mb4 NOT NULL, " +
		"resource VARBINARY(1024) NOT NULL, " +
		"token_before BIGINT NOT NULL, " +
		"write_token_before BIGINT NOT NULL, " +
		"token_after BIGINT NOT NULL, " +
		"write_token_after BIGINT NOT NULL, " +
		"lock_key VARBINARY(1024) NULL" +
		") ENGINE=InnoDB"
}

// MarksSQL lists a fence table's marks: what `fencelock fence marks`
// shows of a file fence.
func MarksSQL(table string) string {
	return "SELECT resource, token, COALESCE(write_token, token) AS write_token, lock_key, raised_at FROM " + ident(table) + " ORDER BY resource"
}

// CreateTable creates the fence table if it does not exist, adds the
// columns of this version to an older one, and creates the table of its
// resets (ResetsDDL); idempotent. Run it outside a transaction: DDL
// commits one on MySQL.
func CreateTable(ctx context.Context, db Querier, table string) error {
	if _, err := db.ExecContext(ctx, TableDDL(table)); err != nil {
		return fmt.Errorf("mysqlfence: create table %s: %w", table, err)
	}
	schema, name := "", table
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		schema, name = table[:i], table[i+1:]
	}
	var missing []string
	for _, c := range columns {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS "+
			"WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?",
			schema, name, c.name).Scan(&n)
		if err != nil {
			return fmt.Errorf("mysqlfence: reading %s's columns: %w", table, err)
		}
		if n == 0 {
			missing = append(missing, c.name)
		}
	}
	if stmt := UpgradeDDL(table, missing); stmt != "" {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("mysqlfence: upgrade table %s: %w", table, err)
		}
	}
	if _, err := db.ExecContext(ctx, ResetsDDL(table)); err != nil {
		return fmt.Errorf("mysqlfence: create table %s_resets: %w", table, err)
	}
	return nil
}

func ensureSQL(table string) string {
	return "INSERT INTO " + ident(table) + " (resource, token, write_token) VALUES (?, 0, 0) ON DUPLICATE KEY UPDATE token = token"
}

func markSQL(table string) string {
	return "SELECT token, COALESCE(write_token, token), COALESCE(lock_key, '') FROM " + ident(table) + " WHERE resource = ?"
}

func lockedSQL(table string) string { return markSQL(table) + " FOR UPDATE" }

// raiseSQL's arguments: token, write_token, lock_key (NULL keeps it), 1
// when the mark rises (raised_at is stamped), resource. raised_at comes
// first: MySQL assigns left to right.
func raiseSQL(table string) string {
	return "UPDATE " + ident(table) + " SET raised_at = IF(? = 1, UTC_TIMESTAMP(6), raised_at), " +
		"token = ?, write_token = ?, lock_key = COALESCE(?, lock_key) WHERE resource = ?"
}

func checkToken(token uint64) error {
	if token == 0 {
		return fence.ErrMissingToken
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("mysqlfence: token %d does not fit a BIGINT", token)
	}
	return nil
}

// mark is a fence row as read.
type mark struct {
	highest, last uint64 // token (reads included), the last write's token
	bound         string
	exists        bool
}

func readMark(ctx context.Context, q Querier, stmt, resource string) (mark, error) {
	var hi, last int64
	var m mark
	err := q.QueryRowContext(ctx, stmt, resource).Scan(&hi, &last, &m.bound)
	if errors.Is(err, sql.ErrNoRows) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	m.highest, m.last, m.exists = uint64(hi), uint64(last), true
	return m, nil
}

// stale is the refusal of token against m, nil if it may pass.
func (m mark) stale(resource string, token uint64, write bool) error {
	switch {
	case write && m.highest > token:
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: m.highest}
	case !write && m.last > token:
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: m.last}
	}
	return nil
}

// Check is the fence-table check inside the caller's transaction tx: nil
// if token is current for resource (and tx now holds the fence row's lock
// until it ends), a *fence.StaleTokenError if a higher token is stored.
// After a refusal the caller must roll tx back rather than commit. (A
// verifying check is Fence.Verify, then Verified.Check in tx.)
func Check(ctx context.Context, tx Querier, table, resource string, token uint64) error {
	return check(ctx, tx, table, resource, token, true, nil, fence.Verified{})
}

// CheckRead is Check for a read of a read/write lock's reader
// (fence.RWFence): token must be at least the last write's (write_token),
// and a higher one raises token, the mark writes are checked against.
// Like Check it takes the fence row's lock.
func CheckRead(ctx context.Context, tx Querier, table, resource string, token uint64) error {
	return check(ctx, tx, table, resource, token, false, nil, fence.Verified{})
}

// check locks the fence row, refuses a stale token, confirms v's answer
// pre (fence.Verification.Confirm: it never asks) against the mark found
// under the lock, and raises the mark, recording the key Confirm returns
// when the row is bound to none. A nil v confirms nothing.
func check(ctx context.Context, tx Querier, table, resource string, token uint64, write bool, v *fence.Verification, pre fence.Verified) error {
	if err := checkToken(token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, ensureSQL(table), resource); err != nil {
		return checkError(table, resource, err)
	}
	m, err := readMark(ctx, tx, lockedSQL(table), resource)
	if err != nil {
		return checkError(table, resource, err)
	}
	if err := m.stale(resource, token, write); err != nil {
		return err
	}
	key, err := v.Confirm(ctx, resource, token, m.highest, m.bound, pre)
	if err != nil {
		return err
	}
	newHigh, newLast := token, token
	if !write {
		newHigh, newLast = max(m.highest, token), m.last
	}
	bind := key != "" && m.bound == ""
	if newHigh == m.highest && newLast == m.last && !bind {
		return nil // an equal token: nothing to raise
	}
	rises := 0
	if newHigh > m.highest {
		rises = 1
	}
	var lockKey any
	if bind {
		lockKey = key
	}
	if _, err := tx.ExecContext(ctx, raiseSQL(table), rises, int64(newHigh), int64(newLast), lockKey, resource); err != nil {
		return checkError(table, resource, err)
	}
	return nil
}

func checkError(table, resource string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1054 { // ER_BAD_FIELD_ERROR
		return fmt.Errorf("mysqlfence: check %q: %w (the fence table %s is from an older version: run mysqlfence.CreateTable once)", resource, err, table)
	}
	return fmt.Errorf("mysqlfence: check %q: %w", resource, err)
}

// IsRetryable reports whether err is InnoDB's deadlock (1213) or lock wait
// timeout (1205), or MariaDB's 1020 (a row changed after the snapshot,
// with innodb_snapshot_isolation on): the transaction may be retried
// whole. After a deadlock InnoDB has rolled back the whole transaction.
func IsRetryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205 || me.Number == 1020)
}

// isRefusal: the fence said no (as opposed to failing to answer).
func isRefusal(err error) bool {
	return errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrUnverifiedToken) ||
		errors.Is(err, fence.ErrWrongKey) || errors.Is(err, fence.ErrNoKey) || errors.Is(err, fence.ErrUnbound)
}
