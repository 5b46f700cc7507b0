package pgfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/fencelock/fencelock/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func createDB(ctx context.Context, admin, stmt string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, stmt)
	return err
}

// newPool is a pool on a fresh database with the fence table and a data
// table the effects write to.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := pgtest.DB(t, createDB)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgfence.CreateTable(ctx, pool, pgfence.DefaultTable); err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`)
	return pool
}

func mustExec(t testing.TB, q pgfence.Querier, stmt string, args ...any) {
	t.Helper()
	if _, err := q.Exec(context.Background(), stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func stored(t testing.TB, q pgfence.Querier, resource string) (token int64, ok bool) {
	t.Helper()
	err := q.QueryRow(context.Background(), `SELECT token FROM fence WHERE resource = $1`, resource).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return token, true
}

func value(t testing.TB, q pgfence.Querier, resource string) string {
	t.Helper()
	var v string
	err := q.QueryRow(context.Background(), `SELECT value FROM data WHERE resource = $1`, resource).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func write(resource, v string, token uint64) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := pgfence.Tx(ctx).Exec(ctx,
			`INSERT INTO data VALUES ($1, $2, $3) ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`,
			resource, v, int64(token))
		return err
	}
}

var errEffect = errors.New("effect failed")

// Every outcome of Admit, in order on one resource, at both isolation levels.
func TestAdmitOutcomes(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			pool := newPool(t)
			f := pgfence.New(pool, pgfence.WithTxOptions(pgx.TxOptions{IsoLevel: iso}))
			steps := []struct {
				name      string
				token     uint64
				failing   bool  // the effect returns errEffect after writing
				wantErr   error // nil, errEffect, ErrStaleToken, ErrMissingToken
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
				v := fmt.Sprintf("v%d", s.token)
				err := f.Admit(context.Background(), "acct", s.token, func(ctx context.Context) error {
					ran = true
					if err := write("acct", v, s.token)(ctx); err != nil {
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
				mark, ok := stored(t, pool, "acct")
				if mark != s.wantMark || ok != (s.wantMark != 0) {
					t.Fatalf("%s: mark %d (row %v), want %d", s.name, mark, ok, s.wantMark)
				}
				if got := value(t, pool, "acct"); got != s.wantValue {
					t.Fatalf("%s: value %q, want %q", s.name, got, s.wantValue)
				}
			}
		})
	}
}

func TestStaleErrorNamesBothTokens(t *testing.T) {
	pool := newPool(t)
	f := pgfence.New(pool)
	ctx := context.Background()
	if err := f.Admit(ctx, "orders", 34, nil); err != nil {
		t.Fatal(err)
	}
	err := f.Admit(ctx, "orders", 33, func(context.Context) error { t.Fatal("effect ran"); return nil })
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Token != 33 || se.Highest != 34 || se.Resource != "orders" {
		t.Fatalf("err %#v", err)
	}
	if !strings.Contains(err.Error(), "33") || !strings.Contains(err.Error(), "34") {
		t.Fatalf("message does not name both tokens: %v", err)
	}
}

func TestTokenAboveBigintIsRefused(t *testing.T) {
	pool := newPool(t)
	err := pgfence.New(pool).Admit(context.Background(), "r", 1<<63, nil)
	if err == nil || !strings.Contains(err.Error(), "bigint") {
		t.Fatalf("err %v", err)
	}
	if _, ok := stored(t, pool, "r"); ok {
		t.Fatal("a row was stored")
	}
}

func TestCanceledContextDoesNotAdmit(t *testing.T) {
	pool := newPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := pgfence.New(pool).Admit(ctx, "r", 3, func(context.Context) error { t.Fatal("effect ran"); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if _, ok := stored(t, pool, "r"); ok {
		t.Fatal("a row was stored")
	}
}

// Check inside the caller's own transaction, pgx and database/sql.
func TestCheckInCallersTransaction(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgfence.Check(ctx, tx, "fence", "k", 8); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		token   uint64
		wantErr error
	}{{7, fence.ErrStaleToken}, {0, fence.ErrMissingToken}, {8, nil}, {11, nil}} {
		stx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = pgfence.CheckSQL(ctx, stx, "fence", "k", c.token)
		if (c.wantErr == nil) != (err == nil) || !errors.Is(err, c.wantErr) {
			t.Fatalf("database/sql token %d: err %v, want %v", c.token, err, c.wantErr)
		}
		if c.wantErr == fence.ErrStaleToken && !strings.Contains(err.Error(), "token 8") {
			t.Fatalf("stale error does not name the stored token: %v", err)
		}
		if err := stx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if mark, _ := stored(t, pool, "k"); mark != 11 {
		t.Fatalf("mark %d, want 11", mark)
	}
}

func TestCreateTableIsIdempotent(t *testing.T) {
	pool := newPool(t) // created once already
	ctx := context.Background()
	if err := pgfence.New(pool).Admit(ctx, "x", 4, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := pgfence.CreateTable(ctx, pool, pgfence.DefaultTable); err != nil {
			t.Fatal(err)
		}
	}
	if mark, _ := stored(t, pool, "x"); mark != 4 {
		t.Fatalf("mark %d after CreateTable again, want 4 (kept)", mark)
	}
	// A schema-qualified, quoted name works too.
	mustExec(t, pool, `CREATE SCHEMA app`)
	for range 2 {
		if err := pgfence.CreateTable(ctx, pool, "app.Fence Marks"); err != nil {
			t.Fatal(err)
		}
	}
	f := pgfence.New(pool, pgfence.WithTable("app.Fence Marks"))
	if err := f.Admit(ctx, "x", 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(ctx, "x", 1, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("err %v", err)
	}
}

// A table with its own token column: every outcome of Row.Update.
func TestRowUpdateOutcomes(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	mustExec(t, pool, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, fence_token bigint NOT NULL DEFAULT 0)`)
	mustExec(t, pool, `INSERT INTO accounts (id, balance) VALUES (1, 100)`)
	r := pgfence.Row{Table: "accounts", Key: "id", TokenColumn: "fence_token"}
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	steps := []struct {
		name        string
		sqlPath     bool
		key         int64
		token       uint64
		balance     int64
		wantErr     error
		wantBalance int64
		wantToken   int64
	}{
		{"first token on a row is admitted", false, 1, 5, 150, nil, 150, 5},
		{"equal token is admitted", true, 1, 5, 160, nil, 160, 5},
		{"higher token is admitted", false, 1, 9, 200, nil, 200, 9},
		{"lower token is refused", false, 1, 8, 999, fence.ErrStaleToken, 200, 9},
		{"lower token is refused (database/sql)", true, 1, 8, 999, fence.ErrStaleToken, 200, 9},
		{"missing row is not called stale", false, 2, 10, 1, pgfence.ErrNoRow, 200, 9},
		{"missing row (database/sql)", true, 2, 10, 1, pgfence.ErrNoRow, 200, 9},
		{"no token is refused", false, 1, 0, 1, fence.ErrMissingToken, 200, 9},
	}
	for _, s := range steps {
		if s.sqlPath {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = r.UpdateSQLTx(ctx, tx, s.key, s.token, "balance = $1", s.balance)
			if cerr := tx.Commit(); cerr != nil {
				t.Fatal(cerr)
			}
			checkErr(t, s.name, err, s.wantErr)
		} else {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = r.Update(ctx, tx, s.key, s.token, "balance = $1", s.balance)
			if cerr := tx.Commit(ctx); cerr != nil {
				t.Fatal(cerr)
			}
			checkErr(t, s.name, err, s.wantErr)
		}
		var bal, tok int64
		if err := pool.QueryRow(ctx, `SELECT balance, fence_token FROM accounts WHERE id = 1`).Scan(&bal, &tok); err != nil {
			t.Fatal(err)
		}
		if bal != s.wantBalance || tok != s.wantToken {
			t.Fatalf("%s: balance %d token %d, want %d %d", s.name, bal, tok, s.wantBalance, s.wantToken)
		}
	}
	err = r.Update(ctx, pool, int64(1), 3, "balance = $1", 0)
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Token != 3 || se.Highest != 9 {
		t.Fatalf("stale error %v does not name both tokens", err)
	}
}

func checkErr(t *testing.T, name string, err, want error) {
	t.Helper()
	if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
		t.Fatalf("%s: err %v, want %v", name, err, want)
	}
}

// Many goroutines race transactions with different tokens at one resource.
// Each admitted transaction appends (nextval, token) to a ledger after the
// fence check; the fence row's lock is held from the check to the commit, so
// the sequence orders the admitted transactions as they committed. The
// tokens must be non-decreasing in that order, the final value must be the
// highest admitted token's, and no refused token's write may be visible.
// Serialization failures (SERIALIZABLE) are counted as refusals: they
// admitted nothing.
func TestConcurrentTokensAtOneResource(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			pool := newPool(t)
			ctx := context.Background()
			mustExec(t, pool, `CREATE SEQUENCE commit_seq`)
			mustExec(t, pool, `CREATE TABLE ledger (seq bigint PRIMARY KEY, token bigint NOT NULL)`)
			f := pgfence.New(pool, pgfence.WithTxOptions(pgx.TxOptions{IsoLevel: iso}))
			const workers, perWorker = 8, 25
			var (
				mu                              sync.Mutex
				admitted, stale, serialFailures int
				written                         = map[int64]bool{}
			)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWorker {
						// Workers climb together, three tokens apart at
						// most: equal, higher and lower ones race.
						token := uint64(1 + 2*i + w%3)
						err := f.Admit(ctx, "hot", token, func(ctx context.Context) error {
							tx := pgfence.Tx(ctx)
							if _, err := tx.Exec(ctx, `INSERT INTO ledger VALUES (nextval('commit_seq'), $1)`, int64(token)); err != nil {
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
						case pgfence.IsSerializationFailure(err):
							serialFailures++
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
			rows, err := pool.Query(ctx, `SELECT token FROM ledger ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
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
			if mark, _ := stored(t, pool, "hot"); mark != last {
				t.Fatalf("mark %d, last committed token %d", mark, last)
			}
			if v := value(t, pool, "hot"); v != fmt.Sprint(last) {
				t.Fatalf("value %q, want the last admitted token's %d", v, last)
			}
			t.Logf("%s: %d admitted, %d stale, %d serialization failures (cluster start %v)",
				iso, admitted, stale, serialFailures, pgtest.StartTime().Round(time.Millisecond))
		})
	}
}
