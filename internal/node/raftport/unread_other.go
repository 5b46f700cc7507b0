//go:build !linux

package raftport

import "net"

// unread is 0 where the socket's unread bytes are not looked at: the
// raft port's eviction then goes by age alone.
func unread(net.Conn) int { return 0 }
