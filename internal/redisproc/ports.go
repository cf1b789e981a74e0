package redisproc

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Ports are drawn from below the Linux ephemeral range (32768 and up), so the
// kernel never hands one of them to an outgoing connection while a killed
// server is down, and Restart can bind the same port again. The cluster bus
// listens on port+busOffset, which stays below 32768 as well.
const (
	portMin   = 12000
	portMax   = 22000 // exclusive
	busOffset = 10000

	// portTries bounds the search; with 10000 candidates and a handful of
	// parallel test processes, running out means something else is wrong.
	portTries = 200
)

// reserved holds the ports this process has handed out and not yet released.
// A probe bind cannot see them while their server is still starting (or is
// killed, waiting for Restart), so without this two servers of one test binary
// could be given the same port.
var reserved struct {
	mu    sync.Mutex
	ports map[int]bool // guarded by mu
}

// reservePort picks a random port whose client and cluster-bus ports are both
// free right now. Another process may still take it before redis binds; the
// caller detects that and starts over with a new port.
func reservePort() (int, error) {
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	for range portTries {
		p := portMin + rand.IntN(portMax-portMin)
		if reserved.ports[p] || !canBind(p) || !canBind(p+busOffset) {
			continue
		}
		if reserved.ports == nil {
			reserved.ports = make(map[int]bool)
		}
		reserved.ports[p] = true
		return p, nil
	}
	return 0, errors.New("redisproc: no free loopback port pair found")
}

func releasePort(p int) {
	reserved.mu.Lock()
	defer reserved.mu.Unlock()
	delete(reserved.ports, p)
}

func canBind(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
