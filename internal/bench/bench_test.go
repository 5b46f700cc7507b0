package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/framing"
	"github.com/fencelock/fencelock/internal/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs an in-memory server with HTTP and frames on one port,
// as the server command serves them, until the test ends.
func startServer(t *testing.T) *httptest.Server {
	t.Helper()
	s, err := server.New(server.Config{HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	fs := &framing.Server{Handler: s.Handler(), Calls: s.Calls()}
	hs.Listener = framing.Listen(hs.Listener, fs)
	hs.Start()
	t.Cleanup(func() {
		s.BeginShutdown()
		hs.Close()
		fs.Close()
		s.Close()
	})
	return hs
}

func TestRunBothModes(t *testing.T) {
	hs := startServer(t)
	addr := strings.TrimPrefix(hs.URL, "http://")
	line := regexp.MustCompile(`^cycles/s=\d+ p50=\S+ p99=\S+$`)
	for _, run := range []struct {
		mode    string
		useHTTP bool
	}{{Uncontended, false}, {Contended, false}, {Uncontended, true}, {Contended, true}} {
		mode := fmt.Sprintf("%s (HTTP %v)", run.mode, run.useHTTP)
		r, err := Run(context.Background(), Config{Addr: addr, Mode: run.mode, Clients: 4, Duration: 300 * time.Millisecond, HTTP: run.useHTTP})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if r.Cycles == 0 || r.Errors != 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Fatalf("%s: %+v", mode, r)
		}
		if !line.MatchString(r.Summary()) {
			t.Fatalf("summary %q", r.Summary())
		}
		// The run leaves no lease behind (bounded poll: the server finishes
		// cancelling waits of disconnected clients after Run returns). The
		// bound is below the 10 s TTL, so a leaked lease cannot expire in time
		// to hide.
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := http.Get(hs.URL + api.PathLocks + "?" + api.QueryPrefix + "=bench/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) == "{\"locks\":[]}\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s left leases: %s", mode, body)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestRunUnreachable(t *testing.T) {
	hs := httptest.NewServer(nil)
	addr := strings.TrimPrefix(hs.URL, "http://")
	hs.Close()
	_, err := Run(context.Background(), Config{Addr: addr, Clients: 2, Duration: time.Second})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
}

func TestConfigRefusesBadMode(t *testing.T) {
	if _, err := Run(context.Background(), Config{Mode: "sideways"}); err == nil {
		t.Fatal("bad mode accepted")
	}
}

// With ACLs on, a run without a token completes nothing; with a token it
// runs as the token's principal (its holders are the principal's own), over
// frames and over HTTP.
func TestRunWithACLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hs := startServer(t)
	post := func(path, token, body string) string {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", api.ContentType)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, data)
		}
		var m struct{ Secret string }
		_ = json.Unmarshal(data, &m)
		return m.Secret
	}
	admin := post(api.PathACLBootstrap, "", `{}`)
	post(api.PathACLPolicySet, admin, `{"name":"bench","rules":[{"prefix":"bench/","verbs":["lock"]}]}`)
	worker := post(api.PathACLTokenCreate, admin, `{"name":"w","policies":["bench"]}`)

	addr := strings.TrimPrefix(hs.URL, "http://")
	r, err := Run(ctx, Config{Addr: addr, Clients: 2, Duration: 200 * time.Millisecond})
	if err != nil || r.Cycles != 0 || r.Errors == 0 {
		t.Fatalf("without a token: %+v, %v; want no cycle and errors", r, err)
	}
	for _, useHTTP := range []bool{false, true} {
		r, err := Run(ctx, Config{Addr: addr, Clients: 2, Duration: 200 * time.Millisecond, HTTP: useHTTP, AuthToken: worker})
		if err != nil || r.Cycles == 0 || r.Errors != 0 {
			t.Fatalf("with the worker's token (HTTP %v): %+v, %v", useHTTP, r, err)
		}
	}
	if _, err := Run(ctx, Config{Addr: addr, Clients: 1, Duration: 100 * time.Millisecond, AuthToken: "flk_wrong"}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a wrong token: %v, want it refused", err)
	}
}
