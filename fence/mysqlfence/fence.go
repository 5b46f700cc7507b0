package mysqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fence"
)

// Fence admits tokens with the fence table, running each effect in the
// transaction that checked it. It implements fence.Fence and
// fence.RWFence.
type Fence struct {
	db     *sql.DB
	table  string
	opts   *sql.TxOptions
	verify *fence.Verification
}

// Option configures a Fence.
type Option func(*Fence)

// WithTable names the fence table (default DefaultTable).
func WithTable(name string) Option { return func(f *Fence) { f.table = name } }

// WithTxOptions sets the transactions' options, e.g. the isolation level
// (default: the server's, normally REPEATABLE READ).
func WithTxOptions(o *sql.TxOptions) Option { return func(f *Fence) { f.opts = o } }

// WithVerification makes the fence confirm each new token with the lock
// service before it raises a mark, as package fence's Verification says:
// asked before the transaction, confirmed under the row lock (Verify,
// Verified.Check). v says which lock key guards each resource (Key, or
// BindOnFirstUse) and bounds each question (Timeout); a v that binds
// nothing (fence.Verification.Validate) refuses every token with
// fence.ErrUnbound.
func WithVerification(v *fence.Verification) Option { return func(f *Fence) { f.verify = v } }

// New returns a Fence on db (a go-sql-driver/mysql pool). The table must
// exist (CreateTable).
func New(db *sql.DB, opts ...Option) *Fence {
	f := &Fence{db: db, table: DefaultTable}
	for _, o := range opts {
		o(f)
	}
	return f
}

var (
	_ fence.Fence   = (*Fence)(nil)
	_ fence.RWFence = (*Fence)(nil)
)

// Table is the fence table's name.
func (f *Fence) Table() string { return f.table }

// Do checks token for resource in a new transaction, runs fn in it and
// commits, following fence.Fence's rule: a refused token rolls back and fn
// does not run; an admitted token's mark is committed even if fn fails,
// in which case fn's writes are rolled back (to a savepoint taken after
// the check) and Do returns fn's error unchanged. A failed commit returns
// its error, and then neither the mark nor fn's writes are kept (unless
// the connection died during COMMIT, when nobody can say). A verifying
// fence asks the lock service before it begins (Verify), and starts again
// from there when the mark moved in between (fence.ErrReverify, at most
// fence.MaxReverify times). Do does not retry deadlocks: IsRetryable
// tells them.
func (f *Fence) Do(ctx context.Context, resource string, token uint64, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return f.do(ctx, resource, token, true, fn)
}

// DoRead is Do for a read/write lock's reader (CheckRead's rule).
func (f *Fence) DoRead(ctx context.Context, resource string, token uint64, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return f.do(ctx, resource, token, false, fn)
}

func (f *Fence) do(ctx context.Context, resource string, token uint64, write bool, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := checkToken(token); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The lock service is asked before the transaction begins: nobody
		// waits for it behind the fence row's lock (fence.Verification).
		p := &Verified{table: f.table, resource: resource, token: token, write: write}
		if f.verify != nil {
			var err error
			if p, err = f.ask(ctx, resource, token, write); err != nil {
				return err
			}
		}
		err := f.once(ctx, p, fn)
		if !errors.Is(err, fence.ErrReverify) || attempt == fence.MaxReverify {
			return err
		}
	}
}

// once is one transaction of do: p checked in it, then fn.
func (f *Fence) once(ctx context.Context, p *Verified, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := f.db.BeginTx(ctx, f.opts)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mysqlfence: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := p.Check(ctx, tx); err != nil {
		if ctx.Err() != nil && !isRefusal(err) {
			return ctx.Err()
		}
		return err
	}
	var fnErr error
	if fn != nil {
		// One round trip buys fence.Fence's rule: the mark outlives a
		// failed effect. Committing releases the savepoint.
		if _, err := tx.ExecContext(ctx, "SAVEPOINT mysqlfence_effect"); err != nil {
			return fmt.Errorf("mysqlfence: savepoint: %w", err)
		}
		if fnErr = fn(ctx, tx); fnErr != nil {
			if _, err := tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT mysqlfence_effect"); err != nil {
				return errors.Join(fnErr, fmt.Errorf("mysqlfence: rollback to savepoint: %w", err))
			}
		}
	}
	// A ctx cancelled by now has rolled the transaction back (database/sql
	// does so for the ctx BeginTx had): Commit fails, mark and all.
	if err := tx.Commit(); err != nil {
		committed = true
		return errors.Join(fnErr, fmt.Errorf("mysqlfence: commit: %w", err))
	}
	committed = true
	return fnErr
}

type txKey struct{}

// Admit implements fence.Fence: Do for effects that take only a context.
// The effect finds the transaction with Tx(ctx) and must write through it.
func (f *Fence) Admit(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error {
	return f.Do(ctx, resource, token, withTx(effect))
}

// AdmitWrite is Admit (fence.RWFence).
func (f *Fence) AdmitWrite(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error {
	return f.Admit(ctx, resource, token, effect)
}

// AdmitRead is Admit for a read/write lock's reader (fence.RWFence,
// CheckRead's rule).
func (f *Fence) AdmitRead(ctx context.Context, resource string, token uint64, effect func(ctx context.Context) error) error {
	return f.DoRead(ctx, resource, token, withTx(effect))
}

func withTx(effect func(ctx context.Context) error) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		if effect == nil {
			return nil
		}
		return effect(context.WithValue(ctx, txKey{}, tx))
	}
}

// Tx is the transaction Admit runs an effect in (nil outside one).
func Tx(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(txKey{}).(*sql.Tx)
	return tx
}
