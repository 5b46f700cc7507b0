package server

import (
	"net/url"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/api"
)

// jsonAcquire is an acquire's body for any key, control characters too.
func jsonAcquire(key, holder string) string {
	return jsonString(map[string]any{"key": key, "holder": holder, "ttl_ms": 60000})
}

// Issue 24, finding 7: keys such as a//secret/x, a/./secret/x and
// a/x/../secret/x slipped past a deny on a/secret/ because they are other
// strings. With ACLs on, keys (and the complete segments of prefixes) with
// empty, "." or ".." segments, control characters or NUL are refused 400.
func TestACLKeysWithAmbiguousSegmentsAreRefused(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	// Before ACLs are on, such keys are only strings, as they always were.
	if a := ts.post(api.PathAcquire, acquireBody("open//x", "anyone", 60000, "")); a.status != 200 {
		t.Fatalf("acquire open//x before bootstrap: %d %v", a.status, a.body)
	}
	admin := ts.bootstrap()
	bob := ts.token(admin, "bob", "a/:lock,read", "a/secret/:lock,read:deny")
	applied := ts.fsm.AppliedIndex()
	for _, key := range []string{
		"a//secret/x", "a/./secret/x", "a/x/../secret/x", "a/secret/..", "a/.", "a/", "/a/x",
		"a/x\x00y", "a/x\ny", "a/x\x7fy", "a/x\ty",
	} {
		a := ts.authDo("POST", api.PathAcquire, jsonAcquire(key, "bob"), bob)
		if a.status != 400 || a.body["code"] != api.CodeInvalid || a.body["field"] != "key" {
			t.Errorf("acquire %q: %d %v, want 400 invalid_argument on key", key, a.status, a.body)
		}
		a = ts.authDo("GET", api.PathLock+"?key="+url.QueryEscape(key), "", bob)
		if a.status != 400 {
			t.Errorf("get %q: %d %v, want 400", key, a.status, a.body)
		}
	}
	for _, prefix := range []string{"a//", "a/./", "a/../", "a/x\x00"} {
		a := ts.authDo("GET", api.PathLocks+"?prefix="+url.QueryEscape(prefix), "", bob)
		if a.status != 400 || a.body["field"] != "prefix" {
			t.Errorf("list %q: %d %v, want 400 on prefix", prefix, a.status, a.body)
		}
	}
	if got := ts.fsm.AppliedIndex(); got != applied {
		t.Errorf("refused calls applied entries: index %d, was %d", got, applied)
	}
	// Keys that only look alike are still keys; a partial last segment of
	// a prefix is a prefix.
	for _, key := range []string{"a/x.y", "a/..x", "a/.hidden", "a/x-y/z"} {
		if a := ts.authDo("POST", api.PathAcquire, acquireBody(key, "bob", 60000, ""), bob); a.status != 200 {
			t.Errorf("acquire %q: %d %v, want 200", key, a.status, a.body)
		}
	}
	for _, prefix := range []string{"a/", "a/.", "a/x", ""} {
		a := ts.authDo("GET", api.PathLocks+"?prefix="+url.QueryEscape(prefix), "", admin)
		if a.status != 200 {
			t.Errorf("list %q: %d %v, want 200", prefix, a.status, a.body)
		}
	}
	if a := ts.authDo("GET", api.PathLock+"?key="+url.QueryEscape("a/secret/x"), "", bob); a.status != 403 {
		t.Errorf("the deny still decides a/secret/x: %d %v", a.status, a.body)
	}
	if a := ts.authDo("POST", api.PathAcquire, acquireBody("a/x/../secret/y", "admin", 60000, ""), admin); a.status != 400 ||
		!strings.Contains(a.body["error"].(string), `".."`) {
		t.Errorf("admin acquire a/x/../secret/y: %d %v, want 400 naming the segment", a.status, a.body)
	}
}

// Issue 24, finding 7: in the default configuration cluster/announce
// stored any string as a client address, which became the dashboard's
// link to the leader. A client address must be host:port.
func TestAnnounceRefusesAClientAddressThatIsNotHostPort(t *testing.T) {
	ts := startServer(t, fastConfig(""))
	raftAddr := ts.node.Addr()
	for _, addr := range []string{
		"javascript:alert(1)", "evil.example", "http://evil.example:80", "evil.example:80/x", "a b:80",
		"evil.example:0", "evil.example:99999", "evil.example:http", ":80", "user@evil.example:80", "[::1]:80\n",
	} {
		body := jsonString(map[string]string{"id": ts.cfg.NodeID, "raft_addr": raftAddr, "client_addr": addr})
		a := ts.post(api.PathAnnounce, body)
		if a.status != 400 || a.body["field"] != "client_addr" {
			t.Errorf("announce %q: %d %v, want 400 on client_addr", addr, a.status, a.body)
		}
		if m, ok := ts.fsm.Member(ts.cfg.NodeID); ok && m.ClientAddr == addr {
			t.Errorf("announce %q was recorded", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:7470", "[::1]:7470", "node-2.example.com:443"} {
		body := jsonString(map[string]string{"id": ts.cfg.NodeID, "raft_addr": raftAddr, "client_addr": addr})
		if a := ts.post(api.PathAnnounce, body); a.status != 200 {
			t.Errorf("announce %q: %d %v, want 200", addr, a.status, a.body)
		}
	}
}
