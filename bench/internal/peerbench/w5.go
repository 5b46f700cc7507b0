package peerbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// runW5 is Chubby's scale (issue 17): W5Sessions sessions, each of its own
// holder as every Chubby client is, opened by W5Workers clients over the
// system's few connections and each kept alive at TTL/3 on W3's schedule,
// with the server's CPU and resident memory read from /proc over the
// measured window. The Chubby paper reports a 2-CPU master serving about
// 90,000 clients. The server must run on this machine.
func runW5(ctx context.Context, sys System, p Params) (Result, error) {
	pid, err := serverPID(sys, p)
	if err != nil {
		return Result{System: sys.Name(), Workload: W5}, fmt.Errorf("peerbench: %s: w5: find server process: %w", sys.Name(), err)
	}
	use := &ServerUse{PID: pid}
	var cpuErr error
	res, err := runKeepAlive(ctx, sys, p, keepAlive{workload: W5, n: p.W5Sessions, ttl: p.W5TTL, workers: p.W5Workers,
		take: func(ctx context.Context, c Client, _ string, ttl time.Duration) (Lease, error) {
			so, ok := c.(SessionOpener)
			if !ok {
				return nil, fmt.Errorf("%w: %s has no sessions a client can open", ErrNotSupported, sys.Name())
			}
			return so.OpenSession(ctx, ttl)
		},
		window: func() func() {
			t0, start := ProcessCPU(pid)
			return func() {
				t1, end := ProcessCPU(pid)
				if cpuErr = errors.Join(start, end); cpuErr == nil {
					use.CPU = (t1 - t0).Seconds() / p.Duration.Seconds()
				}
				use.RSS, end = ProcessRSS(pid)
				cpuErr = errors.Join(cpuErr, end)
			}
		}})
	if err != nil || res.Skipped != "" {
		return res, err
	}
	if cpuErr != nil {
		return res, fmt.Errorf("peerbench: %s: w5: %w", sys.Name(), cpuErr)
	}
	res.Server = use
	return res, nil
}

// ServerUse is what the server process used during a run (W5).
type ServerUse struct {
	PID int
	CPU float64 // cores: CPU seconds per second of the measured window
	RSS int64   // resident bytes at the end of the window
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux port Go runs on.
const clockTicks = 100

// ProcessCPU is the user plus system CPU time pid has used.
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(data)
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/PID/stat line. The command name (field 2) is in parentheses and
// may hold spaces, so the fields are counted after its closing one.
func parseStatCPU(data []byte) (time.Duration, error) {
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("peerbench: /proc stat: no command name")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("peerbench: /proc stat: %d fields after the name", len(f))
	}
	var ticks int64
	for _, v := range f[11:13] { // fields 14 and 15
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("peerbench: /proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
