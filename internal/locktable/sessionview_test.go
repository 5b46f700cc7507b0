package locktable

import "testing"

func TestLeaseSession(t *testing.T) {
	tb := New()
	s, err := tb.OpenSession("svc", 0, 10*Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.AcquireWith("a", "svc", 0, Second, Options{Session: s.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Acquire("b", "svc", 0, 10*Second); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		now  Time
		id   uint64
		held bool
	}{
		{"a", 0, s.ID, true},
		{"a", Time(5 * Second), s.ID, true}, // the session's expiry, not the grant's ttl
		{"b", 0, 0, false},                  // held, not under a session
		{"c", 0, 0, false},                  // not held
		{"a", Time(10 * Second), 0, false},  // the session has expired
	} {
		if id, ok := tb.LeaseSession(c.key, c.now); id != c.id || ok != c.held {
			t.Errorf("LeaseSession(%s, %v) = %d, %v; want %d, %v", c.key, c.now, id, ok, c.id, c.held)
		}
	}
}
