package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// TLS flags (docs/SECURITY.md). The server's name its node certificate
// (FENCELOCK_TLS_* in the environment); the client commands' name the
// client's (FENCELOCK_CLIENT_CA, _CERT, _KEY), so one shell can hold both
// without one taking the other's, and a command run by 'fencelock lock'
// does not read the FENCELOCK_KEY it is given (the key held) as a file.

type serverTLSFlags struct {
	ca, cert, key, clientCA *string
	requireClientCert       *bool
	insecure                *bool
}

func addServerTLSFlags(f *flags) *serverTLSFlags {
	t := &serverTLSFlags{
		cert: f.String("cert", "", "this node's TLS certificate `FILE` (PEM), served to clients and peers and presented to peers; turns TLS on"),
		key:  f.String("key", "", "the certificate's key `FILE` (PEM)"),
		ca:   f.String("ca", "", "CA `FILE` (PEM) that signs the peers' certificates, and the clients' unless --client-ca; needed with --raft"),
	}
	f.Env("cert", "FENCELOCK_TLS_CERT")
	f.Env("key", "FENCELOCK_TLS_KEY")
	f.Env("ca", "FENCELOCK_TLS_CA")
	t.clientCA = f.String("client-ca", "", "CA `FILE` (PEM) that signs client certificates, if not --ca")
	t.requireClientCert = f.Bool("require-client-cert", false, "refuse clients without a certificate signed by the client CA")
	t.insecure = f.Bool("insecure", false, "allow serving an address other than loopback without TLS")
	return t
}

func (t *serverTLSFlags) files() tlsconfig.Files {
	return tlsconfig.Files{CertFile: *t.cert, KeyFile: *t.key, CAFile: *t.ca, ClientCAFile: *t.clientCA,
		RequireClientCert: *t.requireClientCert}
}

// check reports missing TLS flags in the command's terms.
func (t *serverTLSFlags) check(raft bool) error {
	fs := t.files()
	switch {
	case !fs.Enabled():
		if *t.requireClientCert {
			return usageError("--require-client-cert needs TLS: --cert, --key and --ca")
		}
		return nil
	case fs.CertFile == "" || fs.KeyFile == "":
		return usageError("TLS needs both --cert and --key")
	case raft && fs.CAFile == "":
		return usageError("TLS with --raft needs --ca: peers authenticate each other with certificates it signs")
	case fs.RequireClientCert && fs.CAFile == "" && fs.ClientCAFile == "":
		return usageError("--require-client-cert needs --ca or --client-ca")
	}
	return nil
}

// clientConfig is the config of this node's own calls (--join): its
// certificate, servers verified against --ca. nil without TLS.
func (t *serverTLSFlags) clientConfig() (*tls.Config, error) {
	if !t.files().Enabled() {
		return nil, nil
	}
	return client.LoadTLSConfig(*t.ca, *t.cert, *t.key)
}

// reloadOnHangup sends on the returned channel for each SIGHUP until ctx
// ends.
func reloadOnHangup(ctx context.Context, log *slog.Logger) <-chan struct{} {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := make(chan struct{})
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the TLS certificates")
				select {
				case reload <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return reload
}

type clientTLSFlags struct{ ca, cert, key *string }

// addClientTLSFlags adds --ca, --cert and --key to a client command.
func addClientTLSFlags(f *flags) *clientTLSFlags {
	t := &clientTLSFlags{
		ca:   f.String("ca", "", "CA `FILE` (PEM) that signs the servers' certificates; turns TLS on (https)"),
		cert: f.String("cert", "", "client certificate `FILE` (PEM), for a server that asks for one"),
		key:  f.String("key", "", "the client certificate's key `FILE` (PEM)"),
	}
	f.Env("ca", "FENCELOCK_CLIENT_CA")
	f.Env("cert", "FENCELOCK_CLIENT_CERT")
	f.Env("key", "FENCELOCK_CLIENT_KEY")
	return t
}

// config is nil without TLS flags.
func (t *clientTLSFlags) config() (*tls.Config, error) {
	if t == nil || (*t.ca == "" && *t.cert == "" && *t.key == "") {
		return nil, nil
	}
	cfg, err := client.LoadTLSConfig(*t.ca, *t.cert, *t.key)
	if err != nil {
		return nil, usageError("--ca, --cert, --key: %s", trimPrefix(err))
	}
	return cfg, nil
}

// clusterHTTP is the cluster client's HTTP client: one attempt may take
// 30s (a join waits for the new node to catch up).
func clusterHTTP(cfg *tls.Config) *http.Client {
	hc := &http.Client{Timeout: 30 * time.Second}
	if cfg != nil {
		hc.Transport = &http.Transport{Proxy: nil, TLSClientConfig: cfg, TLSHandshakeTimeout: 5 * time.Second}
	}
	return hc
}
