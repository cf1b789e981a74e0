package redisguard

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connSet holds the connections a node's ordinary clients have open, and
// the dials in progress for them, so that an opening breaker answers
// everyone waiting on the node at once (cut): a command on one of its
// connections fails as soon as the connection is closed, and one queued for
// a connection finds its dial refused (nodeGuard.DialHook). Without it they
// would each wait out ReadTimeout or DialTimeout on a node that is known to
// be down. The hang watch listens to the same connections (listen).
//
// The zero connSet is ready. Its lock is taken when a connection is dialled
// or closed and by the hang watch, never by a command.
type connSet struct {
	mu    sync.Mutex
	conns map[*nodeConn]struct{}           // guarded by mu
	dials map[*context.CancelFunc]struct{} // guarded by mu
	// subs are the node's subscription connections, which the hang watch
	// listens to beside the others and cut leaves alone (they move:
	// subscription_move.go), each with its last read as listen last saw
	// it. Guarded by mu.
	subs map[*subscriptionConn]int64
	// closedHeard says that a connection closed since listen last ran
	// had read something listen did not see. Guarded by mu.
	closedHeard bool
}

// track returns conn, a connection just dialled, registered in s until it
// is closed; watch, if set, is woken when the connection is asked
// something. The connection it returns lets go-redis's pool check
// its socket as before (syscall.Conn) when conn does.
func (s *connSet) track(conn net.Conn, watch *hangWatch) net.Conn {
	tc := &nodeConn{Conn: conn, set: s, watch: watch}
	sc, isSys := conn.(syscall.Conn)
	tc.sys = isSys
	s.mu.Lock()
	if s.conns == nil {
		s.conns = make(map[*nodeConn]struct{})
	}
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	if isSys {
		return &nodeSysConn{nodeConn: tc, sys: sc}
	}
	return tc
}

// listenTo registers c, a subscription connection to the node, with the
// hang watch until forget.
func (s *connSet) listenTo(c *subscriptionConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = make(map[*subscriptionConn]int64)
	}
	s.subs[c] = c.lastRead.Load()
}

// forget undoes listenTo.
func (s *connSet) forget(c *subscriptionConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, c)
}

// dialing returns ctx for a dial that cut cancels, and the function to
// call when the dial has ended.
func (s *connSet) dialing(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	key := &cancel
	s.mu.Lock()
	if s.dials == nil {
		s.dials = make(map[*context.CancelFunc]struct{})
	}
	s.dials[key] = struct{}{}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(s.dials, key)
		s.mu.Unlock()
		cancel()
	}
}

// cut closes every connection in s and cancels every dial in progress.
func (s *connSet) cut() {
	s.mu.Lock()
	conns := make([]*nodeConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	for cancel := range s.dials {
		(*cancel)()
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// len is the number of connections tracked.
func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// dropIdle retires the connections that wait for no reply, so that the
// commands after them dial afresh; a command in flight keeps its
// connection until it is answered. A connection with a socket is not
// closed here, where a command may have just taken it from the pool and be
// about to write: it is marked, and go-redis's pool, which looks into the
// socket of every connection it hands out (nodeSysConn.SyscallConn),
// discards it the next time instead. One without a socket is closed.
func (s *connSet) dropIdle() {
	s.mu.Lock()
	var idle []*nodeConn
	for c := range s.conns {
		if c.state.Load()&connWaiting != 0 {
			continue
		}
		if c.sys {
			c.dropped.Store(true)
		} else {
			idle = append(idle, c)
		}
	}
	s.mu.Unlock()
	for _, c := range idle {
		_ = c.Close()
	}
}

// waiting reports whether one of the connections waits for a reply.
func (s *connSet) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.Load()&connWaiting != 0 {
			return true
		}
	}
	for c := range s.subs {
		if c.asked() {
			return true
		}
	}
	return false
}

// listen reports what the node's connections, its subscriptions' among
// them, carried since the last call, for the hang watch, its only caller:
// heard says the node sent something on one of them, and waiting that one
// of them has sent the node something it has not answered yet (on a
// subscription's, most often go-redis's health-check PING). A command that
// never reached the node (it waited for a connection, or its caller gave up
// before it was written) is on none of them: only the node's own silence
// makes it look hung.
//
// kept says that one of them has been found waiting by hangKeptListens
// calls in a row, with nothing read in between: the node kept it waiting
// for hangKeptListens-1 ticks at least. A subscription's question counts
// at once: no caller's deadline cuts it short.
func (s *connSet) listen() (heard, waiting, kept bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heard, s.closedHeard = s.closedHeard, false
	for c := range s.conns {
		st := c.state.Load()
		reads := st >> 1
		switch {
		case st&connWaiting == 0:
			c.waitTicks = 0
		case reads != c.heard:
			c.waitTicks = 1 // answered, then asked again
		case c.waitTicks < hangKeptListens:
			c.waitTicks++
		}
		if reads != c.heard {
			c.heard, heard = reads, true
		}
		waiting = waiting || st&connWaiting != 0
		kept = kept || c.waitTicks >= hangKeptListens
	}
	for c, seen := range s.subs {
		if read := c.lastRead.Load(); read != seen {
			s.subs[c], heard = read, true
		}
		if c.asked() {
			// A subscriber that does not keep up leaves the node's
			// answer in the socket, unread: the node did answer.
			if dataWaiting(c.Conn) {
				heard = true
			} else {
				waiting, kept = true, true
			}
		}
	}
	return heard, waiting, kept
}

// answeredUnread reports whether a connection that waits for a reply has
// one in its socket that nobody has read yet. It looks into each such
// socket, and is asked only of a node about to be found hung.
func (s *connSet) answeredUnread() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.Load()&connWaiting != 0 && dataWaiting(c.Conn) {
			return true
		}
	}
	return false
}

