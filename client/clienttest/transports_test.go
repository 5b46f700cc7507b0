package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/internal/callcodec"
	"github.com/fencelock/fencelock/internal/framing"
)

// sendFunc sends one acquire to s by one transport and describes what
// came back: "STATUS holder token" for a grant, "STATUS code" for an
// error, "cut" when the connection ended without an answer, "gave up"
// when ctx ended first.
type sendFunc func(ctx context.Context, t *testing.T, s *clienttest.Server, q api.AcquireRequest) string

var transports = []struct {
	via  clienttest.Transport
	send sendFunc
}{
	{clienttest.HTTP, sendHTTP},
	{clienttest.Framed, sendFramed},
	{clienttest.Call, sendCall},
}

func describeAnswer(status int, body []byte) string {
	if status == http.StatusOK {
		var l api.Lease
		if err := json.Unmarshal(body, &l); err != nil {
			return fmt.Sprintf("%d unreadable %q", status, body)
		}
		return fmt.Sprintf("%d %s %d", status, l.Holder, l.Token)
	}
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil {
		return fmt.Sprintf("%d unreadable %q", status, body)
	}
	if e.Leader != "" {
		return fmt.Sprintf("%d %s %s", status, e.Code, e.Leader)
	}
	return fmt.Sprintf("%d %s", status, e.Code)
}

func describeErr(ctx context.Context) string {
	if ctx.Err() != nil {
		return "gave up"
	}
	return "cut"
}

func sendHTTP(ctx context.Context, t *testing.T, s *clienttest.Server, q api.AcquireRequest) string {
	body, _ := json.Marshal(q)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+api.PathAcquire, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", api.ContentType)
	// A connection of its own: net/http would send a request again on
	// a fresh one when a reused one is cut, hiding the fault.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return describeErr(ctx)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return describeErr(ctx)
	}
	return describeAnswer(resp.StatusCode, buf.Bytes())
}

