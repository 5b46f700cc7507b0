// Command fencedstore is a tiny key-value store behind fencelock's fence: a
// resource you can point `fencelock lock` at to watch a stale writer being
// refused.
//
//	fencedstore serve [--listen ADDR] [--state DIR | --no-fence]
//	fencedstore put URL VALUE [--token N]
//	fencedstore get URL
//
// serve keeps values in memory under /v/NAME. A PUT must carry the
// Fencing-Token header; the fence (package fence) refuses a missing token,
// or one lower than the highest it has honoured for that NAME, with 409 and
// a JSON reason. --no-fence serves the same store without the fence, to show
// what goes wrong without it. The fence keeps its marks in memory unless
// --state DIR is given: then they live in DIR (package fence/filefence,
// fsynced before a write is answered), and a restarted store still refuses
// a token older than one it honoured before the restart. The values
// themselves stay in memory either way. GET /v/NAME answers
// {"name","value","token"}.
//
// put sends VALUE with the token from --token or $FENCELOCK_TOKEN (which
// `fencelock lock` sets), so a whole session is:
//
//	fencedstore serve --listen 127.0.0.1:7480 &
//	fencelock lock demo -- fencedstore put http://127.0.0.1:7480/v/demo hello
//	fencedstore get http://127.0.0.1:7480/v/demo
//
// Exit status of put and get: 0 done; 1 refused by the fence (put) or no
// such value (get); 2 bad usage; 3 the store cannot be reached.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Usage:
  fencedstore serve [--listen ADDR] [--state DIR | --no-fence]
  fencedstore put URL VALUE [--token N]    (token default: $FENCELOCK_TOKEN)
  fencedstore get URL
`

// exitError carries an exit status to main, the only caller of os.Exit.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		code := 1
		var xe *exitError
		if errors.As(err, &xe) {
			code = xe.code
		}
		fmt.Fprintf(os.Stderr, "fencedstore: %v\n", err)
		os.Exit(code)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &exitError{2, fmt.Errorf("no command (run 'fencedstore help')")}
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout)
	case "put":
		return runPut(ctx, args[1:], stdout)
	case "get":
		return runGet(ctx, args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return &exitError{2, fmt.Errorf("unknown command %q (run 'fencedstore help')", args[0])}
}
