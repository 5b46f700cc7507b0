package framing

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// upper answers binary calls to /v1/acquire with the body upper-cased.
type upper struct{ froms []CallConn }

func (u *upper) CallPaths() []string { return []string{"/v1/acquire"} }

func (u *upper) ServeCall(ctx context.Context, from *CallConn, path string, body []byte) (int, []byte) {
	u.froms = append(u.froms, *from)
	out := make([]byte, len(body))
	for i, b := range body {
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		out[i] = b
	}
	return http.StatusOK, out
}

// learnt waits until c has the server's answer about binary calls.
func learnt(t *testing.T, c *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-c.CallsKnown():
	case <-ctx.Done():
		t.Fatal("the connection never heard which calls its server takes in binary")
	}
}

func TestBinaryCallsGoWhereTheServerListsThem(t *testing.T) {
	u := &upper{}
	f := serve(t, echo, &Server{Calls: u})
	c := f.dial()
	learnt(t, c)
	if !c.Calls("/v1/acquire") || c.Calls("/v1/renew") {
		t.Fatalf("calls: acquire %v, renew %v; want only acquire", c.Calls("/v1/acquire"), c.Calls("/v1/renew"))
	}
	if err := c.Authorize("Bearer s3"); err != nil {
		t.Fatal(err)
	}
	status, body, err := c.RoundTrip(context.Background(), MethodCall, "/v1/acquire", []byte("key"))
	if err != nil || status != 200 || string(body) != "KEY" {
		t.Fatalf("binary call: %d %q %v", status, body, err)
	}
	if len(u.froms) != 1 || u.froms[0].Credential != "Bearer s3" || u.froms[0].Remote == "" {
		t.Fatalf("the handler saw %+v", u.froms)
	}
	// A path it does not list is refused, and the connection goes on;
	// JSON requests still reach the HTTP handler.
	if status, _, err := c.RoundTrip(context.Background(), MethodCall, "/v1/renew", []byte("x")); err != nil || status != 404 {
		t.Fatalf("binary call on an unlisted path: %d %v", status, err)
	}
	if status, body, err := c.RoundTrip(context.Background(), http.MethodPost, "/v1/acquire", []byte("j")); err != nil || status != 200 || string(body) != "POST /v1/acquire  j" {
		t.Fatalf("JSON after binary: %d %q %v", status, body, err)
	}
	if n := f.fs.Stats().BinaryCalls; n != 1 {
		t.Fatalf("BinaryCalls %d, want 1 (the refused one is not answered by the handler)", n)
	}
}

// A server without a CallHandler, as an older one, answers the question
// as an unknown path would be: the client sends it no binary call.
func TestNoBinaryCallsFromAServerWithoutThem(t *testing.T) {
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	f := serve(t, notFound, nil)
	c := f.dial()
	learnt(t, c)
	if c.Calls("/v1/acquire") {
		t.Fatal("a server without binary calls was taken to have them")
	}
	if status, _, err := c.RoundTrip(context.Background(), MethodCall, "/v1/acquire", []byte("x")); err != nil || status != 404 {
		t.Fatalf("a binary call sent anyway: %d %v, want a 404 and the connection kept", status, err)
	}
	if status, _, err := c.RoundTrip(context.Background(), http.MethodGet, "/v1/lock", nil); err != nil || status != 404 {
		t.Fatalf("after it: %d %v", status, err)
	}
}
