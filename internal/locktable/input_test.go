package locktable

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The scenarios of the seed exercise and of the wait queue are data-driven:
// testdata/*.txt, run by TestScenarios (scenario_test.go).

const sec = Second

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
