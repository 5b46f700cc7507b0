// Command secwindows measures, on a real three-node fencelock cluster on
// 127.0.0.1 (the binary given, one process per node), the figures of
// issue 24's findings 4 and 5:
//
//   - revocation: how long an SSE watch opened with a token keeps going
//     after the token is deleted (on the leader and on a follower), and
//     how many events it delivers meanwhile;
//   - follower window: after the leader acknowledges a token's deletion,
//     how long a follower goes on answering whoami with it, and how many
//     such answers it gives;
//   - joining node: how long a node started with --join answers whoami
//     without a token (as if ACLs were off);
//   - sessions of one principal with many holder names: how many it may
//     open, at what rate.
//
// Usage:
//
//	go run ./cmd/secwindows -bin /path/to/fencelock [-rounds 20] [-sessions 6000]
//
// It prints one line per figure. It starts and stops its own servers on
// free loopback ports in a temporary directory.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "", "the fencelock binary")
	rounds := flag.Int("rounds", 20, "rounds of the follower-window measure")
	sessions := flag.Int("sessions", 6000, "sessions one principal tries to open")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "secwindows: -bin is required")
		os.Exit(2)
	}
	if err := run(*bin, *rounds, *sessions); err != nil {
		fmt.Fprintln(os.Stderr, "secwindows:", err)
		os.Exit(1)
	}
}

type node struct {
	id, client, raft, dir string
	cmd                   *exec.Cmd
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// secretFile is the cluster secret every node is given.
var secretFile string

// makeSecret has bin make a cluster secret, in a file of dir only its
// owner reads.
func makeSecret(bin, dir string) (string, error) {
	out, err := exec.Command(bin, "cluster", "secret").Output()
	if err != nil {
		return "", fmt.Errorf("%s cluster secret: %w", bin, err)
	}
	p := filepath.Join(dir, "cluster.secret")
	return p, os.WriteFile(p, out, 0o600)
}

func start(bin string, n *node, extra ...string) error {
	args := append([]string{"server", "--id", n.id, "--listen", n.client, "--raft", n.raft, "--data", n.dir,
		"--cluster-secret-file", secretFile}, extra...)
	n.cmd = exec.Command(bin, args...)
	logf, err := os.Create(n.dir + ".log")
	if err != nil {
		return err
	}
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	return n.cmd.Start()
}

func (n *node) stop() {
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Signal(syscall.SIGKILL)
		n.cmd.Wait()
	}
}

var hc = &http.Client{Timeout: 10 * time.Second}

// call sends one request and answers its status and JSON body.
func call(method, addr, path, token, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return resp.StatusCode, m, nil
}

