package mysqlfence_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/fencelock/fencelock/internal/mysqltest"
)

// TestDocExample is the example of docs/FENCING.md's MySQL section, run
// against the test server: B (token 33) writes, then A wakes with 32.
func TestDocExample(t *testing.T) {
	var out bytes.Buffer
	dsn := mysqltest.DB(t)

	// From here to the output, as in docs/FENCING.md.
	ctx := context.Background()
	db, _ := sql.Open("mysql", dsn)
	defer db.Close()
	_ = mysqlfence.CreateTable(ctx, db, mysqlfence.DefaultTable)
	_, _ = db.ExecContext(ctx, `CREATE TABLE ledger (account VARCHAR(20), amount BIGINT, token BIGINT) ENGINE=InnoDB`)
	f := mysqlfence.New(db, mysqlfence.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelReadCommitted}))
	write := func(token uint64, amount int) error {
		return f.Do(ctx, "account/42", token, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO ledger VALUES ('42', ?, ?)`, amount, token)
			return err
		})
	}
	fmt.Fprintln(&out, "B:", write(33, 200)) // the new holder
	fmt.Fprintln(&out, "A:", write(32, 100)) // the zombie, woken with its old token
	var amount, token int64
	_ = db.QueryRowContext(ctx, `SELECT SUM(amount), MAX(token) FROM ledger`).Scan(&amount, &token)
	fmt.Fprintln(&out, "ledger:", amount, "by token", token)

	want := `B: <nil>
A: fence: stale fencing token 32 for "account/42": token 33 has already been honoured
ledger: 200 by token 33
`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
