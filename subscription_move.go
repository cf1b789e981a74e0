package redisguard

import (
	"bytes"
	"errors"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/resp"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// subscriptions knows every live subscription connection of a Client and
// the node it was dialed to. Two things follow from that.
//
// Moving: when a node stops answering (its breaker opens), subscriptions
// closes the subscription connections to it. go-redis's PubSub sees its
// connection fail, dials again and subscribes again to the same channels,
// patterns and shard channels, and the dial hook (subscription.go) sends it
// where it can be served. A hung node gives no error on its own: its kernel
// still accepts what go-redis writes, including the health check's PING, so
// without this the subscription would wait on it for ever.
//
// Telling: a subscription that is re-established on a new connection, for
// whatever reason its old one broke, may have missed the messages published
// in between. Pub/sub is at-most-once. subscriptions reports each such move
// once, with the channels and the window (EventSubscriptionMoved), when the
// new connection subscribes again.
type subscriptions struct {
	k      *core
	a      *admission      // the long budget every subscription connection holds a permit of
	nodes  *nodeSet        // breakers, by address
	topo   *topology       // reloaded when a sharded subscription's owner is down; nil outside Cluster mode
	master *sentinelMaster // the master's node (Sentinel mode); nil otherwise
	hooks  *clientHooks    // what the subscription clients are built with

	ownerWait time.Duration // how long a sharded dial waits for a new owner (awaitOwner)

	moves atomic.Uint64 // moves reported

	mu      sync.Mutex
	conns   map[string]map[*subscriptionConn]struct{} // guarded by mu; live connections by address
	avoided map[string]time.Time                      // guarded by mu; nodes that left a PING unanswered, until when
	pending []pendingMove                             // guarded by mu; broken subscriptions not yet re-established
	owned   map[string][]slotmap.Range                // guarded by mu; the slots each node served when subscriptions were moved off it
	shard   *redis.ClusterClient                      // guarded by mu; sharded subscriptions' client, built on first use
	plain   redis.UniversalClient                     // guarded by mu; Subscribe's and PSubscribe's client, built on first use
	closed  bool                                      // guarded by mu
}

// pendingMove is a subscription whose connection broke: what it was
// subscribed to, where, and when it last received anything.
type pendingMove struct {
	key      string // subscriptionSet.key of what it was subscribed to
	names    string
	from     string
	lastRead time.Time // start of the window in which messages may have been missed
	broken   time.Time
}

// pendingMoveTTL bounds how long a broken subscription is waited for: one
// closed by its user while it was broken never subscribes again.
const pendingMoveTTL = time.Minute

// newSubscriptions returns the subscriptions of a Client whose breakers are
// in nodes: they move off a node whose breaker opens (Cluster mode) or off
// a master the sentinels replaced (Sentinel mode).
func newSubscriptions(k *core, a *admission, nodes *nodeSet, topo *topology, master *sentinelMaster, hooks *clientHooks) *subscriptions {
	s := &subscriptions{k: k, a: a, nodes: nodes, topo: topo, master: master, hooks: hooks, ownerWait: ownerWait,
		conns: make(map[string]map[*subscriptionConn]struct{}), avoided: make(map[string]time.Time), owned: make(map[string][]slotmap.Range)}
	switch {
	case topo != nil:
		// Another node serves a classic subscription at once, and a
		// sharded one once the slot map names the new owner.
		nodes.whenOpened(func(n *node) { s.moveFrom(n.addr) })
	case master != nil:
		master.whenLeaving(s.moveFrom)
	}
	if hooks != nil {
		hooks.whenMoving(func(_ string, conn any, m movingNotice) { s.handedOff(conn, m) })
	}
	return s
}

// budget is the hook that admits the dials of the client Subscribe and
// PSubscribe run on (its node clients in Cluster mode), and says where
// they go.
func (s *subscriptions) budget() subscriptionBudget {
	switch {
	case s.topo != nil:
		return subscriptionBudget{s, routeAnyNode}
	case s.master != nil:
		return subscriptionBudget{s, routeMaster}
	}
	return subscriptionBudget{s, routeAsked}
}

// track wraps conn, just dialed to addr, and registers it; route is where
// its subscriptions may go (subscription.go), and permit whether it holds
// a long permit, given back when it is closed.
func (s *subscriptions) track(conn net.Conn, addr string, route subscriptionRoute, permit bool) *subscriptionConn {
	c := &subscriptionConn{Conn: conn, s: s, addr: addr, route: route, permit: permit, node: s.nodes.get(addr)}
	c.lastRead.Store(s.k.clock.Now().UnixNano())
	c.node.conns.listenTo(c)
	s.mu.Lock()
	set := s.conns[addr]
	if set == nil {
		set = make(map[*subscriptionConn]struct{})
		s.conns[addr] = set
	}
	set[c] = struct{}{}
	s.mu.Unlock()
	return c
}

// untrack forgets c; if c broke while subscribed, its subscription is
// waited for on a new connection.
func (s *subscriptions) untrack(c *subscriptionConn) {
	c.node.conns.forget(c)
	c.mu.Lock()
	subs, key, arriving := c.subs.names(), c.subs.key(), c.arriving
	shards := slices.Sorted(maps.Keys(c.subs[shardKind]))
	c.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if set := s.conns[c.addr]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(s.conns, c.addr)
		}
	}
	now := s.k.clock.Now()
	s.pending = slices.DeleteFunc(s.pending, func(p pendingMove) bool { return now.Sub(p.broken) > pendingMoveTTL })
	lost := c.broken.Load() || c.handoff.Load()
	switch {
	case arriving != nil:
		// The move this connection was to complete goes on, from where it
		// started.
		arriving.broken = now
		s.addPending(*arriving)
	case lost && c.route == routeSlotOwner:
		// One move per shard channel: after a reconnect the channels may be
		// regrouped by node (splitConn).
		lastRead := time.Unix(0, c.lastRead.Load())
		for _, ch := range shards {
			s.addPending(pendingMove{key: shardKey(ch), names: shardKind + " " + ch, from: c.addr,
				lastRead: lastRead, broken: now})
		}
	case lost && key != "":
		s.addPending(pendingMove{key: key, names: subs, from: c.addr,
			lastRead: time.Unix(0, c.lastRead.Load()), broken: now})
	}
}

