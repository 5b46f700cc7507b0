package transport

import "testing"

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
