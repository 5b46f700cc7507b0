package main

import (
	"strings"
	"testing"
)

func TestServerTLSUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cert", "n1.pem"}, "TLS needs both --cert and --key"},
		{[]string{"--cert", "n1.pem", "--key", "n1-key.pem", "--raft", "127.0.0.1:0"}, "TLS with --raft needs --ca"},
		{[]string{"--require-client-cert"}, "--require-client-cert needs TLS"},
	} {
		args := append([]string{"server", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		code, _, errs := runClientCLI(t, nil, args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, exitUsage, tc.want)
		}
	}
}

// Without TLS, a port on every interface is refused in one line; the
// listener is closed before anything is served. An open raft port's
// refusal names the cluster's secret, which is what it lacks.
func TestServerWithoutTLSRefusesANonLoopbackAddress(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, []string{"without TLS", "--insecure"}},
		{[]string{"--listen", "127.0.0.1:0", "--raft", "0.0.0.0:0", "--insecure-raft"}, []string{"without a credential", "--cluster-secret-file", "--insecure"}},
	} {
		args := append([]string{"server", "--data", t.TempDir()}, c.args...)
		code, _, errs := runClientCLI(t, nil, args...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		last := lines[len(lines)-1]
		for _, w := range c.want {
			if code == 0 || !strings.Contains(last, w) {
				t.Errorf("%v: exit %d, stderr %q; want a refusal naming %q", args, code, errs, w)
			}
		}
	}
}
