package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// A client certificate names its principal through the real Serve path,
// where the port's listener sorts TLS connections into HTTP and frames
// (the handlers never see the *tls.Conn itself), on both ways in.
func TestClientCertificatePrincipalThroughServe(t *testing.T) {
	addr, ca := serveTLSReady(t)
	ctx := context.Background()
	hc := httpsClient(ca.Pool())
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
