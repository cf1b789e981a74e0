package redisguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/background"
	"github.com/redisguard/redisguard/internal/breaker"
)

// While the master's breaker is open, or after a write was answered READONLY,
// the sentinels are asked every sentinelPoll which address is the master, each
// question waiting at most sentinelQueryTimeout. Only during an outage: a
// healthy master costs the sentinels nothing beyond what go-redis asks, once
// the other sentinels are known; until a sentinel has told them, it is asked
// again every sentinelRediscover.
const (
	sentinelPoll         = 100 * time.Millisecond
	sentinelQueryTimeout = 250 * time.Millisecond
	sentinelRediscover   = time.Second
)

// sentinelMaster follows the address of a Sentinel-managed master, so that a
// breaker protects an address rather than the role: when the master moves,
// the new address has its own breaker, closed, and the old one keeps its
// state.
//
// go-redis's failover client resolves the master through the sentinels on
// every dial and listens for +switch-master. sentinelMaster sits on its dial
// hook to learn the address each connection really goes to, and adds what a
// breaker in front of that client needs: while the master's breaker is open
// no command dials, so nothing would ever ask the sentinels again. It asks
// them itself, and on a new master (which the server confirms, see
// isMaster) it switches the breaker it applies and closes every connection
// to the old address, which makes go-redis dial, and so resolve, afresh.
// That also covers a +switch-master that never arrives because the sentinel
// go-redis listened to died with the master. A write answered READONLY
// means the client talks to a demoted master: it triggers the same look-up
// at once.
type sentinelMaster struct {
	name      string
	sentinels []string // guarded by mu; the configured ones, then those discovered
	// master and sentinel are the handshakes for the data nodes and the
	// sentinels; Addr is set per call.
	master, sentinel *redis.Options
	nodes            func(addr string) *node
	role             *node // stands for the master while its address is unknown
	k                *core // the logger, and the passwords a log line must not carry
	// roleDenial is set once ROLE is refused by a server that cannot answer
	// a bare HELLO either (see isMaster).
	roleDenial denial
	// peersDenial is set once a sentinel refuses SENTINEL SENTINELS: the
	// client then knows only the configured sentinels.
	peersDenial denial

	cur atomic.Pointer[node] // the master's node; nil until the first dial
	// client is the ordinary failover client, whose pool holds the
	// master's ordinary operations in flight (stats.go).
	client atomic.Pointer[redis.Client]

	// leaving are told of the old master's address before drop closes the
	// connections to it; registered (whenLeaving) by the components built on
	// the master, while they are built.
	leaving []func(addr string)

	bg background.Group // the look-up and its questions; closed by close

	mu         sync.Mutex
	discovered bool                                 // guarded by mu; a sentinel has named the others
	conns      map[string]map[*trackedConn]struct{} // guarded by mu; open connections by address
	watching   bool                                 // guarded by mu; the look-up goroutine runs
	again      bool                                 // guarded by mu; a READONLY came during a round
}

// newSentinelMaster returns the master of name, whose breakers are in
// nodes: it probes the node that stands for the master while its address is
// unknown by asking the sentinels, and asks them again when the current
// master's breaker opens.
func newSentinelMaster(name string, sentinels []string, master, sentinel *redis.Options,
	nodes *nodeSet, k *core) *sentinelMaster {
	s := &sentinelMaster{
		name: name, sentinels: slices.Clone(sentinels), master: master, sentinel: sentinel,
		nodes: nodes.get, role: nodes.get(sentinelNodeName(name)), k: k,
		conns: make(map[string]map[*trackedConn]struct{}),
	}
	nodes.probeWith(s.role.addr, func(ctx context.Context, _ time.Duration) error { return s.probeRole(ctx) })
	nodes.whenOpened(func(n *node) {
		if n == s.node() {
			s.lookup(false)
		}
	})
	return s
}

// whenLeaving has fn told of the old master's address before the
// connections to it are closed.
func (s *sentinelMaster) whenLeaving(fn func(addr string)) { s.leaving = append(s.leaving, fn) }