// shardKey is the pending-move key of one shard channel.
func shardKey(ch string) string { return shardKind + "\x00" + ch }

// addPending waits for p on a new connection. A subscription already
// waited for is one move, told once: a redial that subscribed on the node
// being left and broke there again (before the slot map named the new
// owner) does not start a second. Called with mu held.
func (s *subscriptions) addPending(p pendingMove) {
	if i := slices.IndexFunc(s.pending, func(q pendingMove) bool { return q.key == p.key }); i >= 0 {
		q := &s.pending[i]
		q.lastRead = minTime(q.lastRead, p.lastRead)
		q.broken = p.broken
		return
	}
	s.pending = append(s.pending, p)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// moveFrom closes every subscription connection to addr, so that go-redis
// subscribes again elsewhere (see subscriptions). The permits come back
// when go-redis closes the connections it finds broken.
func (s *subscriptions) moveFrom(addr string) {
	served := s.servedBy(addr)
	s.mu.Lock()
	if len(served) > 0 {
		s.owned[addr] = served
	}
	set := s.conns[addr]
	delete(s.conns, addr)
	s.mu.Unlock()
	for c := range set {
		c.breakOff()
	}
	if len(set) > 0 {
		s.k.log.Debug("redisguard: moving subscriptions off a node that stopped answering",
			"node", addr, "connections", len(set))
	}
}

// avoidFor is how long classic subscriptions are not sent to a node that
// left a health-check PING unanswered while its breaker stayed closed.
const avoidFor = 30 * time.Second

// unresponsive is told that addr left a subscription's PING unanswered: it
// keeps classic subscriptions off addr for avoidFor, and has the slot map
// refreshed, so that a sharded one finds a promoted replica.
func (s *subscriptions) unresponsive(addr string) {
	s.mu.Lock()
	s.avoided[addr] = s.k.clock.Now().Add(avoidFor)
	s.mu.Unlock()
	if s.topo != nil {
		s.topo.trigger()
	}
	s.k.log.Warn("redisguard: a subscription's node did not answer its health check; moving it",
		"node", addr)
}

// avoiding reports whether addr is to be avoided (see avoid).
func (s *subscriptions) avoiding(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.avoided[addr]
	if ok && !s.k.clock.Now().Before(until) {
		delete(s.avoided, addr)
		return false
	}
	return ok
}

// claim takes the broken subscription waiting for exactly the
// subscriptions key stands for, if there is one: a connection subscribing
// to them is re-establishing it.
func (s *subscriptions) claim(key string) (*pendingMove, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.pending, func(p pendingMove) bool { return p.key == key })
	if i < 0 {
		return nil, false
	}
	p := s.pending[i]
	// Every subscription waited for with the same key is this one.
	s.pending = slices.DeleteFunc(s.pending, func(q pendingMove) bool { return q.key == key })
	return &p, true
}

