package peerbench

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS([]byte("Name:\tx\nVmPeak:\t  100 kB\nVmRSS:\t   2048 kB\nThreads:\t1\n"))
	if err != nil || got != 2048*1024 {
		t.Errorf("parseVmRSS = %d, %v; want %d", got, err, 2048*1024)
	}
	if _, err := parseVmRSS([]byte("Name:\tx\n")); err == nil {
		t.Error("parseVmRSS without VmRSS: no error")
	}
}

func TestListenInodes(t *testing.T) {
	table := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1CEE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1CEE 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:F8A6 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0
`)
	got := listenInodes(table, 0x1CEE) // 7406
	if len(got) != 1 || got[0] != "4242" {
		t.Errorf("listenInodes = %v, want [4242] (the LISTEN line only)", got)
	}
}

func TestListenerPIDFindsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := ListenerPID(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if pid != os.Getpid() {
		t.Errorf("ListenerPID = %d, want %d", pid, os.Getpid())
	}
	if rss, err := ProcessRSS(pid); err != nil || rss <= 0 {
		t.Errorf("ProcessRSS = %d, %v", rss, err)
	}
}

func TestZkPredecessor(t *testing.T) {
	children := []string{"lock-0000000012", "lock-0000000007", "lock-0000000010"}
	tests := []struct {
		seq  int64
		want string
	}{
		{7, ""},
		{10, "lock-0000000007"},
		{12, "lock-0000000010"},
	}
	for _, tt := range tests {
		got, err := zkPredecessor(children, tt.seq)
		if err != nil || got != tt.want {
			t.Errorf("zkPredecessor(%d) = %q, %v; want %q", tt.seq, got, err, tt.want)
		}
	}
	if _, err := zkPredecessor([]string{"junk"}, 1); err == nil {
		t.Error("zkPredecessor accepted a node without a sequence")
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses, as /proc allows:
	// utime 250 and stime 50 ticks are 3 s of CPU.
	line := "4242 (fence lock) (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 100 0 0\n"
	got, err := parseStatCPU([]byte(line))
	if err != nil || got != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "4242 no name 1 2 3", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 x 50 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
	if cpu, err := ProcessCPU(os.Getpid()); err != nil || cpu < 0 {
		t.Errorf("ProcessCPU(self) = %v, %v", cpu, err)
	}
}
