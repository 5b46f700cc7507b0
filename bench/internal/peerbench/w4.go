package peerbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Snapshotter is implemented by systems that can report the size of the
// state they would restart from (Redis: an RDB written by SAVE; fencelock:
// its data directory).
type Snapshotter interface {
	SnapshotBytes(ctx context.Context) (int64, error)
}

// w4TTL outlives any W4 run; the locks are released at the end anyway.
const w4TTL = time.Hour

// serverPID is Params.W4PID, or the process listening on the system's
// address.
func serverPID(sys System, p Params) (int, error) {
	if p.W4PID != 0 {
		return p.W4PID, nil
	}
	addr := DefaultAddrs[sys.Name()]
	if a, ok := sys.(interface{ addr() string }); ok {
		addr = a.addr()
	}
	return ListenerPID(addr)
}

// runW4 takes W4Locks locks and reads the server's resident memory before
// and after. The server must run on this machine: its RSS is read from /proc.
func runW4(ctx context.Context, sys System, p Params) (Result, error) {
	res := Result{System: sys.Name(), Workload: W4}
	pid, err := serverPID(sys, p)
	if err != nil {
		return res, fmt.Errorf("peerbench: %s: w4: find server process: %w", sys.Name(), err)
	}
	cs, err := openClients(ctx, sys, p.W4Workers)
	if err != nil {
		return res, err
	}
	defer closeClients(cs)
	before, err := ProcessRSS(pid)
	if err != nil {
		return res, fmt.Errorf("peerbench: %s: w4: %w", sys.Name(), err)
	}

	start := time.Now()
	held, errs := holdMany(ctx, cs, p.W4Locks, p.KeyPrefix+"/w4/", w4TTL, hold)
	if !p.W4Keep {
		defer releaseAll(context.WithoutCancel(ctx), held)
	}
	if skipped, err := holdOutcome(ctx, sys, W4, errs); skipped != "" || err != nil {
		res.Skipped = skipped
		return res, err
	}
	setup := time.Since(start)
	after, err := ProcessRSS(pid)
	if err != nil {
		return res, fmt.Errorf("peerbench: %s: w4: %w", sys.Name(), err)
	}
	sc := &Scale{Locks: p.W4Locks, RSSBefore: before, RSSAfter: after, Setup: setup, SnapshotBytes: -1}
	sc.BytesPerLock = float64(after-before) / float64(p.W4Locks)
	if sn, ok := sys.(Snapshotter); ok {
		if n, err := sn.SnapshotBytes(ctx); err == nil {
			sc.SnapshotBytes = n
		} else {
			res.FirstError = "snapshot: " + err.Error()
		}
	}
	res.Scale = sc
	res.Elapsed, res.Ops = setup, int64(p.W4Locks)
	res.Rate = float64(p.W4Locks) / setup.Seconds()
	return res, nil
}

// ProcessRSS reads a process's resident set size in bytes from /proc.
func ProcessRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read rss: %w", err)
	}
	return parseVmRSS(data)
}

func parseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmRSS %q: %w", f[1], err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("no VmRSS line in /proc status")
}

// ListenerPID finds the process listening on addr (host:port, TCP, IPv4 or
// IPv6) through /proc/net/tcp* and the processes' socket descriptors. It
// needs permission to read other processes' fd tables (root, or the same
// user).
func ListenerPID(addr string) (int, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q: %w", portStr, err)
	}
	var inodes []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		inodes = append(inodes, listenInodes(data, uint16(port))...)
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d", port)
	}
	want := map[string]bool{}
	for _, in := range inodes {
		want["socket:["+in+"]"] = true
	}
	procs, err := filepath.Glob("/proc/[0-9]*/fd")
	if err != nil {
		return 0, err
	}
	for _, fdDir := range procs {
		ents, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, e := range ents {
			if e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			if t, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && want[t] {
				return strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
			}
		}
	}
	return 0, fmt.Errorf("no readable process owns the listener on port %d", port)
}

// listenInodes returns the socket inodes of /proc/net/tcp lines in state
// LISTEN (0A) on port.
func listenInodes(table []byte, port uint16) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err == nil && uint16(p) == port {
			out = append(out, f[9])
		}
	}
	return out
}

// dirSize adds up the sizes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}
