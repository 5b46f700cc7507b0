package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/callcodec"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/service"
)

// hotCall is one call sent both ways: its path and typed request (a
// callcodec.CheckRequest for a check).
type hotCall struct {
	path string
	req  any
}

// viaJSON sends c through the HTTP handler, as JSON (or a check's query).
func viaJSON(t *testing.T, s *Server, c hotCall, cred string) (int, []byte) {
	t.Helper()
	var r *http.Request
	if q, ok := c.req.(callcodec.CheckRequest); ok {
		v := url.Values{api.QueryKey: {q.Key}, api.QueryToken: {strconv.FormatUint(q.Token, 10)}}
		r = httptest.NewRequest(http.MethodGet, c.path+"?"+v.Encode(), nil)
	} else {
		b, err := json.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		r = httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(string(b)))
		r.Header.Set("Content-Type", api.ContentType)
	}
	r.Host = "localhost" // not httptest's example.com, which the server refuses as another site's name
	if cred != "" {
		r.Header.Set(api.HeaderAuthorization, cred)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// viaBinary sends c as a binary call.
func viaBinary(t *testing.T, s *Server, c hotCall, cred string) (int, []byte) {
	t.Helper()
	body, ok := callcodec.AppendRequest(nil, c.req)
	if !ok {
		t.Fatalf("no binary call for %T", c.req)
	}
	return s.Calls().ServeCall(context.Background(), &framing.CallConn{Remote: "127.0.0.1:1", Credential: cred}, c.path, body)
}

// sameAnswer fails unless the JSON and binary answers to c say the same:
// the same status, the same JSON error, or the same typed answer.
func sameAnswer(t *testing.T, step int, c hotCall, js int, jb []byte, bs int, bb []byte) {
	t.Helper()
	if js != bs {
		t.Fatalf("step %d %s %+v: JSON answered %d %s, binary %d %q", step, c.path, c.req, js, jb, bs, bb)
	}
	if js != http.StatusOK {
		if string(jb) != string(bb) {
			t.Fatalf("step %d %s %+v: errors differ:\nJSON   %s\nbinary %s", step, c.path, c.req, jb, bb)
		}
		return
	}
	var fromJSON, fromBinary any
	var err error
	switch c.path {
	case api.PathAcquire, api.PathExtend:
		var l api.Lease
		err = json.Unmarshal(jb, &l)
		fromJSON = l
		fromBinary, _ = callcodec.Lease(bb)
		if _, berr := callcodec.Lease(bb); berr != nil {
			t.Fatalf("step %d: binary lease: %v", step, berr)
		}
	case api.PathRelease:
		var r api.ReleaseResponse
		err = json.Unmarshal(jb, &r)
		fromJSON = r
		fromBinary, _ = callcodec.Released(bb)
	case api.PathCheck:
		var r api.CheckResponse
		err = json.Unmarshal(jb, &r)
		fromJSON = r
		fromBinary, _ = callcodec.Checked(bb)
	}
	if err != nil {
		t.Fatalf("step %d: JSON answer %s: %v", step, jb, err)
	}
	if !reflect.DeepEqual(fromJSON, fromBinary) {
		t.Fatalf("step %d %s %+v: answers differ:\nJSON   %+v\nbinary %+v", step, c.path, c.req, fromJSON, fromBinary)
	}
}

// randomCall draws a hot call over a few keys and holders, valid or not,
// using tokens the run has seen so that extends and releases hit.
func randomCall(rng *rand.Rand, tokens []uint64) hotCall {
	keys := []string{"a", "b", "c", "", strings.Repeat("k", api.MaxKeyLen+1)}
	holders := []string{"h1", "h2", "h3", ""}
	ttls := []int64{10_000, 3_000, 0, api.MaxTTL.Milliseconds() + 1}
	pick := func(n int) int {
		// The first choices (valid) far more often than the last.
		if rng.IntN(10) < 8 {
			return rng.IntN(max(n-2, 1))
		}
		return rng.IntN(n)
	}
	key, holder, ttl := keys[pick(len(keys))], holders[pick(len(holders))], ttls[pick(len(ttls))]
	token := uint64(rng.IntN(5))
	if len(tokens) > 0 && rng.IntN(4) > 0 {
		token = tokens[rng.IntN(len(tokens))]
	}
	id := ""
	if rng.IntN(3) == 0 {
		id = fmt.Sprintf("r%d", rng.IntN(6)) // repeats: dedupe answers
	}
	switch rng.IntN(4) {
	case 0:
		q := api.AcquireRequest{Key: key, Holder: holder, TTLMs: ttl, RequestID: id}
		switch rng.IntN(8) {
		case 0:
			q.Permits = rng.IntN(4)
		case 1:
			q.Mode = []string{"read", "write", "neither"}[rng.IntN(3)]
		case 2:
			q.LockDelayMs = int64(rng.IntN(3)) * 1000
		}
		return hotCall{api.PathAcquire, q}
	case 1:
		return hotCall{api.PathExtend, api.ExtendRequest{Key: key, Holder: holder, Token: token, TTLMs: ttl, RequestID: id}}
	case 2:
		return hotCall{api.PathRelease, api.ReleaseRequest{Key: key, Holder: holder, Token: token, RequestID: id}}
	}
	return hotCall{api.PathCheck, callcodec.CheckRequest{Key: key, Token: token}}
}

// Two servers on fake clocks at the same time take the same random calls,
// one as JSON over the HTTP handler and one as binary calls: every answer,
// grant, refusal and error must be the same.
func TestBinaryCallsAnswerAsJSONDoes(t *testing.T) {
	js, jclock := fakeClockServer(t)
	bs, bclock := fakeClockServer(t)
	rng := rand.New(rand.NewPCG(17, 2026))
	var tokens []uint64
	grants := 0
	for step := range 600 {
		c := randomCall(rng, tokens)
		jstatus, jbody := viaJSON(t, js.Server, c, "")
		bstatus, bbody := viaBinary(t, bs.Server, c, "")
		sameAnswer(t, step, c, jstatus, jbody, bstatus, bbody)
		if jstatus == http.StatusOK && c.path == api.PathAcquire {
			l, _ := callcodec.Lease(bbody)
			tokens = append(tokens, l.Token)
			grants++
		}
		if rng.IntN(5) == 0 {
			d := time.Duration(rng.IntN(4000)) * time.Millisecond
			jclock.Advance(d)
			bclock.Advance(d)
		}
	}
	// The run must have exercised grants, not only refusals.
	if grants < 20 {
		t.Fatalf("only %d grants in the run", grants)
	}
}

// Bodies that do not decode are refused as the JSON API refuses bad
// bodies: 400 invalid_argument naming the field, and nothing runs.
func TestBinaryCallsRefuseBadBodies(t *testing.T) {
	ts, _ := fakeClockServer(t)
	good := callcodec.AppendAcquire(nil, api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 5000})
	cases := map[string]struct {
		body  []byte
		field string
	}{
		"empty":     {nil, "key"},
		"truncated": {good[:len(good)-3], "lock_delay_ms"},
		"trailing":  {append(append([]byte{}, good...), 0), "body"},
		"not utf-8": {callcodec.AppendAcquire(nil, api.AcquireRequest{Key: "k\xff", Holder: "h", TTLMs: 5000}), "key"},
		"too large": {make([]byte, api.MaxBodyBytes+1), "body"},
	}
	for name, c := range cases {
		status, body := ts.Calls().ServeCall(context.Background(), &framing.CallConn{}, api.PathAcquire, c.body)
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil || status != http.StatusBadRequest || e.Code != api.CodeInvalid || e.Field != c.field {
			t.Errorf("%s: %d %s, want 400 invalid_argument on %q", name, status, body, c.field)
		}
	}
	if _, err := ts.Get(context.Background(), "k"); err == nil {
		t.Fatal("a refused body acquired the key")
	}
	if status, _ := ts.Calls().ServeCall(context.Background(), &framing.CallConn{}, api.PathRenew, good); status != http.StatusNotFound {
		t.Fatalf("a binary call on a path without one: %d, want 404", status)
	}
}