func waitFor(what string, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for " + what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func run(bin string, rounds, sessions int) error {
	dir, err := os.MkdirTemp("", "secwindows")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if secretFile, err = makeSecret(bin, dir); err != nil {
		return err
	}
	nodes := make([]*node, 3)
	var peers []string
	for i := range nodes {
		nodes[i] = &node{id: fmt.Sprintf("n%d", i+1), client: freePort(), raft: freePort(), dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		peers = append(peers, nodes[i].id+"="+nodes[i].raft)
	}
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for _, n := range nodes {
		if err := start(bin, n, "--peers", strings.Join(peers, ",")); err != nil {
			return err
		}
	}
	var leader *node
	err = waitFor("a leader with every client address", 30*time.Second, func() bool {
		for _, n := range nodes {
			st, m, err := call("GET", n.client, "/v1/cluster/members", "", "")
			if err != nil || st != 200 || m["ready"] != true {
				continue
			}
			ms, _ := m["members"].([]any)
			known := 0
			for _, x := range ms {
				if mm, _ := x.(map[string]any); mm["client_addr"] != "" && mm["client_addr"] != nil {
					known++
				}
			}
			if known == 3 {
				leader = n
				return true
			}
		}
		return false
	})
	if err != nil {
		return err
	}
	var follower *node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	st, m, err := call("POST", leader.client, "/v1/acl/bootstrap", "", "{}")
	if err != nil || st != 200 {
		return fmt.Errorf("bootstrap: %d %v %v", st, m, err)
	}
	admin := m["secret"].(string)
	if st, m, _ := call("POST", leader.client, "/v1/acl/policy/set", admin, `{"name":"b","rules":[{"prefix":"b/","verbs":["lock","read"]}]}`); st != 200 {
		return fmt.Errorf("policy: %d %v", st, m)
	}
	newToken := func(name string) (string, error) {
		st, m, err := call("POST", leader.client, "/v1/acl/token/create", admin, `{"name":"`+name+`","policies":["b"],"replace":true}`)
		if err != nil || st != 200 {
			return "", fmt.Errorf("token create: %d %v %v", st, m, err)
		}
		return m["secret"].(string), nil
	}

	// Revocation of open streams.
	for _, on := range []*node{leader, follower} {
		if err := revocation(on, leader, admin, newToken); err != nil {
			return err
		}
	}
	// The follower window.
	if err := followerWindow(follower, leader, admin, newToken, rounds); err != nil {
		return err
	}
	// What a call costs on each, now that a follower asks the leader.
	if err := latency(leader, follower, newToken); err != nil {
		return err
	}
	// The joining node.
	if err := joining(bin, dir, leader, admin); err != nil {
		return err
	}
	// Sessions of one principal.
	return sessionsOfOne(leader, newToken, sessions)
}

func role(on, leader *node) string {
	if on == leader {
		return "leader"
	}
	return "follower"
}

// revocation opens an SSE watch on on with a fresh token, deletes the
// token on the leader, and measures from the deletion's answer to the
// stream's end (at most 30 s), while the admin takes a key under the
// watched prefix every 100 ms.
func revocation(on, leader *node, admin string, newToken func(string) (string, error)) error {
	tok, err := newToken("streamer")
	if err != nil {
		return err
	}
	if err := waitFor("the node to know the token", 10*time.Second, func() bool {
		st, _, _ := call("GET", on.client, "/v1/acl/whoami", tok, "")
		return st == 200
	}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+on.client+"/v1/watch?prefix=b/", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("stream on %s: %d", on.id, resp.StatusCode)
	}
	var ack atomic.Int64 // unix nanos of the deletion's answer; 0 before
	var after atomic.Int64
	var lastEvent atomic.Value
	ended := make(chan time.Time, 1)
	go func() {
		br := bufio.NewReader(resp.Body)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				ended <- time.Now()
				return
			}
			if strings.HasPrefix(l, "event: ") {
				lastEvent.Store(strings.TrimSpace(l[7:]))
				if strings.TrimSpace(l[7:]) == "granted" && ack.Load() != 0 {
					after.Add(1)
				}
			}
		}
	}()
	stopTaking := make(chan struct{})
	var takers sync.WaitGroup
	takers.Add(1)
	go func() {
		defer takers.Done()
		for i := 0; ; i++ {
			select {
			case <-stopTaking:
				return
			case <-time.After(100 * time.Millisecond):
			}
			call("POST", leader.client, "/v1/acquire", admin, fmt.Sprintf(`{"key":"b/secret-after-%s-%d","holder":"admin","ttl_ms":60000}`, on.id, i))
		}
	}()
	time.Sleep(300 * time.Millisecond)
	after.Store(0)
	if st, m, err := call("POST", leader.client, "/v1/acl/token/delete", admin, `{"name":"streamer"}`); err != nil || st != 200 {
		return fmt.Errorf("token delete: %d %v %v", st, m, err)
	}
	t0 := time.Now()
	ack.Store(t0.UnixNano())
	var line string
	select {
	case t1 := <-ended:
		last, _ := lastEvent.Load().(string)
		d := t1.Sub(t0)
		when := fmt.Sprintf("%v after the deletion's answer reached this client", d.Round(10*time.Microsecond))
		if d < 0 {
			when = fmt.Sprintf("%v before the deletion's answer reached this client", (-d).Round(10*time.Microsecond))
		}
		line = fmt.Sprintf("revocation window, SSE watch on the %s: stream ended %s; events granted delivered after the deletion: %d; last frame: %s",
			role(on, leader), when, after.Load(), last)
	case <-time.After(30 * time.Second):
		line = fmt.Sprintf("revocation window, SSE watch on the %s: stream still open 30s after the deletion was answered; events granted delivered after it: %d",
			role(on, leader), after.Load())
	}
	close(stopTaking)
	takers.Wait()
	cancel()
	fmt.Println(line)
	return nil
}

