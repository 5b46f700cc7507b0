package clienttest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/clock"
)

// newFakeClock is a clock.Fake standing at an arbitrary fixed instant.
func newFakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

func post(t *testing.T, s *clienttest.Server, path, body string) (*http.Response, error) {
	t.Helper()
	resp, err := http.Post(s.URL+path, api.ContentType, strings.NewReader(body))
	if err == nil {
		t.Cleanup(func() { resp.Body.Close() })
	}
	return resp, err
}

// A reset route commits the request and loses its answer; the same request
// sent again is answered with the grant it already got, by the server's
// own rules (request ids), not a new token.
func TestResetCommitsAndLosesTheAnswer(t *testing.T) {
	clk := newFakeClock()
	s := clienttest.NewServer(clk)
	defer s.Close()
	s.Fail("acquire", "reset")
	body := `{"key":"k","holder":"a","ttl_ms":10000,"request_id":"r1"}`
	if resp, err := post(t, s, api.PathAcquire, body); err == nil {
		t.Fatalf("reset route answered %s", resp.Status)
	}
	if h, tok, ok := s.Holder("k"); !ok || h != "a" || tok != 1 {
		t.Fatalf("after the reset: Holder = %q %d %v, want a 1 true (the request was served)", h, tok, ok)
	}
	s.Fail("acquire", "")
	resp, err := post(t, s, api.PathAcquire, body)
	if err != nil {
		t.Fatal(err)
	}
	var l api.Lease
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusOK || l.Token != 1 {
		t.Fatalf("re-sent: %s %+v %v, want 200 token 1", resp.Status, l, err)
	}
	if got := s.RequestIDs("acquire"); len(got) != 2 || got[0] != "r1" || got[1] != "r1" {
		t.Fatalf("RequestIDs = %v", got)
	}
}

// A delayed route is served only once the test clock has moved by the
// delay.
func TestDelayHoldsARequestOnTheClock(t *testing.T) {
	clk := newFakeClock()
	s := clienttest.NewServer(clk)
	defer s.Close()
	s.Delay("acquire", 5*time.Second)
	before := clk.Scheduled()
	type answer struct {
		resp *http.Response
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Post(s.URL+api.PathAcquire, api.ContentType,
			strings.NewReader(`{"key":"k","holder":"a","ttl_ms":10000}`))
		done <- answer{resp, err}
	}()
	deadline := time.Now().Add(time.Minute)
	for clk.Scheduled() == before {
		if time.Now().After(deadline) {
			t.Fatal("the delayed request never armed its delay")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Advance(5*time.Second - time.Nanosecond)
	if _, _, ok := s.Holder("k"); ok {
		t.Fatal("served before its delay was up")
	}
	select {
	case a := <-done:
		t.Fatalf("answered before its delay was up: %v %v", a.resp, a.err)
	default:
	}
	clk.Advance(time.Nanosecond)
	a := <-done
	if a.err != nil || a.resp.StatusCode != http.StatusOK {
		t.Fatalf("after the delay: %v %v", a.resp, a.err)
	}
	a.resp.Body.Close()
	if h, _, ok := s.Holder("k"); !ok || h != "a" {
		t.Fatalf("Holder = %q %v after the delayed acquire", h, ok)
	}
}
