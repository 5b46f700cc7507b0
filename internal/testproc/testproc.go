// Package testproc runs the database servers the process-tier tests start
// for themselves (internal/mysqltest's mariadbd, internal/redistest's
// redis-server): a child process, as an unprivileged user when the tests
// run as root, that dies with the test binary, and that a test can kill
// with SIGKILL or freeze with SIGSTOP and start again on the same data
// (Server).
package testproc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync"
	"syscall"
)

// User is who a server runs as: nil when the tests are not root (the
// server runs as the tests do), else the first of names that exists, with
// "nobody" last.
type User struct {
	Name     string
	Uid, Gid uint32
}

// LookupUser picks the user a server runs as when we are root (nil
// otherwise); names are tried in order, then nobody.
func LookupUser(names ...string) (*User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, n := range append(names, "nobody") {
		if n == "" {
			continue
		}
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &User{Name: n, Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root, and none of the users %v exists to run the server", names)
}

// Chown gives dir to u (nothing when u is nil).
func (u *User) Chown(dir string) error {
	if u == nil {
		return nil
	}
	return os.Chown(dir, int(u.Uid), int(u.Gid))
}

// Command is name with args, run as u.
func (u *User) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = sysProcAttr()
	if u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.Uid, Gid: u.Gid}
	}
	return cmd
}

// Proc is a running server process.
type Proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	output bytes.Buffer
}

type lockedWriter struct{ p *Proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.output.Len() < 1<<20 {
		w.p.output.Write(b)
	}
	return len(b), nil
}

// Start starts cmd (from User.Command), collecting what it prints.
func Start(cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Output is what the process printed so far (its first MiB).
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits for the process to be gone. A stopped
// (SIGSTOP) process dies as it is, without running another instruction:
// no SIGCONT first, which would let it serve what it had not read.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// FreePort is a loopback TCP port nobody listened on a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ErrExited: the server exited before it was ready.
var ErrExited = errors.New("testproc: the server exited")

// Server is a server process of a test's own that the test may crash
// (Kill), freeze and thaw (Signal with SIGSTOP, SIGCONT) and start again
// on the same data (Restart). Run starts the process and waits until it
// answers, as the server's package knows how.
type Server struct {
	Run func() (*Proc, error)

	mu   sync.Mutex
	proc *Proc
}

// Start starts the server with Run.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runLocked()
}

func (s *Server) runLocked() error {
	p, err := s.Run()
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// Kill crashes the server with SIGKILL and waits until it is gone.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.Kill()
}

// Signal sends sig to the server.
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc.Signal(sig)
}

// Restart kills the server if it still runs and starts it again.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.proc.Exited() {
		s.proc.Kill()
	}
	return s.runLocked()
}

// Close kills the server if it runs.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.Exited() {
		s.proc.Kill()
	}
}
