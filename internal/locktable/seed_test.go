package locktable

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const sec = Second

func at(s float64) Time { return Time(s * float64(Second)) }

// TestSeedExample is the exercise's worked example, call for call.
func TestSeedExample(t *testing.T) {
	tb := New()
	t1, err := tb.Acquire("resource", "client-a", at(0), 10*sec)
	if err != nil || t1.Token != 1 {
		t.Fatalf("a at 0: %+v, %v; want token 1", t1, err)
	}
	if _, err := tb.Acquire("resource", "client-b", at(5), 10*sec); !errors.Is(err, ErrHeld) {
		t.Fatalf("b at 5: err %v, want ErrHeld", err)
	}
	t2, err := tb.Acquire("resource", "client-b", at(10), 10*sec)
	if err != nil || t2.Token != 2 {
		t.Fatalf("b at 10: %+v, %v; want token 2", t2, err)
	}
	if tb.IsValidToken("resource", t1.Token) {
		t.Error("t1 still valid after b took over")
	}
	if !tb.IsValidToken("resource", t2.Token) {
		t.Error("t2 not valid")
	}
}

// call is one step of a scripted scenario. Exactly one of the op fields
// is used; want is the printed result in the seed's terms.
type call struct {
	op     string // acquire, release, valid, check, extend
	key    string
	holder string
	now    float64
	ttl    float64
	token  uint64
	want   string
}

func (c call) run(tb *Table) string {
	switch c.op {
	case "acquire":
		l, err := tb.Acquire(c.key, c.holder, at(c.now), Duration(c.ttl*float64(Second)))
		switch {
		case errors.Is(err, ErrHeld):
			return "None"
		case err != nil:
			return "error"
		}
		return itoa(l.Token)
	case "release":
		ok, err := tb.Release(c.key, c.holder, at(c.now))
		if err != nil {
			return "error"
		}
		return pyBool(ok)
	case "valid":
		return pyBool(tb.IsValidToken(c.key, c.token))
	case "check":
		return pyBool(tb.Check(c.key, c.token, at(c.now)))
	case "extend":
		l, err := tb.Extend(c.key, c.holder, c.token, at(c.now), Duration(c.ttl*float64(Second)))
		if err != nil {
			return "refused"
		}
		return itoa(l.Token)
	}
	return "bad op"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// TestSeedConstraints pins every rule of the exercise, one scenario each.
func TestSeedConstraints(t *testing.T) {
	scenarios := []struct {
		name  string
		calls []call
	}{
		{"the first token ever issued is 1", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 1, want: "1"},
		}},
		{"a different holder is blocked while the lease is alive", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "b", now: 9.999, ttl: 10, want: "None"},
		}},
		{"alive means now < expiry: at expiry the lease is gone", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "b", now: 10, ttl: 10, want: "2"},
		}},
		{"the same holder may always re-acquire, and gets a new token", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "a", now: 3, ttl: 10, want: "2"},
			{op: "acquire", key: "k", holder: "b", now: 12, ttl: 10, want: "None"},
		}},
		{"a renewal invalidates the holder's own previous token", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "a", now: 1, ttl: 10, want: "2"},
			{op: "valid", key: "k", token: 1, want: "False"},
			{op: "valid", key: "k", token: 2, want: "True"},
		}},
		{"a refusal changes nothing", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "b", now: 1, ttl: 10, want: "None"},
			{op: "valid", key: "k", token: 1, want: "True"},
			{op: "acquire", key: "other", holder: "b", now: 1, ttl: 10, want: "2"},
		}},
		{"tokens are global across keys", []call{
			{op: "acquire", key: "x", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "y", holder: "a", now: 0, ttl: 10, want: "2"},
			{op: "acquire", key: "x", holder: "b", now: 20, ttl: 10, want: "3"},
			{op: "valid", key: "y", token: 3, want: "False"},
		}},
		{"tokens are never reused after a release", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "release", key: "k", holder: "a", now: 1, want: "True"},
			{op: "acquire", key: "k", holder: "a", now: 2, ttl: 10, want: "2"},
		}},
		{"release by the live holder releases", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "release", key: "k", holder: "a", now: 5, want: "True"},
			{op: "valid", key: "k", token: 1, want: "False"},
			{op: "acquire", key: "k", holder: "b", now: 5, ttl: 10, want: "2"},
		}},
		{"release by another holder is a no-op", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "release", key: "k", holder: "b", now: 5, want: "False"},
			{op: "valid", key: "k", token: 1, want: "True"},
			{op: "acquire", key: "k", holder: "b", now: 6, ttl: 10, want: "None"},
		}},
		{"release of an expired lease is a no-op, even before anyone reclaims it", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "release", key: "k", holder: "a", now: 10, want: "False"},
			{op: "valid", key: "k", token: 1, want: "True"},
		}},
		{"the old holder cannot release a lease someone else reclaimed", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "b", now: 11, ttl: 10, want: "2"},
			{op: "release", key: "k", holder: "a", now: 12, want: "False"},
			{op: "valid", key: "k", token: 2, want: "True"},
			{op: "acquire", key: "k", holder: "c", now: 13, ttl: 10, want: "None"},
		}},
		{"release of a key nobody holds is a no-op", []call{
			{op: "release", key: "k", holder: "a", now: 0, want: "False"},
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 1, want: "1"},
		}},
		{"is_valid_token is false for an unlocked key", []call{
			{op: "valid", key: "nothing", token: 1, want: "False"},
		}},
		{"is_valid_token takes no time; check does", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "valid", key: "k", token: 1, want: "True"},
			{op: "check", key: "k", token: 1, now: 9.9, want: "True"},
			{op: "check", key: "k", token: 1, now: 10, want: "False"},
		}},
		{"extend keeps the token and moves the expiry", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "extend", key: "k", holder: "a", token: 1, now: 8, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "b", now: 15, ttl: 10, want: "None"},
			{op: "check", key: "k", token: 1, now: 17.9, want: "True"},
			{op: "acquire", key: "k", holder: "b", now: 18, ttl: 10, want: "2"},
		}},
		{"extend refuses a stale token, another holder, or an expired lease", []call{
			{op: "acquire", key: "k", holder: "a", now: 0, ttl: 10, want: "1"},
			{op: "acquire", key: "k", holder: "a", now: 1, ttl: 10, want: "2"},
			{op: "extend", key: "k", holder: "a", token: 1, now: 2, ttl: 10, want: "refused"},
			{op: "extend", key: "k", holder: "b", token: 2, now: 2, ttl: 10, want: "refused"},
			{op: "extend", key: "k", holder: "a", token: 2, now: 11, ttl: 10, want: "refused"},
			{op: "extend", key: "none", holder: "a", token: 2, now: 1, ttl: 10, want: "refused"},
		}},
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			tb := New()
			for i, c := range s.calls {
				if got := c.run(tb); got != c.want {
					t.Fatalf("call %d (%s %s %s at %v): got %s, want %s", i, c.op, c.key, c.holder, c.now, got, c.want)
				}
			}
		})
	}
}