// sentinelAddrs returns the sentinels known now: the configured ones, then
// those discovered.
func (s *sentinelMaster) sentinelAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sentinels)
}

// sentinelNodeName labels the breaker that stands for a Sentinel-managed
// master while its address is not known yet.
func sentinelNodeName(master string) string { return "sentinel-master:" + master }

// node returns the node commands for the master are charged to.
func (s *sentinelMaster) node() *node {
	if n := s.cur.Load(); n != nil {
		return n
	}
	return s.role
}

// dialedElsewhere reports whether err is a failed dial to an address other
// than n's: go-redis's sentinel still named an old master. That failure says
// nothing about n.
func (s *sentinelMaster) dialedElsewhere(n *node, err error) bool {
	if n == s.role {
		return false // the role stands for whatever address go-redis dials
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial" && opErr.Addr != nil && opErr.Addr.String() != n.addr
}

func (s *sentinelMaster) use(addr string) {
	old := s.cur.Load()
	if old != nil && old.addr == addr {
		return
	}
	s.cur.Store(s.nodes(addr))
	s.k.log.Info("redisguard: sentinel master address", slog.String("master", s.name), slog.String("addr", addr))
	if old == nil {
		// One round now, while the sentinels answer, learns the ones the
		// configuration does not name: the sentinel go-redis listens to
		// may be the one that dies with the master.
		s.lookup(true)
	}
}

func (s *sentinelMaster) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, s.failedDial(err)
		}
		if rc, refused := conn.(refusedConn); refused {
			// The guard's verdict on the dial (nodeGuard.DialHook): the
			// breaker refused it, or it failed, and rc carries why.
			return refusedConn{s.failedDial(rc.err)}, nil
		}
		a := conn.RemoteAddr().String()
		if cur := s.cur.Load(); cur != nil && cur.addr != a {
			if n := s.nodes(a); n.br.State() == breaker.Open {
				// go-redis's sentinel still names the master redisguard
				// has moved away from (its answer predates the move, or
				// the sentinel it asks has not heard of it): a node with
				// an open breaker gets no traffic, and does not become
				// the master again.
				_ = conn.Close()
				return refusedConn{setupFailure(n.unavailable, true)}, nil
			}
		}
		s.use(a)
		return s.track(a, conn), nil
	}
}

// failedDial is what a failed dial says about the master, and the error
// the dial fails with: a dial to an address that is no sentinel names the
// master, and a nil from every sentinel says they monitor no master by
// that name.
func (s *sentinelMaster) failedDial(err error) error {
	if errors.Is(err, redis.Nil) {
		// Every sentinel answered GET-MASTER-ADDR-BY-NAME with nil: they
		// are up, and monitor no master by that name.
		return &unknownMasterError{name: s.name}
	}
	var opErr *net.OpError
	if s.cur.Load() == nil && errors.As(err, &opErr) && opErr.Op == "dial" && opErr.Addr != nil && !s.isSentinel(opErr.Addr.String()) {
		s.use(opErr.Addr.String())
	}
	return err
}

func (s *sentinelMaster) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && redis.IsReadOnlyError(err) {
			s.lookup(true)
		}
		return err
	}
}

func (s *sentinelMaster) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			for _, cmd := range cmds {
				if redis.IsReadOnlyError(cmd.Err()) {
					s.lookup(true)
					break
				}
			}
		}
		return err
	}
}

// lookup starts asking the sentinels for the master, unless that is under
// way; it goes on while the master's breaker is open. force asks for one
// round even with the breaker closed (a READONLY reply).
func (s *sentinelMaster) lookup(force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching {
		s.again = s.again || force
		return
	}
	s.watching = s.bg.Go(s.watch) // watch waits for mu to end its round
}

func (s *sentinelMaster) watch(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		s.resolve(ctx)
		s.mu.Lock()
		again := s.again
		s.again = false
		outage := again || s.node().br.State() == breaker.Open
		if !outage && s.discovered {
			s.watching = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if outage {
			timer.Reset(sentinelPoll)
		} else {
			// The master is fine, but no sentinel has named the others yet
			// (one that answered too slowly, or a group still forming):
			// without them a failover that takes the one sentinel this
			// client knows along with the master could not be followed.
			timer.Reset(sentinelRediscover)
		}
	}
}

