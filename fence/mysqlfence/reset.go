package mysqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fencelock/fencelock/fence"
)

// Mark is one row of a fence table.
type Mark struct {
	Resource  string
	Token     uint64    // the highest token admitted, reads included
	LastWrite uint64    // the last write's token
	Key       string    // the lock key it is bound to ("" none)
	Raised    time.Time // when the mark last rose, UTC (zero: unknown)
}

// ResetsTable is the table Reset records in.
func (f *Fence) ResetsTable() string { return f.table + "_resets" }

// raisedSQL reads raised_at (a DATETIME holding UTC) as text, so that
// it parses the same whatever the DSN's parseTime and loc say.
const raisedSQL = "COALESCE(DATE_FORMAT(raised_at, '%Y-%m-%dT%H:%i:%s.%fZ'), '')"

// Reset mends one mark (fence.ResetRequest: lowered only, unless
// r.Raise) and records it in ResetsTable, in one transaction that holds
// the fence row's lock: both or neither. It answers the mark as it was.
// A resource with no mark is fence.ErrNoMark; a raise not asked for,
// fence.ErrResetRaises. An admission meanwhile waits for the row and is
// then checked against the mark as reset.
func (f *Fence) Reset(ctx context.Context, r fence.ResetRequest) (Mark, error) {
	if r.To > math.MaxInt64 {
		return Mark{}, fmt.Errorf("mysqlfence: token %d does not fit a BIGINT", r.To)
	}
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return Mark{}, fmt.Errorf("mysqlfence: begin: %w", err)
	}
	defer tx.Rollback()
	t := ident(f.table)
	m := Mark{Resource: r.Resource}
	var tok, last int64
	var raised string
	err = tx.QueryRowContext(ctx, "SELECT token, COALESCE(write_token, token), COALESCE(lock_key, ''), "+raisedSQL+" FROM "+t+" WHERE resource = ? FOR UPDATE", r.Resource).Scan(&tok, &last, &m.Key, &raised)
	if errors.Is(err, sql.ErrNoRows) {
		return Mark{}, fmt.Errorf("%w %q in %s", fence.ErrNoMark, r.Resource, f.table)
	}
	if err != nil {
		return Mark{}, checkError(f.table, r.Resource, err)
	}
	m.Token, m.LastWrite = uint64(tok), uint64(last)
	if raised != "" {
		m.Raised, _ = time.Parse("2006-01-02T15:04:05.999999Z", raised)
	}
	if err := r.Check(m.Token); err != nil {
		return m, err
	}
	after := min(r.To, m.LastWrite)
	if r.To == 0 {
		_, err = tx.ExecContext(ctx, "DELETE FROM "+t+" WHERE resource = ?", r.Resource)
	} else {
		_, err = tx.ExecContext(ctx, "UPDATE "+t+" SET token = ?, write_token = ?, raised_at = UTC_TIMESTAMP(6) WHERE resource = ?", int64(r.To), int64(after), r.Resource)
	}
	if err != nil {
		return m, fmt.Errorf("mysqlfence: resetting %q: %w", r.Resource, err)
	}
	var key any
	if m.Key != "" {
		key = m.Key
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+ident(f.ResetsTable())+
		" (at, os_user, reason, resource, token_before, write_token_before, token_after, write_token_after, lock_key) VALUES (UTC_TIMESTAMP(6), ?, ?, ?, ?, ?, ?, ?, ?)",
		r.User, r.Reason, r.Resource, tok, last, int64(r.To), int64(after), key); err != nil {
		return m, fmt.Errorf("mysqlfence: recording the reset of %q in %s (run mysqlfence.CreateTable, or ResetsDDL, once): %w", r.Resource, f.ResetsTable(), err)
	}
	if err := tx.Commit(); err != nil {
		return m, fmt.Errorf("mysqlfence: commit: %w", err)
	}
	return m, nil
}
