package redisguard

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/outlier"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// nodeSet owns one breaker per node address. The ordinary and the long
// go-redis clients share it, so a node that is down for one is down for both.
type nodeSet struct {
	k      *core
	topo   *topology // told when a breaker opens (Cluster mode); nil otherwise
	probes *prober   // recovers the open breakers
	// opened are told of each node whose breaker opens, after the event and
	// the topology; own probes the nodes that stand for something other
	// than an address. Both are registered by the components built on the
	// set (whenOpened, probeWith), while they are built: before the first
	// command and the first probe, and never after.
	opened []func(n *node)
	own    map[string]func(ctx context.Context, wait time.Duration) error
	slow   *slowNodes // marks slow nodes; nil when marking is off
	watch  *hangWatch // trips the breakers of hung nodes; nil when breakers are off
	sent   sentOnce   // unsafe commands a node may have run, in batches go-redis may send again

	mu    sync.Mutex
	nodes map[string]*node        // guarded by mu; entries are never removed
	count atomic.Int32            // len(nodes), read without mu
	list  atomic.Pointer[[]*node] // the nodes, for readers that take no lock; replaced on each addition
}

// node is what the hot path needs for one address; everything is fixed at
// creation, so the hook reads it without locks.
type node struct {
	// Read by every command, written rarely; the first three together, so
	// that a command reads one cache line of its node.
	br          *breaker.Breaker
	slow        atomic.Bool   // marked slow
	sampleMask  atomic.Uint32 // a command is timed when rand&sampleMask is 0 (slow.go)
	addr        string
	unavailable error             // the *NodeError returned while the breaker is open; shared, never mutated
	exhausted   error             // the *NodeError for a pool timeout on this node
	slowRefused error             // the *NodeError for a command refused while marked slow
	slowLimit   atomic.Int64      // while marked: how many ordinary operations may wait on it at once
	watched     atomic.Bool       // always timed at the higher rate: its latency routes reads (ReadFromNearest)
	sched       *breaker.Schedule // when to probe while the breaker is open
	probing     atomic.Bool       // a prober goroutine owns the node
	lastRefused atomic.Int64      // unix ns of a recent command refused by the open breaker

	// Written by the timed commands, on a cache line of its own, since
	// sharing one with the fields above would make each core re-fetch
	// those after every write of the other core.
	_   [cacheLine]byte
	lat outlier.Latency // sampled latency of its ordinary commands (slow.go)
	_   [cacheLine]byte

	// client is the node's ordinary client, whose pool holds its ordinary
	// operations in flight (stats.go); nil for a Sentinel master, whose
	// client follows the master (sentinelMaster.client).
	client      atomic.Pointer[redis.Client]
	long        atomic.Int64 // long operations in progress: blocking calls, the long client's work
	resolving   atomic.Int32 // Sentinel dials in progress, which ask the sentinels first (hangWatch)
	conns       connSet      // the connections of the ordinary clients, cut when the breaker opens
	tripSilence atomic.Int64 // ns of silence the hang watch tripped the breaker on; 0 otherwise
	silent      atomic.Bool  // the hang watch has found it asked and answering nothing for half HungNodeAfter
	maint       maintenance  // announced maintenance windows (maint.go)

	slowWaiting     atomic.Int64  // ordinary operations admitted while it is marked, in progress
	exhaustions     atomic.Uint64 // operations refused with ErrPoolExhausted
	outcomeUnknowns atomic.Uint64 // commands ended with ErrOutcomeUnknown
	probes          atomic.Uint64 // recovery probes sent
	probeFailures   atomic.Uint64 // of which failed
	replicaReads    atomic.Uint64 // reads served standing in for its master (replica.go)
	exhaustLog      logLimiter    // keeps an overloaded node from flooding the log
}

