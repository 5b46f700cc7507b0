package transport

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Addrs is the address book: the nodes' base URLs, and which one is
// preferred (the one that answered last: the leader, in a cluster). It is
// safe for concurrent use.
type Addrs struct {
	mu   sync.Mutex
	list []string // base URLs, no trailing slash
	cur  int      // the preferred one
}

// NewAddrs is the address book of list, base URLs, the first preferred.
func NewAddrs(list []string) *Addrs { return &Addrs{list: list} }

// All returns the addresses, the preferred one first.
func (a *Addrs) All() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.list))
	for i := range a.list {
		out = append(out, a.list[(a.cur+i)%len(a.list)])
	}
	return out
}

// Pick returns the preferred address, or the one n places after it.
func (a *Addrs) Pick(n int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.list[(a.cur+n)%len(a.list)]
}

// PickSkipping is the address n places after the preferred one, passing
// over those in skip while another is left, and the place it was found at.
func (a *Addrs) PickSkipping(n int, skip map[string]bool) (string, int) {
	if len(skip) > 0 {
		for i := range a.Len() {
			if addr := a.Pick(n + i); !skip[addr] {
				return addr, n + i
			}
		}
	}
	return a.Pick(n), n
}

// Prefer makes addr the first one tried, adding it when it is a leader we
// had not been told about.
func (a *Addrs) Prefer(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.list {
		if x == addr {
			a.cur = i
			return
		}
	}
	a.list = append(a.list, addr)
	a.cur = len(a.list) - 1
}

// Len returns how many addresses the book holds.
func (a *Addrs) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.list)
}

// DefaultPort is the port of an address given without one: the one a
// server listens on when nothing else is said (the Python client's too).
const DefaultPort = "7470"

// BaseURL is addr as a base URL; an address without a scheme gets scheme,
// and one without a port gets DefaultPort. An address that is not
// HOST[:PORT] or http(s)://HOST[:PORT][/PATH] is an error that says what
// is wrong with it.
func BaseURL(addr, scheme string) (string, error) {
	raw := addr
	if !strings.Contains(addr, "://") {
		addr = scheme + "://" + addr
	}
	bad := func(why string) error {
		return fmt.Errorf("bad server address %q: %s; want HOST:PORT, HOST (port %s) or http(s)://HOST[:PORT]", raw, why, DefaultPort)
	}
	u, err := url.Parse(addr)
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", bad(err.Error())
	case u.Scheme != "http" && u.Scheme != "https":
		return "", bad("the scheme must be http or https")
	case u.User != nil:
		return "", bad("no user name belongs in it")
	case u.Hostname() == "":
		return "", bad("no host")
	case strings.HasSuffix(u.Host, ":"):
		return "", bad("an empty port")
	case u.RawQuery != "" || u.Fragment != "":
		return "", bad("no query belongs in it")
	}
	host := u.Host
	if p := u.Port(); p == "" {
		host = net.JoinHostPort(u.Hostname(), DefaultPort)
	} else if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return "", bad("port " + p + " is not 1 to 65535")
	}
	return strings.TrimRight(u.Scheme+"://"+host+u.Path, "/"), nil
}

// LeaderURL is the base URL of a leader a node at addr named: a bare
// host:port keeps addr's scheme, so a TLS client stays on TLS.
func LeaderURL(addr, leader string) (string, error) {
	scheme := "http"
	if strings.HasPrefix(addr, "https://") {
		scheme = "https"
	}
	return BaseURL(leader, scheme)
}