// dial opens a framed connection to s that knows which calls s takes in
// binary.
func dial(t *testing.T, s *clienttest.Server) *framing.Conn {
	t.Helper()
	fc, err := framing.Dial(context.Background(), s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	<-fc.CallsKnown()
	return fc
}

func sendFramed(ctx context.Context, t *testing.T, s *clienttest.Server, q api.AcquireRequest) string {
	fc := dial(t, s)
	defer fc.Close()
	body, _ := json.Marshal(q)
	status, answer, err := fc.RoundTrip(ctx, http.MethodPost, api.PathAcquire, body)
	if err != nil {
		return describeErr(ctx)
	}
	return describeAnswer(status, answer)
}

func sendCall(ctx context.Context, t *testing.T, s *clienttest.Server, q api.AcquireRequest) string {
	fc := dial(t, s)
	defer fc.Close()
	if !fc.Calls(api.PathAcquire) {
		t.Fatal("the server does not take acquire as a binary call")
	}
	status, answer, err := fc.RoundTrip(ctx, framing.MethodCall, api.PathAcquire, callcodec.AppendAcquire(nil, q))
	if err != nil {
		return describeErr(ctx)
	}
	if status == http.StatusOK {
		l, err := callcodec.Lease(answer)
		if err != nil {
			return fmt.Sprintf("%d unreadable binary %q", status, answer)
		}
		answer, _ = json.Marshal(l)
	}
	return describeAnswer(status, answer)
}

// Every fault means the same on every transport: the same answer, or the
// same cut, and the same record of what reached the server and what it
// served.
func TestFaultsAreAlikeOnEveryTransport(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.via.String(), func(t *testing.T) {
			clk := newFakeClock()
			s := clienttest.NewServer(clk)
			defer s.Close()
			ctx := context.Background()
			req := func(key, id string) api.AcquireRequest {
				return api.AcquireRequest{Key: key, Holder: "h", TTLMs: 60000, RequestID: id}
			}
			var got []string
			note := func(name, outcome string) { got = append(got, name+": "+outcome) }

			note("served", tr.send(ctx, t, s, req("served", "r1")))

			s.Fail("acquire", api.CodeNotHeld)
			note("injected code", tr.send(ctx, t, s, req("code", "r2")))

			s.Fail("acquire", "drop")
			note("drop", tr.send(ctx, t, s, req("drop", "r3")))

			s.Fail("acquire", "reset")
			note("reset", tr.send(ctx, t, s, req("reset", "r4")))

			s.Fail("acquire", "hang")
			hctx, cancel := context.WithCancel(ctx)
			hung := make(chan string, 1)
			before := s.Count("acquire")
			go func() { hung <- tr.send(hctx, t, s, req("hang", "r5")) }()
			waitUntil(func() bool { return s.Count("acquire") > before })
			cancel()
			note("hang", <-hung)
			s.Fail("acquire", "")

			leader := "10.0.0.9:7470"
			s.NotLeader(&leader)
			note("not leader", tr.send(ctx, t, s, req("not-leader", "r6")))
			s.NotLeader(nil)

			s.Delay("acquire", 5*time.Second)
			armed := clk.Scheduled()
			delayed := make(chan string, 1)
			go func() { delayed <- tr.send(ctx, t, s, req("delay", "r7")) }()
			waitUntil(func() bool { return clk.Scheduled() > armed })
			clk.Advance(5 * time.Second)
			note("delay", <-delayed)
			s.Delay("acquire", 0)

			want := []string{
				"served: 200 h 1",
				"injected code: 409 not_held",
				"drop: cut",
				"reset: cut",
				"hang: gave up",
				"not leader: 503 not_leader 10.0.0.9:7470",
				"delay: 200 h 3",
			}
			if !slices.Equal(got, want) {
				t.Errorf("outcomes:\n  got  %q\n  want %q", got, want)
			}
			for key, served := range map[string]bool{"served": true, "code": false, "drop": false, "reset": true,
				"hang": false, "not-leader": false, "delay": true} {
				if _, _, ok := s.Holder(key); ok != served {
					t.Errorf("%s: served %v, want %v", key, ok, served)
				}
			}
			if ids, want := s.RequestIDs("acquire"), []string{"r1", "r4", "r7"}; !slices.Equal(ids, want) {
				t.Errorf("RequestIDs = %v, want %v (the requests passed to the server)", ids, want)
			}
			for _, other := range transports {
				n, want := s.CountVia("acquire", other.via), 0
				if other.via == tr.via {
					want = 7
				}
				if n != want {
					t.Errorf("CountVia(acquire, %s) = %d, want %d", other.via, n, want)
				}
			}
			if n := s.Count("acquire"); n != 7 {
				t.Errorf("Count(acquire) = %d, want 7", n)
			}
		})
	}
}

// A client reaches the double as it reaches a real node: frames and
// binary calls by default, HTTP alone when told so.
func TestClientsUseTheTransportTheyChose(t *testing.T) {
	s := clienttest.NewServer(newFakeClock())
	defer s.Close()
	ctx := context.Background()
	check := func(c *client.Client) {
		t.Helper()
		if _, err := c.Check(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}

	hc, err := client.New([]string{s.Addr}, client.WithFramed(false))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	for range 3 {
		check(hc)
	}
	if n := s.CountVia("check", clienttest.HTTP); n != 3 {
		t.Errorf("an HTTP-only client: %d of 3 checks came by HTTP", n)
	}

	fc, err := client.New([]string{s.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	// Until the server has said which calls it takes in binary (right
	// after the preface), a framed connection sends every call as JSON.
	check(fc)
	waitUntil(func() bool {
		check(fc)
		return s.CountVia("check", clienttest.Call) > 0
	})
	if s.CountVia("check", clienttest.Call) == 0 {
		t.Error("a framed client never made a binary call")
	}
	if n := s.CountVia("check", clienttest.HTTP); n != 3 {
		t.Errorf("a framed client used HTTP: %d checks by HTTP, want the other client's 3", n)
	}
	if n := s.CountVia("check", clienttest.HTTP) + s.CountVia("check", clienttest.Framed) + s.CountVia("check", clienttest.Call); n != s.Count("check") {
		t.Errorf("the counts by transport add up to %d, Count says %d", n, s.Count("check"))
	}
}
