package mysqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencetest"
	"github.com/fencelock/fencelock/fence/mysqlfence"
	"github.com/fencelock/fencelock/internal/mysqltest"
	"github.com/go-sql-driver/mysql"
)

func TestMain(m *testing.M) {
	// The driver logs every connection the kill tests break; the tests
	// say what they expect of them.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	mysqltest.Main(m)
}

// The two isolation levels the fence is held to: InnoDB's default and the
// one most applications switch to.
var levels = []struct {
	name string
	opts *sql.TxOptions
}{
	{"repeatable-read", &sql.TxOptions{Isolation: sql.LevelRepeatableRead}},
	{"read-committed", &sql.TxOptions{Isolation: sql.LevelReadCommitted}},
}

// newDB is a pool on a fresh database with the fence table and a data
// table the effects write to.
func newDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", mysqltest.DB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := mysqlfence.CreateTable(context.Background(), db, mysqlfence.DefaultTable); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `CREATE TABLE data (resource VARBINARY(200) PRIMARY KEY, value VARCHAR(200) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`)
	return db
}

func mustExec(t testing.TB, q mysqlfence.Querier, stmt string, args ...any) {
	t.Helper()
	if _, err := q.ExecContext(context.Background(), stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func stored(t testing.TB, q mysqlfence.Querier, resource string) (token int64, ok bool) {
	t.Helper()
	err := q.QueryRowContext(context.Background(), `SELECT token FROM fence WHERE resource = ?`, resource).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return token, true
}

func value(t testing.TB, q mysqlfence.Querier, resource string) string {
	t.Helper()
	var v string
	err := q.QueryRowContext(context.Background(), `SELECT value FROM data WHERE resource = ?`, resource).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func upsert(ctx context.Context, tx mysqlfence.Querier, resource, v string, token uint64) error {
	_, err := tx.ExecContext(ctx,
		`INSERT INTO data VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value), token = VALUES(token)`,
		resource, v, int64(token))
	return err
}

func write(resource, v string, token uint64) func(ctx context.Context) error {
	return func(ctx context.Context) error { return upsert(ctx, mysqlfence.Tx(ctx), resource, v, token) }
}

var errEffect = errors.New("effect failed")

// Every outcome of Admit, in order on one resource, at both isolation levels.
func TestAdmitOutcomes(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			db := newDB(t)
			f := mysqlfence.New(db, mysqlfence.WithTxOptions(l.opts))
			steps := []struct {
				name      string
				token     uint64
				failing   bool
				wantErr   error
				wantMark  int64 // 0: no row
				wantValue string
			}{
				{"no token is refused, nothing stored", 0, false, fence.ErrMissingToken, 0, "<none>"},
				{"new resource is admitted", 5, false, nil, 5, "v5"},
				{"equal token is admitted (many writes per grant)", 5, false, nil, 5, "v5"},
				{"higher token is admitted and raises the mark", 9, false, nil, 9, "v9"},
				{"lower token is refused, its write never happens", 7, false, fence.ErrStaleToken, 9, "v9"},
				{"no token is still refused", 0, false, fence.ErrMissingToken, 9, "v9"},
				{"failing effect: its write rolls back, the mark stays raised", 12, true, errEffect, 12, "v9"},
				{"then the token below the failed one is stale", 10, false, fence.ErrStaleToken, 12, "v9"},
			}
			for _, s := range steps {
				ran := false
				err := f.Admit(context.Background(), "acct", s.token, func(ctx context.Context) error {
					ran = true
					if err := write("acct", fmt.Sprintf("v%d", s.token), s.token)(ctx); err != nil {
						return err
					}
					if s.failing {
						return errEffect
					}
					return nil
				})
				if (s.wantErr == nil) != (err == nil) || (s.wantErr != nil && !errors.Is(err, s.wantErr)) {
					t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
				}
				refused := errors.Is(s.wantErr, fence.ErrStaleToken) || errors.Is(s.wantErr, fence.ErrMissingToken)
				if ran == refused {
					t.Fatalf("%s: effect ran=%v", s.name, ran)
				}
				mark, ok := stored(t, db, "acct")
				if mark != s.wantMark || ok != (s.wantMark != 0) {
					t.Fatalf("%s: mark %d (row %v), want %d", s.name, mark, ok, s.wantMark)
				}
				if got := value(t, db, "acct"); got != s.wantValue {
					t.Fatalf("%s: value %q, want %q", s.name, got, s.wantValue)
				}
			}
		})
	}
}

