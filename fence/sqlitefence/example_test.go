package sqlitefence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/sqlitefence"
)

// A ledger row written only by the current holder of the lock on the
// account: the token check and the insert commit together, or not at all.
func Example() {
	dir, _ := os.MkdirTemp("", "sqlitefence-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, _ := sqlitefence.Open(filepath.Join(dir, "ledger.db"))
	defer db.Close()
	f, _ := sqlitefence.New(db, "")
	_ = f.CreateTable(ctx)
	_, _ = db.Exec(`CREATE TABLE ledger (account TEXT, amount INTEGER, token INTEGER)`)

	pay := func(token uint64, amount int) error {
		return f.AdmitTx(ctx, "account/42", token, func(ctx context.Context, tx sqlitefence.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO ledger VALUES ('42', ?, ?)`, amount, int64(token))
			return err
		})
	}
	fmt.Println(pay(33, 100)) // B holds the lock with token 33
	err := pay(32, 999)       // A, paused past its lease, wakes with 32
	fmt.Println(errors.Is(err, fence.ErrStaleToken), err)

	var n, sum int
	_ = db.QueryRow(`SELECT count(*), sum(amount) FROM ledger`).Scan(&n, &sum)
	fmt.Println(n, sum)
	// Output:
	// <nil>
	// true fence: stale fencing token 32 for "account/42": token 33 has already been honoured
	// 1 100
}
