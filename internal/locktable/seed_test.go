package locktable

import (
	"errors"
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
