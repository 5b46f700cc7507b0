package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/tlsconfig/tlstest"
)

// A client certificate names its principal through the real Serve path,
// where the port's listener sorts TLS connections into HTTP and frames
// (the handlers never see the *tls.Conn itself), on both ways in.
func TestClientCertificatePrincipalThroughServe(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	cfg := fastConfig("")
	cfg.TLS = nodeFiles(t, ca, "n1")
	ln := listen(t)
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, cfg, 5*time.Second) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	hc := httpsClient(ca.Pool())
	eventually(t, "the TLS server to be ready", func() bool {
		resp, err := hc.Get("https://" + addr + api.PathReady)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	st, m := postJSON(t, hc, "https://"+addr+api.PathACLBootstrap, `{}`)
	if st != 200 {
		t.Fatalf("bootstrap: %d %v", st, m)
	}
	admin, _ := m["secret"].(string)
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+api.PathACLTokenCreate,
		bytes.NewReader([]byte(`{"name":"alice","policies":["admin"],"no_secret":true}`)))
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", api.ContentType)
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("creating alice: %v %v", resp, err)
	}
	resp.Body.Close()

	cert := ca.Issue(t, "alice").TLS(t)
	whoami := func(body []byte) string {
		var w api.WhoAmI
		if err := json.Unmarshal(body, &w); err != nil {
			return "undecodable: " + string(body)
		}
		return w.Principal
	}
	resp, err = httpsClient(ca.Pool(), cert).Get("https://" + addr + api.PathACLWhoAmI)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || whoami(buf.Bytes()) != "alice" {
		t.Fatalf("whoami over HTTPS with alice's certificate: %d %s", resp.StatusCode, buf.Bytes())
	}
	fc, err := framedTLS(ctx, addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	code, body, err := fc.RoundTrip(ctx, http.MethodGet, api.PathACLWhoAmI, nil)
	if err != nil || code != 200 || whoami(body) != "alice" {
		t.Fatalf("whoami over framed TLS with alice's certificate: %d %s %v", code, body, err)
	}
	// Without a certificate the same frames are anonymous: refused.
	anon, err := framedTLS(ctx, addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if code, body, err := anon.RoundTrip(ctx, http.MethodGet, api.PathACLWhoAmI, nil); err != nil || code != 401 {
		t.Fatalf("anonymous whoami over framed TLS: %d %s %v", code, body, err)
	}
}