func TestStaleErrorNamesBothTokens(t *testing.T) {
	db := newDB(t)
	f := mysqlfence.New(db)
	ctx := context.Background()
	if err := f.Admit(ctx, "orders", 34, nil); err != nil {
		t.Fatal(err)
	}
	err := f.Admit(ctx, "orders", 33, func(context.Context) error { t.Fatal("effect ran"); return nil })
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Token != 33 || se.Highest != 34 || se.Resource != "orders" {
		t.Fatalf("err %#v", err)
	}
}

func TestTokenAboveBigintIsRefused(t *testing.T) {
	db := newDB(t)
	for _, tok := range []uint64{1 << 63, 1<<64 - 1} {
		err := mysqlfence.New(db).Admit(context.Background(), "r", tok, nil)
		if err == nil || !strings.Contains(err.Error(), "BIGINT") {
			t.Fatalf("token %d: err %v", tok, err)
		}
	}
	if _, ok := stored(t, db, "r"); ok {
		t.Fatal("a row was stored")
	}
}

func TestCanceledContextDoesNotAdmit(t *testing.T) {
	db := newDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := mysqlfence.New(db).Admit(ctx, "r", 3, func(context.Context) error { t.Fatal("effect ran"); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if _, ok := stored(t, db, "r"); ok {
		t.Fatal("a row was stored")
	}
}

// Resources are bytes: names that a case-insensitive or PAD SPACE
// collation would take for one are separate marks.
func TestResourcesAreBytes(t *testing.T) {
	db := newDB(t)
	f := mysqlfence.New(db)
	ctx := context.Background()
	if err := f.Admit(ctx, "acct", 50, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"ACCT", "acct ", "Acct", "acct\x00"} {
		if err := f.Admit(ctx, r, 1, nil); err != nil {
			t.Fatalf("%q: %v", r, err)
		}
	}
	if err := f.Admit(ctx, "acct", 49, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("acct's own mark: %v", err)
	}
}

// Check inside the caller's own transaction.
func TestCheckInCallersTransaction(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	for _, c := range []struct {
		token   uint64
		wantErr error
	}{{8, nil}, {7, fence.ErrStaleToken}, {0, fence.ErrMissingToken}, {8, nil}, {11, nil}} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = mysqlfence.Check(ctx, tx, "fence", "k", c.token)
		if (c.wantErr == nil) != (err == nil) || !errors.Is(err, c.wantErr) {
			t.Fatalf("token %d: err %v, want %v", c.token, err, c.wantErr)
		}
		if err != nil {
			tx.Rollback()
			continue
		}
		if err := upsert(ctx, tx, "k", fmt.Sprint(c.token), c.token); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if mark, _ := stored(t, db, "k"); mark != 11 || value(t, db, "k") != "11" {
		t.Fatalf("mark %d value %q, want 11", mark, value(t, db, "k"))
	}
}

// CreateTable twice keeps the marks; a hand-made (resource, token) table
// is upgraded in place; a database-qualified, quoted name works; MarksSQL
// lists the marks.
func TestCreateTableIsIdempotentAndUpgrades(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	if err := mysqlfence.New(db).Admit(ctx, "x", 4, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := mysqlfence.CreateTable(ctx, db, mysqlfence.DefaultTable); err != nil {
			t.Fatal(err)
		}
	}
	if mark, _ := stored(t, db, "x"); mark != 4 {
		t.Fatalf("mark %d after CreateTable again, want 4", mark)
	}

	mustExec(t, db, "CREATE TABLE `Old Marks` (resource VARBINARY(1024) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB")
	mustExec(t, db, "INSERT INTO `Old Marks` VALUES ('acct', 7)")
	old := mysqlfence.New(db, mysqlfence.WithTable("Old Marks"))
	if err := old.Admit(ctx, "acct", 8, nil); err == nil || !strings.Contains(err.Error(), "run mysqlfence.CreateTable") {
		t.Fatalf("on a table without the new columns: %v", err)
	}
	var schema string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	qualified := schema + ".Old Marks"
	for range 2 {
		if err := mysqlfence.CreateTable(ctx, db, qualified); err != nil {
			t.Fatal(err)
		}
	}
	old = mysqlfence.New(db, mysqlfence.WithTable(qualified))
	if err := old.Admit(ctx, "acct", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("the old mark is kept: %v", err)
	}
	if err := old.AdmitRead(ctx, "acct", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("a read below an old row's mark (no write_token: its mark was a write's): %v", err)
	}
	if err := old.AdmitRead(ctx, "acct", 7, nil); err != nil {
		t.Fatalf("a read at an old row's mark: %v", err)
	}
	if err := old.Admit(ctx, "acct", 8, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, mysqlfence.MarksSQL(qualified))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n int
	for rows.Next() {
		var res string
		var tok, last int64
		var key, at sql.NullString
		if err := rows.Scan(&res, &tok, &last, &key, &at); err != nil {
			t.Fatal(err)
		}
		if res != "acct" || tok != 8 || last != 8 || key.Valid || !at.Valid {
			t.Fatalf("mark %s %d %d %v %v", res, tok, last, key, at)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d marks", n)
	}
}

// A table with its own token column: every outcome of Row.Update,
// including the update that changes nothing (MySQL counts 0 rows).
func TestRowUpdateOutcomes(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	mustExec(t, db, `CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB`)
	mustExec(t, db, `INSERT INTO accounts (id, balance) VALUES (1, 100)`)
	r := mysqlfence.Row{Table: "accounts", Key: "id", TokenColumn: "fence_token"}
	for _, s := range []struct {
		name        string
		key         int64
		token       uint64
		balance     int64
		wantErr     error
		wantBalance int64
		wantToken   int64
	}{
		{"first token on a row is admitted", 1, 5, 150, nil, 150, 5},
		{"equal token, same value: admitted though 0 rows changed", 1, 5, 150, nil, 150, 5},
		{"equal token is admitted", 1, 5, 160, nil, 160, 5},
		{"higher token is admitted", 1, 9, 200, nil, 200, 9},
		{"lower token is refused", 1, 8, 999, fence.ErrStaleToken, 200, 9},
		{"missing row is not called stale", 2, 10, 1, mysqlfence.ErrNoRow, 200, 9},
		{"no token is refused", 1, 0, 1, fence.ErrMissingToken, 200, 9},
	} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = r.Update(ctx, tx, s.key, s.token, "balance = ?", s.balance)
		if cerr := tx.Commit(); cerr != nil {
			t.Fatal(cerr)
		}
		if (s.wantErr == nil) != (err == nil) || (s.wantErr != nil && !errors.Is(err, s.wantErr)) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
		var bal, tok int64
		if err := db.QueryRow(`SELECT balance, fence_token FROM accounts WHERE id = 1`).Scan(&bal, &tok); err != nil {
			t.Fatal(err)
		}
		if bal != s.wantBalance || tok != s.wantToken {
			t.Fatalf("%s: balance %d token %d, want %d %d", s.name, bal, tok, s.wantBalance, s.wantToken)
		}
	}
}

// Many goroutines race transactions with different tokens at one
// resource, and first writers race on fresh resources. Each admitted
// transaction appends (an auto-increment id, token) to a ledger after the
// check; the fence row's lock is held from the check to the commit, so
// the ids order the admitted transactions as they committed: the tokens
// must not go down in that order, the value must be the last one's, and
// no refused write may be visible. Nothing may deadlock: the fence takes
// the row before it reads it, so first writers of a new resource queue
// rather than collide on gap locks.
func TestConcurrentTokensAtOneResource(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			db := newDB(t)
			db.SetMaxOpenConns(16)
			ctx := context.Background()
			mustExec(t, db, `CREATE TABLE ledger (seq BIGINT AUTO_INCREMENT PRIMARY KEY, resource VARBINARY(64) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`)
			f := mysqlfence.New(db, mysqlfence.WithTxOptions(l.opts))
			const workers, perWorker = 8, 20
			var (
				mu              sync.Mutex
				admitted, stale int
				written         = map[int64]bool{}
			)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWorker {
						token := uint64(1 + 2*i + w%3)
						// Every fourth round all workers also race to be
						// the first writer of a resource nobody wrote.
						if i%4 == 0 {
							if err := f.Admit(ctx, fmt.Sprintf("fresh-%d", i), token, nil); err != nil && !errors.Is(err, fence.ErrStaleToken) {
								t.Errorf("fresh-%d token %d: %v", i, token, err)
								return
							}
						}
						err := f.Admit(ctx, "hot", token, func(ctx context.Context) error {
							if _, err := mysqlfence.Tx(ctx).ExecContext(ctx, `INSERT INTO ledger (resource, token) VALUES ('hot', ?)`, int64(token)); err != nil {
								return err
							}
							return write("hot", fmt.Sprint(token), token)(ctx)
						})
						mu.Lock()
						switch {
						case err == nil:
							admitted++
							written[int64(token)] = true
						case errors.Is(err, fence.ErrStaleToken):
							stale++
						default:
							mu.Unlock()
							t.Errorf("token %d: %v", token, err)
							return
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			rows, err := db.Query(`SELECT token FROM ledger ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			var tokens []int64
			for rows.Next() {
				var tok int64
				if err := rows.Scan(&tok); err != nil {
					t.Fatal(err)
				}
				tokens = append(tokens, tok)
			}
			rows.Close()
			if len(tokens) != admitted {
				t.Fatalf("ledger has %d rows, %d admissions succeeded", len(tokens), admitted)
			}
			for i := 1; i < len(tokens); i++ {
				if tokens[i] < tokens[i-1] {
					t.Fatalf("commit order %d: token %d after %d", i, tokens[i], tokens[i-1])
				}
			}
			for _, tok := range tokens {
				if !written[tok] {
					t.Fatalf("ledger holds token %d that no successful Admit wrote", tok)
				}
			}
			last := tokens[len(tokens)-1]
			if mark, _ := stored(t, db, "hot"); mark != last || value(t, db, "hot") != fmt.Sprint(last) {
				t.Fatalf("mark %d value %q, want the last committed token %d", mark, value(t, db, "hot"), last)
			}
			t.Logf("%s: %d admitted, %d stale (server start %v)", l.name, admitted, stale, mysqltest.StartTime().Round(time.Millisecond))
		})
	}
}

// The read/write rule of fence.RWFence (fencetest), with a new pool (new
// sessions) after every step, at both isolation levels.
func TestReadWriteRule(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			dsn := mysqltest.DB(t)
			open := func() *sql.DB {
				db, err := sql.Open("mysql", dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			}
			db := open()
			if err := mysqlfence.CreateTable(context.Background(), db, mysqlfence.DefaultTable); err != nil {
				t.Fatal(err)
			}
			fencetest.CheckRW(t, mysqlfence.New(db, mysqlfence.WithTxOptions(l.opts)), func() fence.RWFence {
				return mysqlfence.New(open(), mysqlfence.WithTxOptions(l.opts))
			})
			var tok, last int64
			if err := db.QueryRow(`SELECT token, write_token FROM fence WHERE resource = 'doc'`).Scan(&tok, &last); err != nil || tok != 8 || last != 7 {
				t.Fatalf("row %d %d %v", tok, last, err)
			}
		})
	}
}
