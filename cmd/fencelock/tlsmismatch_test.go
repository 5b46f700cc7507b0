package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/server"
	"github.com/fencelock/fencelock/internal/tlsconfig"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// serveInProcess runs an in-memory server on a loopback port of its own,
// with TLS when files has it, and returns its host:port.
func serveInProcess(t *testing.T, files tlsconfig.Files) string {
	t.Helper()
	cfg := testServerConfig()
	cfg.TLS = files
	return serveInProcessConfig(t, cfg)
}

// serveInProcessConfig runs an in-memory server of cfg on a loopback port
// of its own and returns its host:port.
func serveInProcessConfig(t *testing.T, cfg server.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, ln, cfg, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return ln.Addr().String()
}

// TestTLSMismatchNamesTheFlag (issue 27 item 2): a TLS server reached
// without --ca, or a plain one reached with it, is reported as such,
// naming the address and what to pass; so is a TLS server whose
// certificate no CA given vouches for. Each is a client set up wrong:
// exit status 2 (issue 44; it was 3, as if no server were there).
func TestTLSMismatchNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cluster CA")
	f := tlstest.Write(t, dir, "n1", ca, ca.Issue(t, "n1"))
	otherCA := tlstest.NewCA(t, "another CA")
	other := tlstest.Write(t, t.TempDir(), "x", otherCA, otherCA.Issue(t, "x"))
	secure := serveInProcess(t, tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
	plain := serveInProcess(t, tlsconfig.Files{})
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"FENCELOCK_ADDR": secure},
			"The server at " + secure + " speaks TLS, and was reached over plain HTTP: pass --ca FILE (or set FENCELOCK_CLIENT_CA)"},
		{map[string]string{"FENCELOCK_ADDR": plain, "FENCELOCK_CLIENT_CA": f.CA},
			"The server at " + plain + " does not speak TLS, and was reached over TLS: give the address as http://" + plain},
		{map[string]string{"FENCELOCK_ADDR": secure, "FENCELOCK_CLIENT_CA": other.CA},
			"certificate signed by unknown authority\nPass --ca FILE"},
	} {
		var code int
		var errs string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			code, _, errs = runClientCLI(t, tc.env, "get", "k", "--timeout", "3s")
			// A server that has not elected itself yet answers unavailable.
			if !strings.Contains(errs, "unavailable") && !strings.Contains(errs, "leader") || time.Now().After(deadline) {
				break
			}
		}
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.env, code, errs, tc.want)
		}
	}
}