// newNodeSet returns an empty node set; probe is the recovery probe of an
// address (see prober).
func newNodeSet(k *core, topo *topology, probe func(ctx context.Context, addr string, wait time.Duration) error) *nodeSet {
	s := &nodeSet{k: k, topo: topo, nodes: make(map[string]*node), slow: newSlowNodes(k)}
	if s.slow != nil && topo != nil {
		s.slow.shards = topo.slotMap // a node is compared with its shard's
	}
	s.probes = newProber(func(ctx context.Context, addr string, wait time.Duration) error {
		if own := s.own[addr]; own != nil {
			return own(ctx, wait)
		}
		return probe(ctx, addr, wait)
	}, k.clock, k.cfg.ReadTimeout, func(n *node, err error) {
		k.emit(Event{Kind: EventProbeFailed, Addr: n.addr, Err: err.Error()})
	}, s.wanted)
	if topo != nil {
		topo.whenChanged(s.named)
	}
	if k.cfg.NodeFailureThreshold >= 0 {
		s.watch = newHangWatch(k.clock, k.cfg.HungNodeAfter, s.snapshot, s.trip)
	}
	return s
}

// whenOpened has fn told of every node whose breaker opens.
func (s *nodeSet) whenOpened(fn func(n *node)) { s.opened = append(s.opened, fn) }

// probeWith has the node at addr, which stands for something other than an
// address (a Sentinel master not yet named), probed by probe.
func (s *nodeSet) probeWith(addr string, probe func(ctx context.Context, wait time.Duration) error) {
	if s.own == nil {
		s.own = make(map[string]func(context.Context, time.Duration) error)
	}
	s.own[addr] = probe
}

// snapshot returns the nodes without taking the lock; the slice is shared
// and must not be modified.
func (s *nodeSet) snapshot() []*node {
	if l := s.list.Load(); l != nil {
		return *l
	}
	return nil
}

// trip opens the breaker of n, which has answered none of its outstanding
// commands for silent (hangWatch).
func (s *nodeSet) trip(n *node, silent time.Duration) {
	n.tripSilence.Store(int64(silent))
	if !n.br.Trip() {
		n.tripSilence.Store(0)
	}
}

// refused notes that n's open breaker refused a command, and makes sure a
// prober is looking after n. It is on the fail-fast path: one atomic load
// in the common case.
func (s *nodeSet) refused(n *node) {
	now := s.k.clock.Now().UnixNano()
	if now-n.lastRefused.Load() < int64(time.Second) {
		return
	}
	n.lastRefused.Store(now)
	if !n.probing.Load() {
		s.probes.start(n, n.sched.Opened(s.k.clock.Now()))
	}
}

// setSilent records what the hang watch last found: whether n has been
// asked something and answered nothing for half HungNodeAfter. It writes
// only a change.
func (n *node) setSilent(silent bool) {
	if n.silent.Load() != silent {
		n.silent.Store(silent)
	}
}

// out reports whether n serves nothing now: its breaker is open, or it is
// silent while the hang watch's bound runs. Slow marking counts such a node
// among those it never takes out more of.
func (n *node) out() bool { return n.br.State() == breaker.Open || n.silent.Load() }

// idle reports whether n's breaker has refused no command for
// probeIdleAfter.
func (n *node) idle(now time.Time) bool {
	return now.UnixNano()-n.lastRefused.Load() > int64(probeIdleAfter)
}

// wanted reports whether n, whose breaker is open, is still worth probing:
// a command asked for it lately, or the client still counts it among its
// nodes. In Cluster mode those are the nodes of the last slot map; in
// Standalone and Sentinel mode every node the client has met, a handful.
func (s *nodeSet) wanted(n *node, now time.Time) bool {
	if !n.idle(now) || s.topo == nil {
		return true
	}
	return s.topo.slotMap().Shard(n.addr) != "" || s.own[n.addr] != nil
}

