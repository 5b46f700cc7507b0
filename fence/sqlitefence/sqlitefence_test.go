package sqlitefence

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fence"
)

var ctx = context.Background()

// setup opens a database file with the fence table and a ledger the
// effects write to.
func setup(t testing.TB, path string) (*sql.DB, *Fence) {
	t.Helper()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f, err := New(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS ledger (seq INTEGER PRIMARY KEY AUTOINCREMENT, account TEXT, token INTEGER, note TEXT)"); err != nil {
		t.Fatal(err)
	}
	return db, f
}

// write is an effect: one ledger row, in the fence's transaction.
func write(account string, token uint64, note string) func(context.Context, Tx) error {
	return func(ctx context.Context, tx Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (account, token, note) VALUES (?, ?, ?)", account, int64(token), note)
		return err
	}
}

func notes(t testing.TB, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT note FROM ledger ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return strings.Join(out, ",")
}

func TestSQLiteFenceRules(t *testing.T) {
	db, f := setup(t, filepath.Join(t.TempDir(), "f.db"))
	for _, s := range []struct {
		name    string
		token   uint64
		wantErr error
		highest uint64
		notes   string
	}{
		{"no token is refused", 0, fence.ErrMissingToken, 0, ""},
		{"new resource: first token is admitted", 5, nil, 5, "5"},
		{"equal token is admitted", 5, nil, 5, "5,5"},
		{"lower token is refused, its write rolled back", 4, fence.ErrStaleToken, 5, "5,5"},
		{"higher token is admitted", 9, nil, 9, "5,5,9"},
		{"the old token is now stale", 5, fence.ErrStaleToken, 9, "5,5,9"},
	} {
		err := f.AdmitTx(ctx, "acct", s.token, write("acct", s.token, strconv.FormatUint(s.token, 10)))
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
		if h, err := f.Highest(ctx, "acct"); err != nil || h != s.highest {
			t.Fatalf("%s: highest %d (%v), want %d", s.name, h, err, s.highest)
		}
		if got := notes(t, db); got != s.notes {
			t.Fatalf("%s: ledger %q, want %q", s.name, got, s.notes)
		}
	}
	var se *fence.StaleTokenError
	if err := f.Admit(ctx, "acct", 3, nil); !errors.As(err, &se) || se.Token != 3 || se.Highest != 9 || se.Resource != "acct" {
		t.Fatalf("err %v: want a StaleTokenError naming 3 and 9", err)
	}
}

func TestSQLiteFailedEffectIsRolledBackButTheMarkKept(t *testing.T) {
	db, f := setup(t, filepath.Join(t.TempDir(), "f.db"))
	boom := errors.New("boom")
	err := f.AdmitTx(ctx, "acct", 7, func(ctx context.Context, tx Tx) error {
		if err := write("acct", 7, "half")(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want the effect's", err)
	}
	if got := notes(t, db); got != "" {
		t.Fatalf("the failed effect's write is visible: %q", got)
	}
	if err := f.Admit(ctx, "acct", 6, nil); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("token 6 after 7 was admitted: %v", err)
	}
}

func TestSQLiteRestartKeepsTheMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	db, f := setup(t, path)
	if err := f.AdmitTx(ctx, "acct", 12, write("acct", 12, "B")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, f = setup(t, path)
	if err := f.AdmitTx(ctx, "acct", 11, write("acct", 11, "A-stale")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("reopened database admitted a stale token: %v", err)
	}
	if got := notes(t, db); got != "B" {
		t.Fatalf("ledger %q, want B", got)
	}
}

// Many goroutines race different tokens at one resource. In commit order
// (the ledger's seq) the accepted tokens never decrease, every refusal
// names a higher mark, and no refused write is visible. Half of them go
// through a second *sql.DB on the same file, as another process would.
func TestSQLiteConcurrentAdmits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	db, f := setup(t, path)
	_, f2 := setup(t, path)
	fences := []*Fence{f, f2}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := map[uint64]int{}
	for i := 0; i < 48; i++ {
		wg.Add(1)
		go func(tok uint64) {
			defer wg.Done()
			err := fences[tok%2].AdmitTx(ctx, "acct", tok, write("acct", tok, strconv.FormatUint(tok, 10)))
			var se *fence.StaleTokenError
			switch {
			case err == nil:
				mu.Lock()
				admitted[tok]++
				mu.Unlock()
			case errors.As(err, &se):
				if se.Highest <= tok {
					t.Errorf("token %d refused with highest %d", tok, se.Highest)
				}
			default:
				t.Errorf("token %d: %v", tok, err)
			}
		}(uint64(i%16 + 1))
	}
	wg.Wait()
	rows, err := db.Query("SELECT token FROM ledger ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last int64
	seen := map[uint64]int{}
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if tok < last {
			t.Fatalf("token %d committed after %d", tok, last)
		}
		last = tok
		seen[uint64(tok)]++
	}
	for tok, n := range seen {
		if admitted[tok] != n {
			t.Fatalf("token %d: %d rows, %d admits", tok, n, admitted[tok])
		}
	}
	if h, _ := f.Highest(ctx, "acct"); h != uint64(last) {
		t.Fatalf("mark %d, last committed %d", h, last)
	}
}

// Behind fence.Middleware the handler writes through the transaction in
// its request's context.
func TestSQLiteFenceBehindMiddleware(t *testing.T) {
	db, f := setup(t, filepath.Join(t.TempDir(), "f.db"))
	h := fence.Middleware(f, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := TxFrom(r.Context())
		if !ok {
			http.Error(w, "no transaction", 500)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO ledger (account, note) VALUES (?, ?)", r.URL.Path, string(b)); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.WriteHeader(204)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, s := range []struct {
		token, body string
		status      int
	}{{"4", "B", 204}, {"3", "A-stale", 409}, {"", "nobody", 409}, {"4", "B2", 204}} {
		req, _ := http.NewRequest("PUT", srv.URL+"/acct", strings.NewReader(s.body))
		if s.token != "" {
			req.Header.Set(fence.Header, s.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != s.status {
			t.Fatalf("%s %s: %d, want %d", s.token, s.body, resp.StatusCode, s.status)
		}
	}
	if got := notes(t, db); got != "B,B2" {
		t.Fatalf("ledger %q", got)
	}
}

func TestSQLiteTableName(t *testing.T) {
	if _, err := New(nil, "x; DROP TABLE y"); err == nil {
		t.Fatal("an unsafe table name was accepted")
	}
}
