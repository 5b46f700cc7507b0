package mysqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fence"
)

// Row describes a table that carries its own token column, for fenced
// updates without a fence table.
type Row struct {
	Table       string // e.g. "accounts" or "app.accounts"
	Key         string // the key column, e.g. "id"
	TokenColumn string // e.g. "fence_token" (BIGINT NOT NULL)
}

// UpdateSQL is the statement Update runs for set: set's placeholders come
// first, then the token, the key and the token again.
func (r Row) UpdateSQL(set string) string {
	tok := ident(r.TokenColumn)
	return fmt.Sprintf("UPDATE %s SET %s, %s = ? WHERE %s = ? AND %s <= ?",
		ident(r.Table), set, tok, ident(r.Key), tok)
}

// Update runs, in tx, UPDATE table SET <set>, token_column = token WHERE
// key = key AND token_column <= token; set's placeholders (?) take args.
// A refusal is a *fence.StaleTokenError naming both tokens, or ErrNoRow
// when there is no such row; tx is then unchanged.
//
// MySQL counts changed rows, not matched ones (unless the DSN says
// clientFoundRows=true): an update that sets what is there already
// reports 0. So on 0, Update reads the row's token with a locking read,
// which is the newest committed one: at or below token, the row matched
// and the update is admitted.
func (r Row) Update(ctx context.Context, tx Querier, key any, token uint64, set string, args ...any) error {
	if err := checkToken(token); err != nil {
		return err
	}
	all := append(append([]any{}, args...), int64(token), key, int64(token))
	res, err := tx.ExecContext(ctx, r.UpdateSQL(set), all...)
	if err != nil {
		return fmt.Errorf("mysqlfence: update %s: %w", r.Table, err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	var stored int64
	err = tx.QueryRowContext(ctx, "SELECT "+ident(r.TokenColumn)+" FROM "+ident(r.Table)+" WHERE "+ident(r.Key)+" = ? FOR UPDATE", key).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %s.%s = %v", ErrNoRow, r.Table, r.Key, key)
	case err != nil:
		return fmt.Errorf("mysqlfence: token %d for %s %v, and reading the stored token failed: %w", token, r.Table, key, err)
	case uint64(stored) <= token:
		return nil // matched; nothing changed
	}
	return &fence.StaleTokenError{Resource: fmt.Sprintf("%s/%v", r.Table, key), Token: token, Highest: uint64(stored)}
}
