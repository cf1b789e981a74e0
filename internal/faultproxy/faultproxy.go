// Package faultproxy is an in-process TCP proxy that puts network faults
// between a client and a healthy server, under the control of the code that
// owns it: pass traffic, blackhole it as a hung server would, drop only the
// replies, or reset connections.
//
// It exists for demos and chaos tests that need a fault they can switch on
// and off at an exact moment, on a machine where nothing but Go is
// installed: a paused redis-server needs the binary and Unix signals, a
// miniredis behind this proxy needs neither.
package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	// Pass forwards bytes both ways unchanged.
	Pass Mode = iota
	// Blackhole behaves like a hung server: connections stay open and new
	// ones are accepted, but every byte in either direction is read and
	// thrown away, so nothing is ever answered. Clients see timeouts.
	//
	// A connection that lost bytes can never line up requests and replies
	// again, so switching back to Pass resets those connections; ones that
	// stayed idle through the blackhole carry on as if nothing happened.
	Blackhole
	// Reset behaves like a firewall that rejects the service: every open
	// connection is reset at once (TCP RST), and new connections are
	// accepted and reset straight away. Clients see "connection reset by
	// peer" or EOF, never a timeout.
	Reset
	// LoseOneReply lets requests through and loses the next reply: the
	// first connection the server answers is reset instead of getting the
	// answer, and the proxy returns to Pass. The server has run the
	// command; the client sees its connection reset after sending it, the
	// case where a retry runs a command twice. LoseReplyTo picks the
	// request whose reply is lost.
	LoseOneReply
	// Hangup behaves like a proxy or load balancer whose backend is gone:
	// every open connection is closed, and new connections are accepted
	// and hung up straight away with an orderly FIN. Clients connect fine
	// and see EOF on their first read, never a timeout and never a refused
	// dial.
	Hangup
	// DropReplies behaves like a node that hangs after the send: requests
	// go through and the server runs them, but every byte it sends back is
	// thrown away, so nothing is ever answered. Clients see timeouts, and
	// the server's data shows what it ran.
	//
	// As with Blackhole, switching back to Pass resets the connections
	// that lost bytes; idle ones carry on.
	DropReplies

	modeEnd // one past the last mode
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	case LoseOneReply:
		return "lose-one-reply"
	case Hangup:
		return "hangup"
	case DropReplies:
		return "drop-replies"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// dialTimeout bounds the proxy's own dial to the target. The target is on
// this machine; a dial that takes longer means it is gone.
const dialTimeout = 2 * time.Second

// bufSize is the copy buffer per direction: a Redis command or reply of
// ordinary size fits in one read.
const bufSize = 32 << 10

// Proxy listens on a loopback port and relays every connection to one target
// address. The zero value is not usable; call New. All methods are safe for
// concurrent use.
//
// A Proxy owns three kinds of goroutine: one accept loop, and two copiers per
// relayed connection. Close stops them all before it returns.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup // every goroutine the proxy started

	mu     sync.Mutex
	mode   Mode           // guarded by mu
	lose   []byte         // guarded by mu; with LoseOneReply, what the request whose reply is lost contains (LoseReplyTo); nil: any
	links  map[*link]bool // guarded by mu; open relays
	closed bool           // guarded by mu
	stats  Stats          // guarded by mu
	delay  time.Duration  // guarded by mu; how long each read from the server is held (SetReplyDelay)
	stubs  [][]string     // guarded by mu; requests sent to the server as PING (Stub)
}

// link is one relayed connection.
type link struct {
	client, server net.Conn
	// tainted is set once bytes have been swallowed (Blackhole,
	// DropReplies): the client's request or the server's reply is lost,
	// so the stream can never line up again. Guarded by Proxy.mu.
	tainted bool
	// marked is set once the client has sent the request LoseReplyTo
	// waits for: the next reply on this link is the one lost. Guarded by
	// Proxy.mu.
	marked bool
	// wmu serialises writes to the client: the relayed replies and the
	// pushes Push writes between them.
	wmu  sync.Mutex
	once sync.Once
}

// Stats counts what the proxy has done since New.
type Stats struct {
	Accepted  int   // connections accepted from clients
	Open      int   // connections currently relayed
	Reset     int   // connections reset (Reset mode, ResetConns, or tainted by a blackhole or dropped replies)
	Swallowed int64 // bytes thrown away in Blackhole and DropReplies mode
}

// New starts a proxy in Pass mode on a free loopback port, relaying to
// target (host:port). Close it when done.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening: %w", err)
	}
	p := &Proxy{target: target, ln: ln, links: make(map[*link]bool)}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy relays to.
func (p *Proxy) Target() string { return p.target }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Open = len(p.links)
	return s
}

// SetMode switches the proxy to m. The change applies to open connections
// immediately: entering Reset resets them all, entering Hangup closes them
// all, and switching to Pass resets those that lost bytes (see Blackhole).
func (p *Proxy) SetMode(m Mode) error {
	if m < Pass || m >= modeEnd {
		return fmt.Errorf("faultproxy: unknown mode %d", int(m))
	}
	return p.setMode(m, nil)
}

// LoseReplyTo switches to LoseOneReply for one request: the reply lost is
// the next one on the first connection whose request contains request (a
// key's name, say), sent from now on; other connections pass meanwhile. It
// is for clients that talk to the server on their own behalf (topology
// refreshes, health checks), whose replies LoseOneReply could lose
// instead.
func (p *Proxy) LoseReplyTo(request string) error {
	if request == "" {
		return errors.New("faultproxy: LoseReplyTo needs a request to look for")
	}
	return p.setMode(LoseOneReply, []byte(request))
}

