package transport

import (
	"strings"
	"testing"
)

// A leader named by a node (host:port) is reached the way that node was.
func TestLeaderURLKeepsTheScheme(t *testing.T) {
	for _, c := range []struct{ addr, leader, want string }{
		{"https://127.0.0.1:1", "127.0.0.1:2", "https://127.0.0.1:2"},
		{"http://127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:2"},
		{"https://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:2"},
	} {
		if got, err := LeaderURL(c.addr, c.leader); err != nil || got != c.want {
			t.Errorf("LeaderURL(%s, %s) = %s, %v; want %s", c.addr, c.leader, got, err, c.want)
		}
	}
}

// An address without a port gets the server's, 7470, as in the Python
// client; one that is no address says why at once (issue 44: the CLI
// took "127.0.0.1" and "garbage" for servers it could not reach, 8.5 s
// later).
func TestBaseURL(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"127.0.0.1", "http://127.0.0.1:7470"},
		{"127.0.0.1:7471", "http://127.0.0.1:7471"},
		{"locks.example", "http://locks.example:7470"},
		{"[::1]", "http://[::1]:7470"},
		{"[::1]:7471", "http://[::1]:7471"},
		{"https://locks.example", "https://locks.example:7470"},
		{"https://locks.example:8443/", "https://locks.example:8443"},
		{"http://127.0.0.1:7470/prefix", "http://127.0.0.1:7470/prefix"},
	} {
		if got, err := BaseURL(c.addr, "http"); err != nil || got != c.want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", c.addr, got, err, c.want)
		}
	}
	for _, addr := range []string{"ftp://x:1", "127.0.0.1:", "127.0.0.1:port", "127.0.0.1:99999", "127.0.0.1:0",
		"http://", "://x", "user@host:1", "a b", "host:1?x=1", "::1"} {
		if got, err := BaseURL(addr, "http"); err == nil {
			t.Errorf("BaseURL(%q) = %q, want an error", addr, got)
		} else if !strings.Contains(err.Error(), "want HOST:PORT") {
			t.Errorf("BaseURL(%q): %v does not say what an address is", addr, err)
		}
	}
}
