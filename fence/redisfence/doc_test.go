package redisfence_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/fence/redisfence"
	"github.com/fencelock/fencelock/internal/redistest"
)

// TestDocExample is the example of docs/FENCING.md's Redis section, run
// against the test server: B (token 33) writes, then A wakes with 32.
func TestDocExample(t *testing.T) {
	var out bytes.Buffer
	addr := redistest.Addr(t)
	c0 := redisfence.NewClient(addr)
	defer c0.Close()
	for _, k := range []string{"fencelock:mark:{acct:42}", "{acct:42}:balance", "{acct:42}:log"} {
		c0.Do(context.Background(), "DEL", k)
	}

	// From here to the output, as in docs/FENCING.md.
	ctx := context.Background()
	c := redisfence.NewClient(addr) // e.g. "127.0.0.1:6379"
	defer c.Close()
	f := redisfence.New(c)
	deposit := func(token uint64, who string, amount int64) error {
		_, err := f.Write(ctx, "acct:42", token,
			redisfence.IncrBy("{acct:42}:balance", amount),
			redisfence.XAdd("{acct:42}:log", "*", "by", who, "amount", fmt.Sprint(amount)))
		return err
	}
	fmt.Fprintln(&out, "B:", deposit(33, "B", 200)) // the new holder
	fmt.Fprintln(&out, "A:", deposit(32, "A", 100)) // the zombie, woken with its old token
	got, _ := f.Read(ctx, "acct:42", 33, redisfence.Get("{acct:42}:balance"), redisfence.Cmd("XLEN", "{acct:42}:log"))
	fmt.Fprintln(&out, "balance, log entries:", got)
	_, err := f.Write(ctx, "acct:42", 33, redisfence.Set("balance:42", "0"))
	fmt.Fprintln(&out, "untagged key:", err)

	want := `B: <nil>
A: fence: stale fencing token 32 for "acct:42": token 33 has already been honoured
balance, log entries: [200 1]
untagged key: redisfence: key not in the mark's hash slot: op 0's key "balance:42" is in slot 489, the mark of "acct:42" (fencelock:mark:{acct:42}) in 14381: put {acct:42} in the key
`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
