package redisfence_test

import (
	"strconv"
	"testing"

	"github.com/fencelock/fencelock/fence/redisfence"
)

// BenchmarkWrite is the fence's cost per write: a plain SET against the
// same SET through the fence's script (EVALSHA: read the mark, compare,
// run the op), with a token equal to the mark (a holder's every write
// after its first) and a token that raises it each time (one HSET and the
// TIME more in the script); then three ops (SET, INCRBY, XADD) plain,
// one command each, against the same three in one fenced script. One
// connection, sequential, over 127.0.0.1, against the test server with
// appendfsync always (every write is fsynced before its reply, fenced or
// not).
//
// The same again with appendfsync no (CONFIG SET, restored after), which
// leaves the commands' own cost: with every write fsynced, the disk's
// time swamps it on a shared machine.
func BenchmarkWrite(b *testing.B) {
	c, f, r := newFence(b)
	for _, fsync := range []string{"always", "no"} {
		if _, err := c.Do(ctx, "CONFIG", "SET", "appendfsync", fsync); err != nil {
			b.Fatal(err)
		}
		b.Run("appendfsync-"+fsync, func(b *testing.B) { benchWrite(b, c, f, r) })
	}
	if _, err := c.Do(ctx, "CONFIG", "SET", "appendfsync", "always"); err != nil {
		b.Fatal(err)
	}
}

func benchWrite(b *testing.B, c *redisfence.Client, f *redisfence.Fence, r string) {
	tag := "{" + r + "}"
	b.Run("plain-set", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := c.Do(ctx, "SET", tag+":v", strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced-set", func(b *testing.B) {
		m, err := f.Mark(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		tok := max(m.Token, 7) // the current holder's
		i := 0
		for b.Loop() {
			i++
			if _, err := f.Write(ctx, r, tok, redisfence.Set(tag+":v", strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced-set-raising", func(b *testing.B) {
		m, err := f.Mark(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		tok := m.Token
		for b.Loop() {
			tok++
			if _, err := f.Write(ctx, r, tok, redisfence.Set(tag+":v", strconv.FormatUint(tok, 10))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain-3-ops", func(b *testing.B) {
		for b.Loop() {
			for _, cmd := range [][]string{{"SET", tag + ":v", "x"}, {"INCRBY", tag + ":n", "1"}, {"XADD", tag + ":log", "MAXLEN", "~", "1000", "*", "op", "x"}} {
				if _, err := c.Do(ctx, cmd...); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("fenced-3-ops", func(b *testing.B) {
		m, err := f.Mark(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		tok := m.Token
		for b.Loop() {
			if _, err := f.Write(ctx, r, tok, redisfence.Set(tag+":v", "x"), redisfence.IncrBy(tag+":n", 1),
				redisfence.Cmd("XADD", tag+":log", "MAXLEN", "~", "1000", "*", "op", "x")); err != nil {
				b.Fatal(err)
			}
		}
	})
}