// nodeConn is a connection registered in a connSet until it is closed.
type nodeConn struct {
	net.Conn
	set *connSet
	// state is what the connection carried, for the hang watch: connWaiting
	// while something written to it has not been answered, and above that
	// bit the number of reads that returned data. Only the goroutine that
	// holds the connection writes it (go-redis hands a connection to one at
	// a time), so plain loads and stores keep it; the watch reads it.
	state atomic.Uint32
	heard uint32 // state's read count as listen last saw it; guarded by set.mu
	// waitTicks counts the listens in a row that found the connection
	// waiting with nothing read since the one before. Guarded by set.mu.
	waitTicks uint8
	watch     *hangWatch // woken when the connection starts to wait; nil if none
	once      sync.Once
	// sys: the connection is a nodeSysConn's; dropped: dropIdle retired
	// it, and the pool is to discard it.
	sys     bool
	dropped atomic.Bool
}

// connWaiting is the bit of nodeConn.state set by a write and cleared by
// the next read that returns data.
const connWaiting = 1

func (c *nodeConn) Write(p []byte) (int, error) {
	if st := c.state.Load(); st&connWaiting == 0 {
		c.state.Store(st | connWaiting)
		if c.watch != nil {
			c.watch.wake()
		}
	}
	return c.Conn.Write(p)
}

// Read is the connection's, and on a read that timed out with nothing read
// it looks whether the node had in fact sent something: a caller whose
// deadline passed gives up before its reply is read (go-redis then closes
// the connection unread), and the hang watch must not take a node whose
// replies only come later than its callers wait for a silent one.
func (c *nodeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 || (err != nil && errors.Is(err, os.ErrDeadlineExceeded) && dataWaiting(c.Conn)) {
		c.state.Store(c.state.Load()&^connWaiting + 2)
	}
	return n, err
}

func (c *nodeConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		if c.state.Load()>>1 != c.heard {
			// Most often a reply that came after its caller gave up:
			// go-redis closes the connection at once.
			c.set.closedHeard = true
		}
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// NetConn lets go-redis reach the connection underneath, as it does
// through TLS, to peek for pushed data.
func (c *nodeConn) NetConn() net.Conn { return c.Conn }

// nodeSysConn is a nodeConn over a connection that exposes its
// socket, which go-redis's pool peeks at to find connections the server
// closed while they were idle.
type nodeSysConn struct {
	*nodeConn
	sys syscall.Conn
}

// SyscallConn fails once dropIdle has retired the connection, which the
// pool takes for a connection that must not be used.
func (c *nodeSysConn) SyscallConn() (syscall.RawConn, error) {
	if c.dropped.Load() {
		return nil, errDroppedSocket
	}
	return c.sys.SyscallConn()
}

var errDroppedSocket = errors.New("redisguard: the connection was retired; the pool is to discard it")

// refusedConn is what a pool dial the guard refused, or that failed,
// returns to go-redis (see nodeGuard.DialHook): every read and write fails
// at once with refusedError{err}, so the handshake of the connection fails
// and the guard hands err to the command waiting for it. It exposes no
// socket: go-redis's pool discards it rather than keep it idle.
type refusedConn struct{ err error }

func (c refusedConn) Read([]byte) (int, error)         { return 0, refusedError{c.err} }
func (c refusedConn) Write([]byte) (int, error)        { return 0, refusedError{c.err} }
func (c refusedConn) Close() error                     { return nil }
func (c refusedConn) LocalAddr() net.Addr              { return refusedAddr{} }
func (c refusedConn) RemoteAddr() net.Addr             { return refusedAddr{} }
func (c refusedConn) SetDeadline(time.Time) error      { return nil }
func (c refusedConn) SetReadDeadline(time.Time) error  { return nil }
func (c refusedConn) SetWriteDeadline(time.Time) error { return nil }

// SyscallConn fails, which go-redis's pool takes for a connection that
// must not be used: a refusedConn left idle (MinIdleConns) is never handed
// to a command after the node is back.
func (c refusedConn) SyscallConn() (syscall.RawConn, error) { return nil, errRefusedSocket }

var errRefusedSocket = errors.New("redisguard: the dial was refused; there is no socket")

type refusedAddr struct{}

func (refusedAddr) Network() string { return "tcp" }
func (refusedAddr) String() string  { return "refused" }

// refusedError carries the reason a refusedConn stands for.
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }

// refusal returns the reason a refusedConn stood for, if err came from one.
func refusal(err error) (error, bool) {
	var r refusedError
	if errors.As(err, &r) {
		return r.err, true
	}
	return nil, false
}