// TestBadInputChangesNothing feeds every call bad arguments and checks for
// the typed error and an unchanged encoding.
func TestBadInputChangesNothing(t *testing.T) {
	tb := New()
	if _, err := tb.Acquire("k", "a", 0, 10*sec); err != nil {
		t.Fatal(err)
	}
	before, _ := tb.MarshalBinary()
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name  string
		err   error
		field string
		call  func() error
	}{
		{"empty key", ErrInvalidKey, "key", func() error { _, err := tb.Acquire("", "a", 1, sec); return err }},
		{"oversized key", ErrInvalidKey, "key", func() error { _, err := tb.Acquire(long(MaxKeyLen+1), "a", 1, sec); return err }},
		{"empty holder", ErrInvalidHolder, "holder", func() error { _, err := tb.Acquire("k", "", 1, sec); return err }},
		{"oversized holder", ErrInvalidHolder, "holder", func() error { _, err := tb.Acquire("k", long(MaxHolderLen+1), 1, sec); return err }},
		{"zero ttl", ErrInvalidTTL, "ttl", func() error { _, err := tb.Acquire("k", "a", 1, 0); return err }},
		{"negative ttl", ErrInvalidTTL, "ttl", func() error { _, err := tb.Acquire("k", "a", 1, -sec); return err }},
		{"overflowing ttl", ErrInvalidTTL, "ttl", func() error { _, err := tb.Acquire("k", "a", maxTime-1, sec); return err }},
		{"extend zero ttl", ErrInvalidTTL, "ttl", func() error { _, err := tb.Extend("k", "a", 1, 1, 0); return err }},
		{"extend empty holder", ErrInvalidHolder, "holder", func() error { _, err := tb.Extend("k", "", 1, 1, sec); return err }},
		{"release empty key", ErrInvalidKey, "key", func() error { _, err := tb.Release("", "a", 1); return err }},
		{"release oversized holder", ErrInvalidHolder, "holder", func() error { _, err := tb.Release("k", long(MaxHolderLen+1), 1); return err }},
		{"wait negative ttl", ErrInvalidTTL, "ttl", func() error { _, _, err := tb.Wait("k", "b", 1, -1, NoDeadline); return err }},
		{"wait empty key", ErrInvalidKey, "key", func() error { _, _, err := tb.Wait("", "b", 1, sec, NoDeadline); return err }},
	}
	for _, c := range cases {
		err := c.call()
		var ie *InputError
		if !errors.Is(err, c.err) || !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%s: err %v, want %v on field %s", c.name, err, c.err, c.field)
		}
	}
	// Limits themselves are allowed.
	if _, err := tb.Acquire(long(MaxKeyLen), long(MaxHolderLen), 1, sec); err != nil {
		t.Fatalf("key and holder at the limit: %v", err)
	}
	if _, err := tb.Release(long(MaxKeyLen), long(MaxHolderLen), 1); err != nil {
		t.Fatal(err)
	}
	// That grant consumed token 2; everything else must be as before.
	tb2 := New()
	if err := tb2.UnmarshalBinary(before); err != nil {
		t.Fatal(err)
	}
	if _, err := tb2.Acquire(long(MaxKeyLen), long(MaxHolderLen), 1, sec); err != nil {
		t.Fatal(err)
	}
	_, _ = tb2.Release(long(MaxKeyLen), long(MaxHolderLen), 1)
	a, _ := tb.MarshalBinary()
	b, _ := tb2.MarshalBinary()
	if !bytes.Equal(a, b) {
		t.Fatal("bad input changed the table")
	}
}
