//go:build unix

package redisguard

import (
	"net"
	"syscall"
)

// dataWaiting reports whether conn's socket holds data not read yet,
// looking through wrappers (TLS) that expose the connection underneath.
// It never blocks, reads nothing and leaves the socket's deadlines alone:
// go-redis may read again under the same deadline.
func dataWaiting(conn net.Conn) bool {
	for range 8 {
		if sc, ok := conn.(syscall.Conn); ok {
			return peek(sc)
		}
		inner, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		conn = inner.NetConn()
	}
	return false
}

func peek(sc syscall.Conn) bool {
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	// Control, not Read: Read refuses a socket whose read deadline has
	// passed, which is the socket this looks into.
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = n > 0 && err == nil
	})
	return waiting
}
