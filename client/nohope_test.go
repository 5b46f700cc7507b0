package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// Issue 44: a call retries only where there is hope — a node that timed
// out, one that answered unavailable during an election, one that named
// the leader — and not when no server is there at all, nor when TLS is
// set up wrong on one side. The tests below count attempts (dials, or
// connections a server accepted) and run the client on a fake clock that
// nobody moves: a call that backs off to retry hangs there, and the
// bound on the hang turns that into a failure.

// dialCounter is an HTTP client whose dials it counts by address.
type dialCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *dialCounter) client() *http.Client {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.mu.Lock()
		if d.n == nil {
			d.n = map[string]int{}
		}
		d.n[addr]++
		d.mu.Unlock()
		return dialer.DialContext(ctx, network, addr)
	}}}
}

func (d *dialCounter) count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[addr]
}

// hangBound bounds a call that must not wait on the test's fake clock:
// were it to back off, it would wait until this ends.
func hangBound(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRefusedEverywhereFailsAtOnce: a client that has never had an answer,
// whose every address refuses the connection (nothing listens: the server
// is down, or the address is wrong), fails each call after one attempt
// per address, with a *NoServerError matching ErrUnreachable and the
// refusal — a plain call, a grant, a grant that would wait, and an
// Acquire that would wait forever alike. Before, a call backed off and
// tried every address six more times (1.3 to 2.6 s), and a wait started
// that over three more times (about 8 s for `fencelock acquire`).
func TestRefusedEverywhereFailsAtOnce(t *testing.T) {
	calls := []struct {
		name string
		call func(ctx context.Context, c *client.Client) error
	}{
		{"get", func(ctx context.Context, c *client.Client) error { _, err := c.Get(ctx, "k"); return err }},
		{"check", func(ctx context.Context, c *client.Client) error { _, err := c.Check(ctx, "k", 1); return err }},
		{"grant", func(ctx context.Context, c *client.Client) error {
			_, err := c.Grant(ctx, "k", "h", time.Minute, 0)
			return err
		}},
		{"grant waiting", func(ctx context.Context, c *client.Client) error {
			_, err := c.Grant(ctx, "k", "h", time.Minute, time.Minute)
			return err
		}},
		{"acquire waiting forever", func(ctx context.Context, c *client.Client) error {
			_, err := c.Acquire(ctx, "k", client.WithTTL(time.Minute))
			return err
		}},
		{"session", func(ctx context.Context, c *client.Client) error {
			_, err := c.OpenSession(ctx, "h", time.Minute)
			return err
		}},
	}
	for _, framed := range []bool{false, true} {
		for _, tc := range calls {
			name := tc.name + "/http"
			if framed {
				name = tc.name + "/framed"
			}
			t.Run(name, func(t *testing.T) {
				dead := []string{deadAddr(t), deadAddr(t), deadAddr(t)}
				dc := &dialCounter{}
				opts := []client.Option{client.WithClock(newFakeClock())}
				if !framed {
					opts = append(opts, client.WithFramed(false), client.WithHTTPClient(dc.client()))
				}
				c, err := client.New(dead, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				err = tc.call(hangBound(t), c)
				var ns *client.NoServerError
				if !errors.As(err, &ns) || !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("%v; want a *NoServerError matching ErrUnreachable and ECONNREFUSED", err)
				}
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%v: the call backed off to retry", err)
				}
				if len(ns.Errs) != len(dead) {
					t.Errorf("%d errors for %d addresses: %v", len(ns.Errs), len(dead), ns.Errs)
				}
				if !framed {
					for _, a := range dead {
						if n := dc.count(a); n != 1 {
							t.Errorf("%s dialled %d times, want once", a, n)
						}
					}
				}
			})
		}
	}
}

