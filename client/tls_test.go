package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/server"
	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// tlsServer runs an in-memory server with TLS on its one port, the way
// the server command does, and returns its host:port. A nil ca: no TLS.
func tlsServer(t testing.TB, ca *tlstest.CA, requireClientCert bool) string {
	t.Helper()
	var leaf *tlstest.Leaf
	if ca != nil {
		leaf = ca.Issue(t, "node")
	}
	addr, _ := tlsServerLeaf(t, ca, leaf, requireClientCert)
	return addr
}

// tlsServerLeaf is tlsServer serving leaf, signed by ca; it also returns
// how many connections the server has accepted, so that a test can count
// a client's attempts.
func tlsServerLeaf(t testing.TB, ca *tlstest.CA, leaf *tlstest.Leaf, requireClientCert bool) (string, *atomic.Int64) {
	t.Helper()
	var files tlsconfig.Files
	if ca != nil {
		f := tlstest.Write(t, t.TempDir(), "node", ca, leaf)
		files = tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA, RequireClientCert: requireClientCert}
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: raw}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, ln, server.Config{
			HeartbeatTimeout:   50 * time.Millisecond,
			ElectionTimeout:    50 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond,
			Logger:             slog.New(slog.DiscardHandler),
			TLS:                files,
		}, 5*time.Second)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return ln.Addr().String(), &ln.accepted
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// tryUntilReady acquires key until the server has elected itself.
func tryUntilReady(t *testing.T, c *client.Client, key string) *client.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		l, err := c.TryAcquire(ctx, key, client.WithTTL(time.Minute))
		if err == nil {
			return l
		}
		if ctx.Err() != nil || !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("acquire over TLS: %v", err)
		}
	}
}

func TestTLSClientAcquiresOverFramedAndHTTP(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	addr := tlsServer(t, ca, false)
	f := tlstest.Write(t, t.TempDir(), "alice", ca, ca.Issue(t, "alice"))
	for _, framed := range []bool{true, false} {
		// An address without a scheme is https:// once TLS is configured.
		c, err := client.New([]string{addr}, client.WithTLSFiles(f.CA, "", ""), client.WithFramed(framed))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Addrs()[0]; got != "https://"+addr {
			t.Fatalf("address %s, want https://%s", got, addr)
		}
		key := "tls-http"
		if framed {
			key = "tls-framed"
		}
		l := tryUntilReady(t, c, key)
		if got := c.Framed("https://" + addr); got != framed {
			t.Errorf("framed %v: the client holds a framed TLS connection: %v", framed, got)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Error(err)
		}
		c.Close()
	}
}

func TestTLSClientPresentsItsCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	addr := tlsServer(t, ca, true)
	f := tlstest.Write(t, t.TempDir(), "alice", ca, ca.Issue(t, "alice"))
	for _, framed := range []bool{true, false} {
		c, err := client.New([]string{"https://" + addr}, client.WithTLSFiles(f.CA, f.Cert, f.Key), client.WithFramed(framed))
		if err != nil {
			t.Fatal(err)
		}
		l := tryUntilReady(t, c, "k")
		if err := l.Release(context.Background()); err != nil {
			t.Error(err)
		}
		c.Close()

		// Without its certificate the same client is turned away.
		c, err = client.New([]string{"https://" + addr}, client.WithTLSFiles(f.CA, "", ""), client.WithFramed(framed), client.WithRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Check(context.Background(), "k", 1); !errors.Is(err, client.ErrUnreachable) {
			t.Errorf("framed %v: a client without a certificate: %v, want ErrUnreachable", framed, err)
		}
		c.Close()
	}
}

func TestTLSClientWithoutTheCAIsRefused(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	addr := tlsServer(t, ca, false)
	other := tlstest.NewCA(t, "another CA")
	for _, framed := range []bool{true, false} {
		c, err := client.New([]string{"https://" + addr}, client.WithTLSConfig(&tls.Config{RootCAs: other.Pool()}),
			client.WithFramed(framed), client.WithRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Check(context.Background(), "k", 1)
		if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Errorf("framed %v: %v, want ErrUnreachable for an unknown authority", framed, err)
		}
		c.Close()
	}
}

func TestTLSFilesThatCannotBeReadFailNew(t *testing.T) {
	if _, err := client.New([]string{"127.0.0.1:1"}, client.WithTLSFiles("/nonexistent/ca.pem", "", "")); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a missing CA file: %v, want ErrInvalid", err)
	}
	if _, err := client.New([]string{"127.0.0.1:1"}, client.WithTLSFiles("", "cert.pem", "")); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a certificate without its key: %v, want ErrInvalid", err)
	}
}

// BenchmarkCheckOverTLS compares one check's round trip on a framed
// connection and over HTTP/1.1, with and without TLS:
//
//	go test ./client -run '^$' -bench CheckOverTLS -benchtime 3000x
func BenchmarkCheckOverTLS(b *testing.B) {
	ca := tlstest.NewCA(b, "cluster CA")
	tlsAddr := tlsServer(b, ca, false)
	plainAddr := tlsServer(b, nil, false)
	f := tlstest.Write(b, b.TempDir(), "alice", ca, ca.Issue(b, "alice"))
	for _, tc := range []struct {
		name string
		addr string
		opts []client.Option
	}{
		{"plain/framed", plainAddr, nil},
		{"plain/http", plainAddr, []client.Option{client.WithFramed(false)}},
		{"tls/framed", tlsAddr, []client.Option{client.WithTLSFiles(f.CA, "", "")}},
		{"tls/http", tlsAddr, []client.Option{client.WithTLSFiles(f.CA, "", ""), client.WithFramed(false)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := client.New([]string{tc.addr}, tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := c.Check(ctx, "k", 1); err != nil { // the election, the dial
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := c.Check(ctx, "k", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
