package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/tlsconfig"
)

// peers is how this node calls other nodes' client ports
// (service.Peers): over HTTP, or https with this node's certificate.
type peers struct {
	hc        *http.Client
	scheme    string
	authToken string // sent on announcements, which need admin once ACLs are on
}

func newPeers(r *tlsconfig.Reloader, authToken string) *peers {
	p := &peers{hc: newPeerHTTP(r, 5*time.Second), scheme: "http://", authToken: authToken}
	if r != nil {
		p.scheme = "https://"
	}
	return p
}

// Identity asks the node at clientAddr who it is.
func (p *peers) Identity(ctx context.Context, clientAddr string) (api.Identity, error) {
	var id api.Identity
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+clientAddr+api.PathIdentity, nil)
	if err != nil {
		return id, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return id, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return id, err
	}
	if resp.StatusCode != http.StatusOK {
		return id, fmt.Errorf("GET /v1/cluster/identity answered %d (%s)", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &id); err != nil {
		return id, fmt.Errorf("GET /v1/cluster/identity: %w", err)
	}
	return id, nil
}

// ACLRevision asks the leader at clientAddr for the revision of its ACL
// tables. Its answer is small; a refusal (not_leader, unavailable) comes
// back as the leader's *Error.
func (p *peers) ACLRevision(ctx context.Context, clientAddr string) (api.ACLRevision, error) {
	var rev api.ACLRevision
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+clientAddr+api.PathACLRevision, nil)
	if err != nil {
		return rev, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return rev, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<12))
	if err != nil {
		return rev, err
	}
	if resp.StatusCode != http.StatusOK {
		var we api.Error
		if json.Unmarshal(body, &we) == nil && we.Code != "" {
			// Leader: the node asked no longer leads and names the one
			// that does (the caller may ask it).
			return rev, &Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("the leader at %s answered %s: %s", clientAddr, we.Code, we.Message),
				Leader: we.Leader}
		}
		return rev, fmt.Errorf("GET %s at %s answered %d", api.PathACLRevision, clientAddr, resp.StatusCode)
	}
	if err := json.Unmarshal(body, &rev); err != nil {
		return rev, fmt.Errorf("GET %s: %w", api.PathACLRevision, err)
	}
	return rev, nil
}

// Announce asks the leader at clientAddr to record req. Whatever the
// answer, the caller looks at the members table again later.
func (p *peers) Announce(ctx context.Context, clientAddr string, req api.JoinRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, p.scheme+clientAddr+api.PathAnnounce, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", api.ContentType)
	if p.authToken != "" {
		hr.Header.Set(api.HeaderAuthorization, "Bearer "+p.authToken)
	}
	resp, err := p.hc.Do(hr)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return nil
}

// Members asks the node at clientAddr for its members answer: a
// follower asks the leader for its view of every member's health.
func (p *peers) Members(ctx context.Context, clientAddr string) (api.MembersResponse, error) {
	var out api.MembersResponse
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+clientAddr+api.PathMembers, nil)
	if err != nil {
		return out, err
	}
	if p.authToken != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+p.authToken)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, err
	}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("GET %s answered %d (%s)", api.PathMembers, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return out, fmt.Errorf("GET %s: %w", api.PathMembers, err)
	}
	return out, nil
}

// close drops idle connections: one dialed for a call that gave up would
// sit idle on the other node until it times out.
func (p *peers) close() { p.hc.CloseIdleConnections() }

// newPeerHTTP is the client for this node's calls to other nodes' client
// ports: with TLS it verifies them against the CA and presents this
// node's certificate, both as loaded at the time of each dial.
func newPeerHTTP(r *tlsconfig.Reloader, timeout time.Duration) *http.Client {
	// Its own transport (net/http's defaults), so that Close drops only
	// this server's idle connections.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r != nil {
		tr.Proxy = nil // the TLS dial below must reach the node itself
		d := &net.Dialer{Timeout: timeout}
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			td := &tls.Dialer{NetDialer: d, Config: r.PeerClient(addr, nil)}
			return td.DialContext(ctx, network, addr)
		}
	}
	return &http.Client{Timeout: timeout, Transport: tr}
}