// With ACLs on, a binary call is authenticated and checked as its HTTP
// route is: the same refusals, and a principal's own calls run.
func TestBinaryCallsUnderACLs(t *testing.T) {
	ts, _ := fakeClockServer(t)
	admin := ts.bootstrap()
	app := "Bearer " + ts.token(admin, "app", "app/:lock,read")
	// Refusals change nothing, so both ways can ask the same server.
	refused := []struct {
		c    hotCall
		cred string
	}{
		{hotCall{api.PathAcquire, api.AcquireRequest{Key: "app/x", Holder: "app", TTLMs: 5000}}, ""},
		{hotCall{api.PathAcquire, api.AcquireRequest{Key: "app/x", Holder: "app", TTLMs: 5000}}, "Basic abc"},
		{hotCall{api.PathAcquire, api.AcquireRequest{Key: "app/x", Holder: "app", TTLMs: 5000}}, "Bearer nope"},
		{hotCall{api.PathAcquire, api.AcquireRequest{Key: "other/x", Holder: "app", TTLMs: 5000}}, app},
		{hotCall{api.PathAcquire, api.AcquireRequest{Key: "app/x", Holder: "someone", TTLMs: 5000}}, app},
		{hotCall{api.PathExtend, api.ExtendRequest{Key: "other/x", Holder: "app", Token: 1, TTLMs: 5000}}, app},
		{hotCall{api.PathRelease, api.ReleaseRequest{Key: "app/x", Holder: "someone"}}, app},
		{hotCall{api.PathCheck, callcodec.CheckRequest{Key: "other/x", Token: 1}}, app},
		{hotCall{api.PathCheck, callcodec.CheckRequest{Key: "app/x", Token: 1}}, ""},
	}
	for i, r := range refused {
		js, jb := viaJSON(t, ts.Server, r.c, r.cred)
		bs, bb := viaBinary(t, ts.Server, r.c, r.cred)
		if js/100 != 4 {
			t.Fatalf("case %d was not refused: %d %s", i, js, jb)
		}
		sameAnswer(t, i, r.c, js, jb, bs, bb)
	}
	// The principal's own lock, in binary.
	status, body := viaBinary(t, ts.Server, hotCall{api.PathAcquire, api.AcquireRequest{Key: "app/x", Holder: "app/w1", TTLMs: 5000}}, app)
	l, err := callcodec.Lease(body)
	if status != http.StatusOK || err != nil || l.Holder != "app/w1" || l.Token == 0 {
		t.Fatalf("the principal's acquire: %d %q %v", status, body, err)
	}
	check := hotCall{api.PathCheck, callcodec.CheckRequest{Key: "app/x", Token: l.Token}}
	js, jb := viaJSON(t, ts.Server, check, app)
	bs, bb := viaBinary(t, ts.Server, check, app)
	sameAnswer(t, 0, check, js, jb, bs, bb)
	if c, _ := callcodec.Checked(bb); !c.Valid {
		t.Fatalf("check of the principal's grant: %+v", c)
	}
}