// TestRefusedAfterAnAnswerIsRetried: once a node has answered the client,
// a refusal is a restart or a failover in progress, and the call is
// retried as before: the keep-alive of a lease, a wait in a queue and a
// plain call all ride a node coming back.
func TestRefusedAfterAnAnswerIsRetried(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	dc := &dialCounter{}
	c, err := client.New([]string{srv.Addr}, client.WithFramed(false), client.WithHTTPClient(dc.client()),
		client.WithRetries(2), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Check(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	before := dc.count(srv.Addr)
	_, err = c.Check(context.Background(), "k", 1)
	var ns *client.NoServerError
	if !errors.Is(err, client.ErrUnreachable) || errors.As(err, &ns) {
		t.Fatalf("Check = %v; want ErrUnreachable after the retries, not a *NoServerError", err)
	}
	if n := dc.count(srv.Addr) - before; n < 3 {
		t.Fatalf("%d dials after the node went away; want the first attempt and 2 retries", n)
	}
}

// TestRefusedBesideAnAnsweringNodeIsRetried: a refusal from one address
// while another answers (unavailable: an election) is a cluster that lost
// a node, and the call keeps trying both.
func TestRefusedBesideAnAnsweringNodeIsRetried(t *testing.T) {
	srv := clienttest.NewServer(client.SystemClock{})
	defer srv.Close()
	none := ""
	srv.NotLeader(&none)
	dead := deadAddr(t)
	dc := &dialCounter{}
	c, err := client.New([]string{dead, srv.Addr}, client.WithFramed(false), client.WithHTTPClient(dc.client()),
		client.WithRetries(2), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(context.Background(), "k")
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Get = %v, want ErrUnavailable after the retries", err)
	}
	if n := dc.count(dead); n < 2 {
		t.Fatalf("the refusing address was dialled %d times; want it retried with the other", n)
	}
}

// TestTLSProblemsFailAtOnce: a TLS handshake refused over certificates —
// no client certificate where the server requires one, one the server
// does not trust, a server certificate signed by an unknown authority or
// issued for another name — is no outage: the call makes one attempt
// (one connection) and fails with a *TLSError that says which side's
// certificate is at fault and keeps the cause for errors.As. Before, it
// was retried for seconds and reported as the server unreachable.
func TestTLSProblemsFailAtOnce(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	other := tlstest.NewCA(t, "another CA")
	clientFiles := tlstest.Write(t, t.TempDir(), "alice", ca, ca.IssueClient(t, "alice"))
	strangerFiles := tlstest.Write(t, t.TempDir(), "mallory", other, other.IssueClient(t, "mallory"))
	elsewhere := ca.IssueTemplate(t, &x509.Certificate{Subject: pkix.Name{CommonName: "node"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"elsewhere.example"}})
	for _, tc := range []struct {
		name       string
		leaf       *tlstest.Leaf
		require    bool
		opt        client.Option
		clientCert bool
		cause      any // a pointer to the x509 error errors.As must find, or nil
	}{
		{"no client certificate", nil, true, client.WithTLSFiles(clientFiles.CA, "", ""), true, nil},
		{"client certificate from another CA", nil, true, client.WithTLSFiles(clientFiles.CA, strangerFiles.Cert, strangerFiles.Key), true, nil},
		{"unknown authority", nil, false, client.WithTLSConfig(&tls.Config{RootCAs: other.Pool()}), false, new(x509.UnknownAuthorityError)},
		{"name mismatch", elsewhere, false, client.WithTLSFiles(clientFiles.CA, "", ""), false, new(x509.HostnameError)},
	} {
		for _, framed := range []bool{false, true} {
			name := tc.name + "/http"
			if framed {
				name = tc.name + "/framed"
			}
			t.Run(name, func(t *testing.T) {
				leaf := tc.leaf
				if leaf == nil {
					leaf = ca.Issue(t, "node")
				}
				addr, accepted := tlsServerLeaf(t, ca, leaf, tc.require)
				c, err := client.New([]string{"https://" + addr}, tc.opt, client.WithFramed(framed), client.WithClock(newFakeClock()))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, err = c.Check(hangBound(t), "k", 1)
				var te *client.TLSError
				if !errors.As(err, &te) || !errors.Is(err, client.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Check = %v; want a *TLSError matching ErrUnreachable, at once", err)
				}
				if te.ClientCert != tc.clientCert {
					t.Errorf("ClientCert = %v, want %v (%v)", te.ClientCert, tc.clientCert, err)
				}
				if hadCert := tc.name == "client certificate from another CA"; te.HadCert != hadCert {
					t.Errorf("HadCert = %v, want %v", te.HadCert, hadCert)
				}
				if tc.cause != nil && !errors.As(err, tc.cause) {
					t.Errorf("%v does not carry a %T", err, tc.cause)
				}
				if n := accepted.Load(); n != 1 {
					t.Errorf("the server accepted %d connections, want the one attempt", n)
				}
			})
		}
	}
}