func (p *Proxy) setMode(m Mode, lose []byte) error {
	p.mu.Lock()
	p.mode, p.lose = m, lose
	var doomed []*link
	for l := range p.links {
		l.marked = false
		if m == Reset || m == Hangup || (m == Pass && l.tainted) {
			doomed = append(doomed, l)
		}
	}
	p.mu.Unlock()
	for _, l := range doomed {
		if m == Hangup {
			p.drop(l)
		} else {
			p.reset(l)
		}
	}
	return nil
}

// ResetConns resets every open connection once, whatever the mode, as a
// server does when it kills its clients (CLIENT KILL, a restart). New
// connections are then treated according to the mode. It returns the number
// of connections reset.
func (p *Proxy) ResetConns() int {
	p.mu.Lock()
	doomed := make([]*link, 0, len(p.links))
	for l := range p.links {
		doomed = append(doomed, l)
	}
	p.mu.Unlock()
	for _, l := range doomed {
		p.reset(l)
	}
	return len(doomed)
}

// Close stops accepting, closes every relayed connection and waits for all
// of the proxy's goroutines to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	var err error
	if !already {
		err = p.ln.Close()
	}
	for _, l := range links {
		l.close(false)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary accept errors (EMFILE and the like): back off
			// briefly rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.open(c)
	}
}

// open dials the target for a freshly accepted client and starts relaying.
// It dials in every mode: the target itself is healthy, and a connection
// accepted during a blackhole may live on after it.
func (p *Proxy) open(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	p.stats.Accepted++
	mode := p.mode
	if mode == Reset {
		p.stats.Reset++
	}
	p.mu.Unlock()
	switch mode {
	case Reset:
		resetConn(client)
		return
	case Hangup:
		hangUp(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		// The target is gone: the client sees its connection reset, as
		// it would from a load balancer with no backend.
		resetConn(client)
		return
	}
	l := &link{client: client, server: server}
	// The mode is read under the same lock that registers the link, so a
	// concurrent SetMode(Reset) either sees the link or is seen here.
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		l.close(false)
		return
	case p.mode == Reset:
		p.stats.Reset++
		p.mu.Unlock()
		l.close(true)
		return
	case p.mode == Hangup:
		p.mu.Unlock()
		l.close(false)
		return
	}
	p.links[l] = true
	p.wg.Add(2)
	p.mu.Unlock()
	go p.copy(l, l.server, l.client)
	go p.copy(l, l.client, l.server)
}

// copy relays src to dst until either side fails, then closes the link.
func (p *Proxy) copy(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer p.drop(l)
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			// Checking the mode and tainting the link under the same
			// lock as SetMode scans for tainted links means no link can
			// be tainted after a switch to Pass has decided to spare it.
			p.mu.Lock()
			if p.mode == LoseOneReply && src == l.client && p.lose != nil && bytes.Contains(buf[:n], p.lose) {
				l.marked = true
			}
			if p.mode == LoseOneReply && src == l.server && (p.lose == nil || l.marked) {
				p.mode, p.lose = Pass, nil
				p.mu.Unlock()
				p.reset(l)
				return
			}
			swallow := p.mode.swallows(src == l.server)
			if swallow {
				l.tainted = true
				p.stats.Swallowed += int64(n)
			}
			var delay time.Duration
			out := buf[:n]
			if src == l.server {
				delay = p.delay
			} else if len(p.stubs) > 0 {
				out = stub(out, p.stubs)
			}
			p.mu.Unlock()
			if !swallow {
				if delay > 0 {
					time.Sleep(delay)
				}
				if err := l.write(dst, out); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes b to dst, the link's client or its server; writes to the
// client hold wmu.
func (l *link) write(dst net.Conn, b []byte) error {
	if dst == l.client {
		l.wmu.Lock()
		defer l.wmu.Unlock()
	}
	_, err := dst.Write(b)
	return err
}

// swallows reports whether m throws away what is read from the server
// (reply) or from the client.
func (m Mode) swallows(reply bool) bool {
	switch m {
	case Pass, LoseOneReply:
		return false
	case DropReplies:
		return reply
	}
	return true
}

// drop removes l and closes both of its connections.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.close(false)
}

// reset removes l and resets the client's side.
func (p *Proxy) reset(l *link) {
	p.mu.Lock()
	if p.links[l] {
		p.stats.Reset++
	}
	delete(p.links, l)
	p.mu.Unlock()
	l.close(true)
}

// close closes both connections once; with rst the client gets a TCP reset
// rather than an orderly FIN.
func (l *link) close(rst bool) {
	l.once.Do(func() {
		if rst {
			resetConn(l.client)
		} else {
			_ = l.client.Close()
		}
		_ = l.server.Close()
	})
}

// hangUpDrain bounds how long a hung-up connection is read after its FIN,
// waiting for the client to close its side.
const hangUpDrain = time.Second

// hangUp sends c's peer a FIN at once and closes c once the peer has closed
// its side too, or after hangUpDrain. Closing straight away would make the
// kernel answer whatever the client has already sent with a reset instead.
func hangUp(c net.Conn) {
	defer c.Close()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.CloseWrite()
	_ = tc.SetReadDeadline(time.Now().Add(hangUpDrain))
	_, _ = io.Copy(io.Discard, tc)
}

// resetConn closes c with SO_LINGER 0, which makes the kernel send RST
// instead of FIN: the peer's next read fails with ECONNRESET.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
