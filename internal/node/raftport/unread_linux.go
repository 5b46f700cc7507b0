package raftport

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// unread is how many bytes c's socket holds that nobody has read yet: a
// peer's first flight waiting for its handshake's goroutine. 0 when it
// cannot tell.
func unread(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
			n = v
		}
	})
	return n
}