// resolve asks every sentinel at once which address is the master, and
// switches to the first different answer whose server confirms it is a
// master (isMaster), without waiting for the slower sentinels: one that
// hangs costs the look-up nothing. It reports the address it ends with, or "" if no sentinel
// answered. It returns early once ctx or the client is done.
func (s *sentinelMaster) resolve(ctx context.Context) string {
	ctx, stop := mergeCancel(ctx, s.bg.Context())
	defer stop()
	old := s.cur.Load()
	sentinels := s.sentinelAddrs()
	answers := make(chan string, len(sentinels)) // "" for a sentinel that failed or was not asked
	for _, sa := range sentinels {
		asked := s.bg.Go(func(context.Context) {
			addr, _ := s.ask(ctx, sa) // ctx ends with the group's
			answers <- addr
		})
		if !asked {
			answers <- "" // closed
		}
	}
	answered := ""
	for range sentinels {
		addr := <-answers
		if addr == "" || ctx.Err() != nil {
			continue
		}
		answered = addr
		if (old != nil && addr == old.addr) || !s.isMaster(ctx, addr) {
			continue
		}
		if old == nil {
			s.use(addr)
			return addr
		}
		if s.cur.CompareAndSwap(old, s.nodes(addr)) {
			s.k.log.Info("redisguard: sentinel master moved", slog.String("master", s.name),
				slog.String("from", old.addr), slog.String("to", addr))
			s.drop(old.addr)
		}
		return addr
	}
	return answered
}

// probeRole is the recovery probe of the role's node: it succeeds once a
// sentinel names a master that answers as one.
func (s *sentinelMaster) probeRole(ctx context.Context) error {
	if addr := s.resolve(ctx); addr != "" && s.cur.Load() != nil {
		return nil
	}
	return errNoMaster
}

var errNoMaster = errors.New("no sentinel named a master that answers")

// unknownMasterError is a dial's failure when the sentinels answered that
// they monitor no master by the configured name: a configuration mistake,
// not a node failure.
type unknownMasterError struct{ name string }

func (e *unknownMasterError) Error() string {
	return fmt.Sprintf("redisguard: the sentinels monitor no master named %q (check MasterName)", e.name)
}

// ask asks one sentinel for the master's address, on a client made for the
// question and closed after it: a kept client whose dials failed twice
// would start go-redis's background redial loop, which outlives Close.
func (s *sentinelMaster) ask(ctx context.Context, sentinelAddr string) (string, error) {
	cl := newGoRedis(clientSpec{kind: clientSentinelQuestion, base: s.sentinel, addr: sentinelAddr, wait: sentinelQueryTimeout}).(*redis.SentinelClient)
	defer cl.Close()
	qctx, cancel := context.WithTimeout(ctx, sentinelQueryTimeout)
	defer cancel()
	hp, err := cl.GetMasterAddrByName(qctx, s.name).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", errors.New("sentinel: malformed master address")
	}
	s.discover(ctx, cl, sentinelAddr)
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// discover adds the sentinels that cl knows of for the master, until one
// sentinel has answered the question; the question has a timeout of its
// own, so an answer of the master's address that came late does not leave
// it unasked.
func (s *sentinelMaster) discover(ctx context.Context, cl *redis.SentinelClient, addr string) {
	s.mu.Lock()
	done := s.discovered
	s.mu.Unlock()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sentinelQueryTimeout)
	defer cancel()
	others, err := cl.Sentinels(ctx, s.name).Result()
	refused := err != nil && s.peersDenial.refusedBy(s.k, peersQuestion, addr, err)
	if err != nil && !refused {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discovered = true
	for _, o := range others {
		if o["ip"] == "" || o["port"] == "" {
			continue
		}
		if a := net.JoinHostPort(o["ip"], o["port"]); !slices.Contains(s.sentinels, a) {
			s.sentinels = append(s.sentinels, a)
		}
	}
}