// arrived reports the move p, completed on a connection to addr.
func (s *subscriptions) arrived(p *pendingMove, addr string) {
	s.moves.Add(1)
	now := s.k.clock.Now()
	s.k.emit(Event{Kind: EventSubscriptionMoved, Time: now, Addr: p.from, To: addr,
		Channels: p.names, Duration: now.Sub(p.lastRead)})
}

// subscriptionConn is a subscription's connection to one node. It gives its
// permit back, if it holds one, on its first Close, and follows what the
// PubSub subscribes to by reading the commands go-redis writes on it.
//
// A move is complete, and told, at the first reply read after the
// connection subscribed again (for a sharded subscription, at the first
// confirmation: see splitConn).
type subscriptionConn struct {
	net.Conn
	s      *subscriptions
	addr   string // the node it was dialed to
	node   *node  // addr's, whose hang watch listens to the connection
	route  subscriptionRoute
	permit bool // it holds a long permit

	released atomic.Bool
	closing  atomic.Bool  // Close has begun: the errors that follow are its own
	broken   atomic.Bool  // it failed, or was closed to move it, while in use
	moved    atomic.Bool  // moveFrom closed it
	handoff  atomic.Bool  // it read MOVING: go-redis closes it and subscribes again at the endpoint named
	lastRead atomic.Int64 // unix ns, by the client's clock, of the last data read
	askedAt  atomic.Int64 // unix ns of the first write since the last read; 0 if none

	mu       sync.Mutex
	subs     subscriptionSet // guarded by mu
	arriving *pendingMove    // guarded by mu; the move this connection completes at its next reply
}

func (c *subscriptionConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(c.s.k.clock.Now().UnixNano())
		// A sharded subscription's connection is read reply by reply by its
		// splitConn, which tells its move at the confirmation.
		if c.route != routeSlotOwner {
			if arrived := c.takeArriving(); arrived != nil {
				c.s.arrived(arrived, c.addr)
			}
		}
	}
	if err != nil && !isTimeout(err) && !c.closing.Load() {
		c.broken.Store(true)
	}
	return n, err
}

// takeArriving returns the move this connection completes, if any, and
// forgets it.
func (c *subscriptionConn) takeArriving() *pendingMove {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.arriving
	c.arriving = nil
	return p
}

// pingCmd is how go-redis's PubSub health check writes its PING.
var pingCmd = resp.AppendCommand(nil, "ping")

// asking is told that something is about to be written, which the node
// answers (every command does on a subscription's connection), and
// reports whether something written at least ReadTimeout ago has had
// nothing read since: the node holds the connection but does not answer,
// as a hung one does. The hang watch hears of the write (asked), and
// finds such a node within its silence bound; this is the bound where the
// watch does not run (breakers off) or does not trip (every node silent).
func (c *subscriptionConn) asking() bool {
	now := c.s.k.clock.Now().UnixNano()
	first := c.askedAt.Load()
	if first == 0 || c.lastRead.Load() >= first {
		c.askedAt.Store(now)
		if w := c.s.nodes.watch; w != nil {
			w.wake()
		}
		return false
	}
	return now-first >= int64(c.s.k.cfg.ReadTimeout)
}

