// Command fillattack measures what a fencelock server holds for
// connections that have not authenticated (issue 24, items 2 and 3).
//
// Mode "frames" (the fill attack): each of --conns connections sends the
// framed preface and then --send bytes of a frame whose length field
// declares --declare bytes, and stops. Mode "raft": each connection
// dials the raft port and sends nothing. Meanwhile the server's resident
// set (VmRSS of /proc/PID/status, --pid) is sampled; at the end the tool
// prints it before, at its peak and at the end, and how many
// connections the server closed.
//
//	fillattack --addr 127.0.0.1:7470 --pid 1234 --conns 100
//	fillattack --addr 127.0.0.1:7470 --pid 1234 --tls-ca ca.pem --conns 60
//	fillattack --mode raft --addr 127.0.0.1:7480 --pid 1234 --conns 1100
//
// It is a measurement, not a test: it asserts nothing. Run it only
// against a server you started.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/framing"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fillattack:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fillattack", flag.ContinueOnError)
	mode := fs.String("mode", "frames", "frames (the fill attack on the client port) or raft (idle connections to the raft port)")
	addr := fs.String("addr", "", "the port to attack (host:port)")
	pid := fs.Int("pid", 0, "the server's process id, whose VmRSS is sampled")
	conns := fs.Int("conns", 100, "connections")
	declare := fs.Int("declare", framing.MaxFrame, "frames: the length each frame declares")
	send := fs.Int("send", framing.MaxFrame-1, "frames: bytes of the frame each connection sends")
	hold := fs.Duration("hold", 5*time.Second, "how long to hold the connections after the last is open")
	caFile := fs.String("tls-ca", "", "frames: dial TLS trusting this CA (no client certificate)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" || *pid == 0 {
		return errors.New("--addr and --pid are required")
	}
	var tlsCfg *tls.Config
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no certificate", *caFile)
		}
		host, _, _ := net.SplitHostPort(*addr)
		tlsCfg = &tls.Config{RootCAs: pool, ServerName: host}
	}
	before, err := rss(*pid)
	if err != nil {
		return err
	}
	var peak atomic.Int64
	peak.Store(before)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if v, err := rss(*pid); err == nil && v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()

	var (
		wg                      sync.WaitGroup
		opened, closed, refused atomic.Int64
		sent                    atomic.Int64
		mu                      sync.Mutex
		open                    []net.Conn
		firstErr                error
	)
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(*addr, tlsCfg, *mode)
			if err != nil {
				refused.Add(1)
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			opened.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			if *mode == "frames" {
				n, _ := fill(c, *declare, *send)
				sent.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	time.Sleep(*hold)
	// A connection the server closed reads EOF (or a reset) at once.
	for _, c := range open {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			closed.Add(1)
		}
	}
	end, _ := rss(*pid)
	close(stop)
	<-sampled
	for _, c := range open {
		c.Close()
	}
	mib := func(kb int64) string { return fmt.Sprintf("%.1f MB", float64(kb)/1000) }
	fmt.Printf("mode=%s conns=%d opened=%d refused_at_dial=%d closed_by_server=%d sent=%d bytes\n",
		*mode, *conns, opened.Load(), refused.Load(), closed.Load(), sent.Load())
	fmt.Printf("server RSS: before %s, peak %s, after holding %v %s\n", mib(before), mib(peak.Load()), *hold, mib(end))
	if firstErr != nil {
		fmt.Printf("first dial error: %v\n", firstErr)
	}
	return nil
}

func dial(addr string, cfg *tls.Config, mode string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if mode == "raft" {
		return c, nil
	}
	if cfg != nil {
		tc := tls.Client(c, cfg)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		tc.SetDeadline(time.Time{})
		c = tc
	}
	if _, err := c.Write([]byte(framing.Preface)); err != nil {
		c.Close()
		return nil, err
	}
	echo := make([]byte, len(framing.Preface))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := readFull(c, echo); err != nil || string(echo) != framing.Preface {
		c.Close()
		return nil, fmt.Errorf("preface: %q %v", echo, err)
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

// fill writes a frame header declaring declare bytes, then send bytes of
// it; it stops at the first error (the server closed).
func fill(c net.Conn, declare, send int) (int, error) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(declare))
	if _, err := c.Write(hdr[:]); err != nil {
		return 0, err
	}
	chunk := make([]byte, 64<<10)
	n := 0
	for n < send {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		m, err := c.Write(chunk[:min(len(chunk), send-n)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func readFull(c net.Conn, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rss is the process's resident set in kB.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}