// isMaster reports whether addr says it is a master. A sentinel may still
// name a demoted master (one cut off from the others, or one that has not
// heard of the promotion yet), and a client that followed it would send its
// writes to a replica; so a named master is confirmed before any traffic
// moves. The question is a bare HELLO on a probe connection, which every
// user may send: ROLE, which says the same, needs @admin, and an
// application's user is usually denied it. A server that does not know
// HELLO without arguments (older than Redis 6.2, some proxies) is asked
// ROLE instead; where ROLE is refused too, the sentinels' answer is taken
// as it is, and the log says so once (roleDenial).
func (s *sentinelMaster) isMaster(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, sentinelQueryTimeout)
	defer cancel()
	master := false
	probeConn(ctx, s.master, addr, sentinelQueryTimeout, func(cl *redis.Client) {
		hello, err := askHello(ctx, cl.Process)
		switch {
		case err == nil && hello.role != "":
			master = hello.role == "master"
			return
		case err != nil && !isRedisReply(err):
			return // no answer: the connection or its handshake failed
		case s.roleDenial.refused():
			master = true
			return
		}
		role, err := cl.Do(ctx, "role").Slice()
		switch {
		case s.roleDenial.refusedBy(s.k, roleQuestion, addr, err):
			master = true
		case err == nil && len(role) > 0:
			r, _ := role[0].(string)
			master = r == "master"
		}
	})
	return master
}

// peersQuestion is SENTINEL SENTINELS, as a refusal is logged.
var peersQuestion = question{"sentinel|sentinels", "only the configured sentinels are asked for the master; list them all in Addrs"}

// roleQuestion is ROLE, as a refusal is logged.
var roleQuestion = question{"role", "a master the sentinels name is taken as one without asking it"}

// close stops the look-up and waits for its questions. The connections
// it tracks belong to go-redis's pools, which close them.
func (s *sentinelMaster) close() { s.bg.Close() }

// track wraps conn so that drop can close it. The wrapper keeps the
// connection's syscall.Conn, which go-redis's pool uses to check an idle
// connection's health, when the connection has one (TLS connections do not).
func (s *sentinelMaster) track(addr string, conn net.Conn) net.Conn {
	tc := &trackedConn{Conn: conn, s: s, addr: addr}
	s.mu.Lock()
	set := s.conns[addr]
	if set == nil {
		set = make(map[*trackedConn]struct{})
		s.conns[addr] = set
	}
	set[tc] = struct{}{}
	s.mu.Unlock()
	if sc, ok := conn.(syscall.Conn); ok {
		return trackedSyscallConn{tc, sc}
	}
	return tc
}

// drop closes every connection to addr. go-redis finds them dead (its pool's
// health check, or the command's write) and dials again, through the
// sentinels.
func (s *sentinelMaster) drop(addr string) {
	for _, fn := range s.leaving {
		fn(addr)
	}
	s.mu.Lock()
	set := s.conns[addr]
	delete(s.conns, addr)
	s.mu.Unlock()
	for tc := range set {
		_ = tc.Conn.Close()
	}
}

func (s *sentinelMaster) untrack(tc *trackedConn) {
	s.mu.Lock()
	if set := s.conns[tc.addr]; set != nil {
		delete(set, tc)
		if len(set) == 0 {
			delete(s.conns, tc.addr)
		}
	}
	s.mu.Unlock()
}

type trackedConn struct {
	net.Conn
	s    *sentinelMaster
	addr string
}

func (c *trackedConn) Close() error {
	c.s.untrack(c)
	return c.Conn.Close()
}

type trackedSyscallConn struct {
	*trackedConn
	sc syscall.Conn
}

func (c trackedSyscallConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// isSentinel reports whether addr is one of the sentinels: a failed dial to
// a sentinel (go-redis found none reachable) names no master.
func (s *sentinelMaster) isSentinel(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.sentinels, addr)
}

// mergeCancel returns a context that is done when a or b is; stop releases it.
func mergeCancel(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stopB := context.AfterFunc(b, cancel)
	return ctx, func() { stopB(); cancel() }
}
