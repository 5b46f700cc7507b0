package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/tlsconfig"
)

func TestWithoutTLSOnlyLoopbackIsServed(t *testing.T) {
	// Every interface: the listener is closed before anything is served.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("cannot listen on every interface here: %v", err)
	}
	err = Serve(context.Background(), ln, fastConfig(""), time.Second)
	if err == nil || !strings.Contains(err.Error(), "without TLS") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Serve on %s without TLS: %v, want a one-line refusal", ln.Addr(), err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the refused listener still accepts connections")
	}

	cfg := fastConfig("")
	cfg.RaftAddr, cfg.InsecureRaft = "0.0.0.0:0", true
	// Without a credential, what the raft port lacks is the cluster's
	// secret: the refusal names it (issue 41).
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "raft port") || !strings.Contains(err.Error(), "--cluster-secret-file") {
		t.Fatalf("New with raft on every interface without TLS: %v, want a refusal naming --cluster-secret-file", err)
	}

	all := &net.TCPAddr{IP: net.IPv4zero, Port: 7470}
	for name, c := range map[string]Config{
		"insecure": {Insecure: true},
		"TLS":      {TLS: tlsconfig.Files{CertFile: "c", KeyFile: "k"}},
	} {
		if err := loopbackCheck(c, "client", all); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, a := range []string{"127.0.0.1:7470", "[::1]:7470", "127.0.0.2:7470"} {
		ta, err := net.ResolveTCPAddr("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		if err := loopbackCheck(Config{}, "client", ta); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
}
