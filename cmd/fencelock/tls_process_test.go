//go:build unix

package main

import (
	"crypto/tls"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// A server process with TLS: the client commands reach it with --ca (or
// FENCELOCK_CLIENT_CA), over frames and over HTTP; SIGHUP makes it present a
// rotated certificate.
func TestServerProcessTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cluster CA")
	f := tlstest.Write(t, dir, "n1", ca, ca.Issue(t, "n1"))
	addr := freeAddr(t)
	p := startProc(t, dir, nil, "--listen", addr, "--data", "d", "--cert", f.Cert, "--key", f.Key, "--ca", f.CA)
	pool := ca.Pool()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("https://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready over TLS: %v\n%s", err, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	env := map[string]string{"FENCELOCK_ADDR": addr, "FENCELOCK_CLIENT_CA": f.CA}
	if code, out, errs := runClientCLI(t, env, "acquire", "k", "--holder", "h", "--ttl", "1m"); code != 0 || strings.TrimSpace(out) != "1" {
		t.Fatalf("acquire over TLS: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs := runClientCLI(t, env, "cluster", "members"); code != 0 || !strings.Contains(out, addr) {
		t.Fatalf("cluster members over TLS: exit %d, %q %q", code, out, errs)
	}
	// A client set up wrong, said at once (issue 44; it was exit 3).
	if code, _, errs := runClientCLI(t, map[string]string{"FENCELOCK_ADDR": addr}, "get", "k"); code != exitUsage || !strings.Contains(errs, "--ca") {
		t.Fatalf("get without the CA: exit %d (%s), want %d naming --ca", code, errs, exitUsage)
	}

	next := ca.Issue(t, "n1")
	if err := os.WriteFile(f.Cert, next.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		got := c.ConnectionState().PeerCertificates[0]
		c.Close()
		if got.Equal(next.Cert) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificate is not served after SIGHUP\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}