// named starts probing again the open nodes that m, a new slot map, names
// and whose probers stopped while the map before did not (a failed master
// that rejoins, as a replica nobody sends to).
func (s *nodeSet) named(m *slotmap.Map) {
	for _, addr := range m.Nodes() {
		if n, ok := s.lookup(addr); ok && n.br.State() == breaker.Open && !n.probing.Load() {
			s.probes.start(n, 0)
		}
	}
}

// cacheLine is the size of a CPU cache line, a bound on how far apart two
// fields must be for a write to one to leave the other in other cores'
// caches.
const cacheLine = 64

// lookup returns the node for addr if it has one, creating nothing.
func (s *nodeSet) lookup(addr string) (*node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[addr]
	return n, ok
}

// get returns the node for addr, creating its breaker on first use.
func (s *nodeSet) get(addr string) *node {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.nodes[addr]; ok {
		return n
	}
	n := &node{
		addr:        addr,
		unavailable: &NodeError{Addr: addr, Err: ErrNodeUnavailable},
		exhausted:   &NodeError{Addr: addr, Err: ErrPoolExhausted},
		slowRefused: &NodeError{Addr: addr, Err: ErrNodeSlow},
	}
	n.sampleMask.Store(sampleFast)
	n.br = breaker.New(breaker.Settings{
		Threshold:     s.k.cfg.NodeFailureThreshold, // negative disables: the breaker then always allows
		Clock:         s.k.clock,
		OnStateChange: func(from, to breaker.State) { s.changed(n, from, to) },
	})
	n.sched = breaker.NewSchedule(breaker.ScheduleSettings{Max: s.k.cfg.NodeRecoveryTime})
	s.nodes[addr] = n
	s.count.Add(1)
	list := append(slices.Clone(s.snapshot()), n)
	s.list.Store(&list)
	return n
}

// all returns the nodes in no particular order.
func (s *nodeSet) all() []*node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	return out
}

// guard returns the hook to install on the go-redis client for addr.
func (s *nodeSet) guard(addr string) nodeGuard { return nodeGuard{k: s.k, nodes: s, n: s.get(addr)} }

// masterGuard returns the hook to install on a client of sm's master: it
// charges each command to the master's current address (nodeGuard.follow).
func (s *nodeSet) masterGuard(sm *sentinelMaster) nodeGuard {
	return nodeGuard{k: s.k, nodes: s, n: sm.role, follow: sm}
}

// close stops the probers and the hang watch.
func (s *nodeSet) close() {
	if s.probes != nil {
		s.probes.close()
	}
	if s.watch != nil {
		s.watch.close()
	}
}

// changed runs after every transition of n's breaker, outside its lock.
func (s *nodeSet) changed(n *node, from, to breaker.State) {
	now := s.k.clock.Now()
	e := Event{Kind: breakerEvent(to), Addr: n.addr}
	switch to {
	case breaker.Open:
		if silent := n.tripSilence.Swap(0); silent != 0 {
			e.Decision, e.Duration = DecisionSilent, time.Duration(silent)
		}
		// Everyone waiting on the node is answered now, not at its
		// timeout: the commands on its connections fail at once, and
		// those queued for one find the dial refused.
		n.conns.cut()
		n.lastRefused.Store(now.UnixNano())
		if from == breaker.Closed {
			s.probes.start(n, n.sched.Opened(now))
		} else {
			// Traffic failed right after a probe was answered: the same
			// outage goes on.
			s.probes.start(n, n.sched.Next(now, false))
		}
	case breaker.Closed:
		n.sched.Recovered(now)
		e.Duration = now.Sub(n.br.Snapshot().OpenedAt)
	}
	s.k.emit(e, slog.String("from", from.String()))
	if to == breaker.Open {
		if s.topo != nil {
			// A dead master is usually about to be replaced by its replica;
			// look for the new owner now rather than when some timer fires.
			s.topo.trigger()
		}
		for _, fn := range s.opened {
			fn(n)
		}
	}
}