// asked reports whether something written on c has had nothing read since.
func (c *subscriptionConn) asked() bool {
	first := c.askedAt.Load()
	return first != 0 && c.lastRead.Load() < first
}

// breakOff closes the connection under its PubSub, which then subscribes
// again on a new one.
func (c *subscriptionConn) breakOff() {
	c.broken.Store(true)
	c.moved.Store(true)
	_ = c.Conn.Close()
}

func (c *subscriptionConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	q, changed := c.follow(p)
	// A sharded subscription's moves are claimed channel by channel, by
	// its splitConn.
	if changed && c.arriving == nil && c.route != routeSlotOwner {
		if key := c.subs.key(); key != "" {
			c.arriving, _ = c.s.claim(key)
		}
	}
	c.mu.Unlock()
	if q == nil {
		return c.send(p)
	}
	if _, err := c.send(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// follow reads the commands go-redis wrote in p, as it writes them (whole
// commands per write), once: c.subs follows what they subscribe to, and on
// a cluster's route an SSUBSCRIBE or SUNSUBSCRIBE of channels in several
// slots is split into one command per slot (bySlot). It returns what to
// write instead of p, nil for p itself, and whether the set changed. What
// it cannot parse it leaves alone: p is written as it is. c.mu is held.
func (c *subscriptionConn) follow(p []byte) (split []byte, changed bool) {
	slotted := c.route == routeSlotOwner || c.route == routeAnyNode
	var buf [8][]byte
	args := buf[:0]
	var out []byte
	rewritten := false
	for rest := p; len(rest) > 0; {
		var n int
		var err error
		if args, n, err = resp.Command(rest, args); err != nil || n == 0 {
			return nil, changed
		}
		cmd := rest[:n]
		done := len(p) - len(rest)
		rest = rest[n:]
		kind, add := "", false
		if len(args) > 0 {
			kind, add = subscribeKind(args[0])
		}
		if kind != "" {
			names := asStrings(args[1:])
			if c.subs.apply(kind, add, names) {
				changed = true
			}
			if slotted && kind == shardKind {
				if groups := bySlot(names); len(groups) > 1 {
					if !rewritten {
						out, rewritten = append([]byte(nil), p[:done]...), true
					}
					for _, g := range groups {
						out = resp.AppendCommand(out, string(args[0]), g...)
					}
					continue
				}
			}
		}
		if rewritten {
			out = append(out, cmd...)
		}
	}
	return out, changed
}

// send writes p, whose subscriptions the caller has followed.
func (c *subscriptionConn) send(p []byte) (int, error) {
	if c.asking() && c.route != routeAsked && bytes.HasPrefix(p, pingCmd) {
		// go-redis's health check found nothing read since an earlier
		// write; closed, the write fails, and the health check subscribes
		// again. (A lone server is left alone: there is nowhere else to
		// go, and when it resumes it delivers what it holds.)
		c.s.unresponsive(c.addr)
		c.breakOff()
	}
	return c.write(p)
}

func (c *subscriptionConn) write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && !isTimeout(err) && !c.closing.Load() {
		c.broken.Store(true)
	}
	return n, err
}

func (c *subscriptionConn) Close() error {
	c.closing.Store(true)
	err := c.Conn.Close()
	if c.moved.Load() && errors.Is(err, net.ErrClosed) {
		err = nil // closed by moveFrom: for its user the connection closes now
	}
	if c.released.CompareAndSwap(false, true) {
		c.s.untrack(c)
		if c.permit {
			c.s.a.release()
		}
	}
	return err
}

// NetConn lets go-redis reach the socket underneath, as it does through TLS,
// to peek for pending push data.
func (c *subscriptionConn) NetConn() net.Conn { return c.Conn }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
