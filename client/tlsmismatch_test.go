package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// TestTLSMismatchIsNamed (issue 27 item 2): a server that speaks TLS met
// over plain http://, or a plain server met over https://, is reported as
// such, naming the address, instead of as an EOF or a record header.
// Either way the call fails at once, matching ErrUnreachable.
func TestTLSMismatchIsNamed(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	secure := tlsServer(t, ca, false)
	plain := tlsServer(t, nil, false)
	for _, tc := range []struct {
		name, addr string
		opts       []client.Option
		want       string
	}{
		{"TLS server over http framed", "http://" + secure, nil, "http://" + secure + " speaks TLS: use https://" + secure},
		{"TLS server over http", "http://" + secure, []client.Option{client.WithFramed(false)}, "http://" + secure + " speaks TLS: use https://" + secure},
		{"plain server over https framed", "https://" + plain, []client.Option{client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()})}, "https://" + plain + " does not speak TLS: use http://" + plain},
		{"plain server over https", "https://" + plain, []client.Option{client.WithFramed(false), client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()})}, "https://" + plain + " does not speak TLS: use http://" + plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New([]string{tc.addr}, append(tc.opts, client.WithRetries(1), client.WithBackoff(time.Millisecond, time.Millisecond))...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var terr *client.TLSMismatchError
			for {
				_, err = c.Get(ctx, "k")
				// A plain server may not have elected itself yet: it
				// answers, unavailable, which is no mismatch.
				if !errors.Is(err, client.ErrUnavailable) || ctx.Err() != nil {
					break
				}
			}
			if !errors.Is(err, client.ErrUnreachable) || !errors.As(err, &terr) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Get = %v; want ErrUnreachable, a *TLSMismatchError and %q", err, tc.want)
			}
		})
	}
}