// An Authorizer sees a binary call as it sees the route: the op, the
// HTTP method and path, and the connection's credential.
func TestBinaryCallsGoThroughTheAuthorizer(t *testing.T) {
	cfg := fastConfig("")
	var seen []Call
	cfg.Authorizer = AuthorizerFunc(func(ctx context.Context, c Call) error {
		seen = append(seen, c)
		if c.Op == "release" {
			return service.NewError(api.CodePermissionDenied, "no releases here")
		}
		return nil
	})
	ts := startServer(t, cfg)
	acq := hotCall{api.PathAcquire, api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 5000}}
	if status, body := viaBinary(t, ts.Server, acq, "Bearer x"); status != http.StatusOK {
		t.Fatalf("acquire: %d %s", status, body)
	}
	rel := hotCall{api.PathRelease, api.ReleaseRequest{Key: "k", Holder: "h"}}
	js, jb := viaJSON(t, ts.Server, rel, "Bearer x")
	bs, bb := viaBinary(t, ts.Server, rel, "Bearer x")
	sameAnswer(t, 0, rel, js, jb, bs, bb)
	if js != http.StatusForbidden {
		t.Fatalf("release past the authorizer: %d %s", js, jb)
	}
	if len(seen) != 3 {
		t.Fatalf("the authorizer saw %d calls, want 3", len(seen))
	}
	b := seen[0]
	if b.Op != "acquire" || b.Method != http.MethodPost || b.Path != api.PathAcquire || b.Header.Get(api.HeaderAuthorization) != "Bearer x" {
		t.Fatalf("the authorizer saw %+v", b)
	}
	if seen[1].Op != seen[2].Op || seen[1].Method != seen[2].Method || seen[1].Path != seen[2].Path {
		t.Fatalf("JSON and binary releases looked different: %+v vs %+v", seen[1], seen[2])
	}
}
