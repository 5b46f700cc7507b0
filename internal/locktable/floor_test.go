package locktable

import "testing"

func TestRaiseLastToken(t *testing.T) {
	tb := New()
	if !tb.RaiseLastToken(10) || tb.LastToken() != 10 {
		t.Fatalf("raise to 10: last %d", tb.LastToken())
	}
	if tb.RaiseLastToken(10) || tb.RaiseLastToken(3) || tb.LastToken() != 10 {
		t.Fatalf("equal or lower floor moved the counter: %d", tb.LastToken())
	}
	l, err := tb.Acquire("k", "h", 0, Second)
	if err != nil || l.Token != 11 {
		t.Fatalf("acquire after floor: %+v %v", l, err)
	}
}