// followerWindow, round after round, keeps whoami calls with a fresh
// token going on the follower, deletes the token on the leader, and
// measures how long (and how many times) the follower still answers 200
// after the deletion was answered.
func followerWindow(follower, leader *node, admin string, newToken func(string) (string, error), rounds int) error {
	var windows []time.Duration
	total := 0
	for r := range rounds {
		tok, err := newToken("probe")
		if err != nil {
			return err
		}
		if err := waitFor("the follower to know the token", 10*time.Second, func() bool {
			st, _, _ := call("GET", follower.client, "/v1/acl/whoami", tok, "")
			return st == 200
		}); err != nil {
			return err
		}
		var ack atomic.Int64
		var lastOK atomic.Int64
		var okAfter atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					sent := time.Now().UnixNano()
					st, _, _ := call("GET", follower.client, "/v1/acl/whoami", tok, "")
					if a := ack.Load(); st == 200 && a != 0 && sent > a {
						okAfter.Add(1)
						for {
							old := lastOK.Load()
							if sent <= old || lastOK.CompareAndSwap(old, sent) {
								break
							}
						}
					}
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		if st, m, err := call("POST", leader.client, "/v1/acl/token/delete", admin, `{"name":"probe"}`); err != nil || st != 200 {
			close(stop)
			wg.Wait()
			return fmt.Errorf("round %d: token delete: %d %v %v", r, st, m, err)
		}
		ack.Store(time.Now().UnixNano())
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		w := time.Duration(0)
		if l := lastOK.Load(); l != 0 {
			w = time.Duration(l - ack.Load())
		}
		windows = append(windows, w)
		total += int(okAfter.Load())
	}
	sort.Slice(windows, func(i, j int) bool { return windows[i] < windows[j] })
	fmt.Printf("follower window, %d rounds: whoami with the deleted token answered 200 for up to %v after the deletion was answered (median %v); 200s sent after the deletion was answered: %d in all\n",
		rounds, windows[len(windows)-1].Round(100*time.Microsecond), windows[len(windows)/2].Round(100*time.Microsecond), total)
	return nil
}

// latency times whoami calls, one at a time and 8 at a time, on the
// leader and on the follower.
func latency(leader, follower *node, newToken func(string) (string, error)) error {
	tok, err := newToken("timer")
	if err != nil {
		return err
	}
	if err := waitFor("the follower to know the token", 10*time.Second, func() bool {
		st, _, _ := call("GET", follower.client, "/v1/acl/whoami", tok, "")
		return st == 200
	}); err != nil {
		return err
	}
	for _, on := range []*node{leader, follower} {
		for _, par := range []int{1, 8} {
			const n = 2000
			var mu sync.Mutex
			var ds []time.Duration
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range par {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= n {
						t := time.Now()
						if st, _, _ := call("GET", on.client, "/v1/acl/whoami", tok, ""); st != 200 {
							return
						}
						mu.Lock()
						ds = append(ds, time.Since(t))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			if len(ds) == 0 {
				return fmt.Errorf("no whoami answered on %s", on.id)
			}
			fmt.Printf("whoami on the %s, %d at a time: median %v, p99 %v, %.0f/s\n", role(on, leader), par,
				ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)*99/100].Round(time.Microsecond), float64(len(ds))/el.Seconds())
		}
	}
	return nil
}

// joining starts a fourth node with --join and polls its whoami without
// a token from the moment it starts, counting the answers that say ACLs
// are off.
func joining(bin, dir string, leader *node, admin string) error {
	n := &node{id: "n4", client: freePort(), raft: freePort(), dir: filepath.Join(dir, "n4")}
	var off atomic.Int64
	var first, last atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, m, err := call("GET", n.client, "/v1/acl/whoami", "", "")
			if err == nil && st == 200 && m["auth"] == false {
				now := time.Now().UnixNano()
				off.Add(1)
				first.CompareAndSwap(0, now)
				last.Store(now)
			}
			if err != nil {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	if err := start(bin, n, "--join", leader.client, "--auth-token", admin); err != nil {
		return err
	}
	defer n.stop()
	err := waitFor("the joined node to refuse a call without a token", 30*time.Second, func() bool {
		st, _, _ := call("GET", n.client, "/v1/acl/whoami", "", "")
		return st == 401
	})
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	w := time.Duration(0)
	if f := first.Load(); f != 0 {
		w = time.Duration(last.Load() - f)
	}
	fmt.Printf("joining node: whoami without a token answered auth:false %d times, over %v\n", off.Load(), w.Round(time.Millisecond))
	return nil
}

// sessionsOfOne opens sessions as one principal under a new holder name
// each, 8 at a time, until a refusal or limit, and reports how many it
// opened and how fast.
func sessionsOfOne(leader *node, newToken func(string) (string, error), limit int) error {
	tok, err := newToken("bob")
	if err != nil {
		return err
	}
	var opened, next atomic.Int64
	var refusal atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(limit) || refusal.Load() != nil {
					return
				}
				st, m, err := call("POST", leader.client, "/v1/session/open", tok, fmt.Sprintf(`{"holder":"bob/%d","ttl_ms":600000}`, i))
				if err != nil {
					refusal.Store(err.Error())
					return
				}
				if st != 200 {
					b, _ := json.Marshal(m)
					refusal.Store(fmt.Sprintf("%d %s", st, bytes.TrimSpace(b)))
					return
				}
				opened.Add(1)
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	why := "none"
	if r, ok := refusal.Load().(string); ok {
		why = r
	}
	fmt.Printf("sessions of one principal (holders bob/1, bob/2, ...): %d opened in %v (%.0f/s); first refusal: %s\n",
		opened.Load(), d.Round(time.Millisecond), float64(opened.Load())/d.Seconds(), why)
	return nil
}
