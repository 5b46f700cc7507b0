// Command pgledger is the page's zombie against a real PostgreSQL: a writer
// that takes a fencelock lock and sets an account's balance in PostgreSQL
// through the fence (package fence/pgfence), so a holder that was paused
// past its lease has its late write refused by the database itself.
//
//	pgledger init  --dsn DSN
//	pgledger write --dsn DSN --addr ADDR --account A --balance N
//	               [--ttl D] [--wait D] [--holder H] [--pause] [--no-fence]
//	pgledger show  --dsn DSN --account A
//
// init creates the fence table and the accounts table (idempotent). write
// acquires the lock "ledger/ACCOUNT" from the fencelock server at ADDR,
// prints "acquired token N", and sets the balance in one transaction that
// first passes the fence with the lease's token. --pause makes write read a
// line from stdin after it has checked that its lease is still held and
// before it writes (it says so on stdout first): the moment a GC pause or a
// SIGSTOP hits a real holder.
// --no-fence writes without the fence, to show what goes wrong without it.
// show prints "balance N writer W token T".
//
// Exit status: 0 written; 1 refused by the fence (stale token); 2 bad usage;
// 3 the lock or the database could not be had.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/pgfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AccountsDDL is the table the example writes (the fence table is
// pgfence.TableDDL).
const AccountsDDL = `CREATE TABLE IF NOT EXISTS accounts (
    account text   PRIMARY KEY,
    balance bigint NOT NULL,
    writer  text   NOT NULL,
    token   bigint NOT NULL
)`

const setBalance = `INSERT INTO accounts (account, balance, writer, token) VALUES ($1, $2, $3, $4)
ON CONFLICT (account) DO UPDATE SET balance = EXCLUDED.balance, writer = EXCLUDED.writer, token = EXCLUDED.token`

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout); err != nil {
		code := 1
		var xe *exitError
		if errors.As(err, &xe) {
			code = xe.code
		}
		fmt.Fprintf(os.Stderr, "pgledger: %v\n", err)
		os.Exit(code)
	}
}

// usage is what -h prints, and what bad usage points to.
const usage = `Usage: pgledger init  --dsn DSN
       pgledger write --dsn DSN --addr ADDR --account A --balance N
                      [--ttl D] [--wait D] [--holder H] [--pause] [--no-fence]
       pgledger show  --dsn DSN --account A

init creates the fence table and the accounts table; write takes the lock
"ledger/ACCOUNT" and sets the balance through the fence; show prints
"balance N writer W token T". 'pgledger COMMAND -h' lists its flags.

Exit status: 0 done; 1 refused by the fence (stale token); 2 bad usage;
3 the lock or the database could not be had.
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return &exitError{2, errors.New("want a command: init, write or show (pgledger -h for usage)")}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		_, err := io.WriteString(stdout, usage)
		return err
	case "init", "write", "show":
	default:
		return &exitError{2, fmt.Errorf("unknown command %q: want init, write or show (pgledger -h for usage)", args[0])}
	}
	fs := flag.NewFlagSet("pgledger "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dsn := fs.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN (default $DATABASE_URL)")
	addr := fs.String("addr", "127.0.0.1:7470", "fencelock server")
	account := fs.String("account", "alice", "account to write")
	balance := fs.Int64("balance", 0, "balance to set")
	ttl := fs.Duration("ttl", 10*time.Second, "lease TTL")
	wait := fs.Duration("wait", 30*time.Second, "wait for the lock up to D")
	holder := fs.String("holder", "", "holder name (default: the client's)")
	pause := fs.Bool("pause", false, "read a line from stdin between the lease check and the write")
	noFence := fs.Bool("no-fence", false, "write without the fence")
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: pgledger %s [flags]\n\nFlags:\n", args[0])
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	} else if err != nil {
		return &exitError{2, err}
	}
	if *dsn == "" {
		return &exitError{2, errors.New("--dsn is required")}
	}
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return &exitError{3, err}
	}
	defer pool.Close()

	switch args[0] {
	case "init":
		if err := pgfence.CreateTable(ctx, pool, pgfence.DefaultTable); err != nil {
			return &exitError{3, err}
		}
		if _, err := pool.Exec(ctx, AccountsDDL); err != nil {
			return &exitError{3, err}
		}
		return nil
	case "show":
		var bal, tok int64
		var w string
		err := pool.QueryRow(ctx, `SELECT balance, writer, token FROM accounts WHERE account = $1`, *account).Scan(&bal, &w, &tok)
		if err != nil {
			return &exitError{1, err}
		}
		fmt.Fprintf(stdout, "balance %d writer %s token %d\n", bal, w, tok)
		return nil
	}

	c, err := client.New([]string{*addr})
	if err != nil {
		return &exitError{2, err}
	}
	opts := []client.LeaseOption{client.WithTTL(*ttl), client.WithWait(*wait)}
	if *holder != "" {
		opts = append(opts, client.WithHolder(*holder))
	}
	key := "ledger/" + *account
	lease, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return &exitError{3, fmt.Errorf("lock %s: %w", key, err)}
	}
	defer lease.Release(context.Background())
	token := lease.Token()
	fmt.Fprintf(stdout, "acquired token %d\n", token)

	// The holder's own safety check: still ours? A real process can be
	// paused right after it, which is why the database checks too.
	if err := lease.Err(); err != nil {
		return &exitError{3, err}
	}
	if *pause {
		fmt.Fprintln(stdout, "lease checked, paused before the write (a line on stdin resumes)")
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
			return &exitError{2, fmt.Errorf("--pause: %v", err)}
		}
	}
	who := lease.Holder()
	effect := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, setBalance, *account, *balance, who, int64(token))
		return err
	}
	if *noFence {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return effect(ctx, tx) })
	} else {
		err = pgfence.New(pool).Do(ctx, key, token, effect)
	}
	if errors.Is(err, fence.ErrStaleToken) {
		return &exitError{1, err}
	}
	if err != nil {
		return &exitError{3, err}
	}
	fmt.Fprintf(stdout, "wrote balance %d with token %d\n", *balance, token)
	return nil
}
