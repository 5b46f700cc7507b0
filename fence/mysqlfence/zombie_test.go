package mysqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/fencelock/fencelock/internal/mysqltest"
)

// The zombie against a real MariaDB, under faults. Each round, holder A
// has token 2r+1 and stalls (its lease runs out); B gets 2r+2 and writes;
// A wakes and writes with its old token, which must be refused, leaving
// B's value. The rounds cycle through where A stalls and what fails:
//
//   - plain: A stalls before its transaction;
//   - backend kill: A stalls inside its transaction, holding the fence
//     row; B's write waits for it; A's connection is killed (KILL), its
//     transaction rolls back, B's goes through;
//   - server kill: A stalls inside its transaction; mariadbd is killed
//     (SIGKILL) and restarted; B writes on the restarted server;
//   - server kill after B: B commits, mariadbd is killed and restarted,
//     and A finds B's mark there (InnoDB's redo log, flushed at commit).
//
// After each round the mark is B's token and the value B's; A's write
// never lands. The same at both isolation levels.
func TestZombieUnderKills(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			dsn := mysqltest.DB(t)
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			if err := mysqlfence.CreateTable(ctx, db, mysqlfence.DefaultTable); err != nil {
				t.Fatal(err)
			}
			mustExec(t, db, `CREATE TABLE data (resource VARBINARY(200) PRIMARY KEY, value VARCHAR(200) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`)
			f := mysqlfence.New(db, mysqlfence.WithTxOptions(l.opts))
			faults := []string{"plain", "backend kill", "server kill", "server kill after B"}
			var writes, refused, kills int
			for r := range 3 * len(faults) {
				fault := faults[r%len(faults)]
				tokA, tokB := uint64(2*r+1), uint64(2*r+2)
				wA := func(ctx context.Context, tx *sql.Tx) error {
					return upsert(ctx, tx, "acct", fmt.Sprintf("A %d", tokA), tokA)
				}
				wB := func(ctx context.Context, tx *sql.Tx) error {
					return upsert(ctx, tx, "acct", fmt.Sprintf("B %d", tokB), tokB)
				}

				if fault == "backend kill" || fault == "server kill" {
					// A is current when it checks, then stalls holding the row.
					stalled, wake, doneA := make(chan int64), make(chan struct{}), make(chan error, 1)
					go func() {
						doneA <- f.Do(ctx, "acct", tokA, func(ctx context.Context, tx *sql.Tx) error {
							var id int64
							if err := tx.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
								return err
							}
							stalled <- id
							<-wake
							return wA(ctx, tx)
						})
					}()
					id := <-stalled
					if fault == "backend kill" {
						doneB := make(chan error, 1)
						go func() { doneB <- f.Do(ctx, "acct", tokB, wB) }()
						mustExec(t, db, fmt.Sprintf("KILL %d", id))
						close(wake)
						if err := <-doneA; err == nil {
							t.Fatalf("round %d: A's transaction committed after its connection was killed", r)
						}
						if err := <-doneB; err != nil {
							t.Fatalf("round %d: B: %v", r, err)
						}
					} else {
						mysqltest.Kill(t)
						close(wake)
						if err := <-doneA; err == nil {
							t.Fatalf("round %d: A's transaction committed on a killed server", r)
						}
						mysqltest.Restart(t)
						kills++
						if err := retry(func() error { return f.Do(ctx, "acct", tokB, wB) }); err != nil {
							t.Fatalf("round %d: B after the restart: %v", r, err)
						}
					}
				} else {
					if err := retry(func() error { return f.Do(ctx, "acct", tokB, wB) }); err != nil {
						t.Fatalf("round %d: B: %v", r, err)
					}
					if fault == "server kill after B" {
						mysqltest.Kill(t)
						mysqltest.Restart(t)
						kills++
					}
				}
				writes++

				// A wakes and writes with its old token.
				err := retry(func() error { return f.Do(ctx, "acct", tokA, wA) })
				var se *fence.StaleTokenError
				if !errors.As(err, &se) || se.Token != tokA || se.Highest != tokB {
					t.Fatalf("round %d (%s): the zombie's write: %v, want stale %d < %d", r, fault, err, tokA, tokB)
				}
				refused++
				if m, _ := stored(t, db, "acct"); m != int64(tokB) || value(t, db, "acct") != fmt.Sprintf("B %d", tokB) {
					t.Fatalf("round %d (%s): mark %d value %q, want B's %d", r, fault, m, value(t, db, "acct"), tokB)
				}
			}
			t.Logf("%s: %d rounds, %d newer writes landed, %d zombie writes refused, %d server kills", l.name, len(faults)*3, writes, refused, kills)
		})
	}
}

// retry runs fn until it succeeds or is refused by the fence, for as long
// as the server is coming back: a connection the pool kept from before a
// restart fails once.
func retry(fn func() error) error {
	var err error
	for range 20 {
		err = fn()
		if err == nil || errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrMissingToken) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // waiting for the pool's reconnect, not deciding correctness
	}
	return err
}
