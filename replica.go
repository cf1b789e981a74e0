package redisguard

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/breaker"
)

// ReadFrom says which node of a shard serves read-only commands (Cluster
// mode). A command is a read when COMMAND flags it readonly, as go-redis
// decides: GET, EVAL_RO and FCALL_RO are reads; EVAL, FCALL and every
// transaction go to the master.
type ReadFrom int

const (
	// ReadFromMaster sends everything to the master.
	ReadFromMaster ReadFrom = iota
	// ReadFromMasterPreferred sends reads to the master; while the master's
	// breaker is open they go to a usable replica of the same shard, so a
	// hung master's data stays readable until it answers again or is
	// replaced.
	ReadFromMasterPreferred
	// ReadFromReplicaPreferred sends reads to a replica, and to the master
	// when no replica is usable.
	ReadFromReplicaPreferred
	// ReadFromNearest sends reads to the node of the shard with the lowest
	// latency (go-redis's RouteByLatency), the master when the replica it
	// picks is not usable.
	ReadFromNearest
	// ReadFromAny sends reads to a random node of the shard (go-redis's
	// RouteRandomly), the master when the replica it picks is not usable.
	ReadFromAny
)

// readFromNames are the ParseURL spellings, indexed by ReadFrom.
var readFromNames = [...]string{"master", "master_preferred", "replica_preferred", "nearest", "any"}

func (r ReadFrom) String() string {
	if r >= 0 && int(r) < len(readFromNames) {
		return readFromNames[r]
	}
	return "ReadFrom(" + strconv.Itoa(int(r)) + ")"
}

// parseReadFrom is String's inverse.
func parseReadFrom(s string) (ReadFrom, bool) {
	for i, name := range readFromNames {
		if s == name {
			return ReadFrom(i), true
		}
	}
	return 0, false
}

// replicas routes the reads go-redis sends to replicas. The cluster client
// runs with ReadOnly (plus RouteByLatency or RouteRandomly), so go-redis
// decides what is a read, opens replica connections with READONLY and sends
// reads to a node of the slot's shard; replicaHook, on every node client,
// then decides with redisguard's breakers where the read really goes: on
// the replica it reached, on to the shard's master, or nowhere.
//
// A replica is usable when its breaker is not open and, with
// Config.MaxReplicaStaleness, its lag is within the bound (lagTracker).
type replicas struct {
	k     *core
	nodes *nodeSet
	slots func() []redis.ClusterSlot // the last slot map (topology.lastSlots)
	lag   *lagTracker                // nil without MaxReplicaStaleness

	clients sync.Map // address → *redis.Client: the ordinary client's node clients

	shards atomic.Pointer[shardMap] // derived from slots; rebuilt when they change
	mu     sync.Mutex               // serialises rebuilds
}

// shardMap says which master each replica serves, for one slot map.
type shardMap struct {
	first     *redis.ClusterSlot // identity of the slot map it was built from
	n         int
	byReplica map[string]*shard
	byMaster  map[string]*shard
}

// shard is a master as its replicas' reads see it.
type shard struct {
	master *node
	// since is when its reads went to a replica while its breaker is open
	// (ReadFromMasterPreferred), unix ns by the client's clock; 0 while
	// they go to the master.
	since atomic.Int64
}

func newReplicas(k *core, nodes *nodeSet, topo *topology) *replicas {
	r := &replicas{k: k, nodes: nodes, slots: topo.lastSlots}
	if k.cfg.MaxReplicaStaleness > 0 {
		r.lag = newLagTracker(k.clock, k.cfg.MaxReplicaStaleness, k.cfg.ReadTimeout, r.pollLag)
	}
	return r
}

// close stops the lag polls.
func (r *replicas) close() {
	if r.lag != nil {
		r.lag.close()
	}
}

// register records the node client go-redis built for addr, and returns the
// hook to install on it, outside its node guard.
func (r *replicas) register(addr string, cl *redis.Client) replicaHook {
	r.clients.Store(addr, cl)
	return replicaHook{r: r, n: r.nodes.get(addr)}
}

func (r *replicas) client(addr string) *redis.Client {
	if v, ok := r.clients.Load(addr); ok {
		return v.(*redis.Client)
	}
	return nil
}

// shardOf returns the shard whose replica addr is in the last slot map, or
// nil when addr is no replica there.
func (r *replicas) shardOf(addr string) *shard {
	slots := r.slots()
	if len(slots) == 0 {
		return nil
	}
	m := r.shards.Load()
	if m == nil || m.n != len(slots) || m.first != &slots[0] {
		m = r.rebuild(slots)
	}
	return m.byReplica[addr]
}

// rebuild derives the shard map of slots, keeping each master's shard (and
// its since) across maps.
func (r *replicas) rebuild(slots []redis.ClusterSlot) *shardMap {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.shards.Load(); m != nil && m.n == len(slots) && m.first == &slots[0] {
		return m
	}
	old := r.shards.Load()
	m := &shardMap{first: &slots[0], n: len(slots), byReplica: make(map[string]*shard), byMaster: make(map[string]*shard)}
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		addr := s.Nodes[0].Addr
		sh := m.byMaster[addr]
		if sh == nil && old != nil {
			sh = old.byMaster[addr]
		}
		if sh == nil {
			sh = &shard{master: r.nodes.get(addr)}
		}
		m.byMaster[addr] = sh
		for _, rep := range s.Nodes[1:] {
			m.byReplica[rep.Addr] = sh
		}
	}
	r.shards.Store(m)
	return m
}

// readRoute is where a read that reached a replica goes.
type readRoute uint8

const (
	routeReplica readRoute = iota // served by the replica it reached
	routeMaster                   // sent on to the shard's master
	routeNowhere                  // failed: no usable node
)

// route decides where a read that go-redis sent to replica, of shard sh,
// goes.
func (r *replicas) route(ctx context.Context, sh *shard, replica *node) readRoute {
	if r.k.cfg.ReadFrom == ReadFromMasterPreferred {
		switch {
		case sh.master.br.State() != breaker.Open:
			return routeMaster
		case r.usable(ctx, replica):
			return routeReplica
		}
		return routeNowhere
	}
	if r.usable(ctx, replica) {
		return routeReplica
	}
	return routeMaster
}

// usable reports whether replica may serve a read now.
func (r *replicas) usable(ctx context.Context, replica *node) bool {
	return replica.br.State() != breaker.Open && (r.lag == nil || r.lag.fresh(ctx, replica.addr))
}

// servedByReplica counts a read replica serves for sh, and reports the
// start of a master's reads going to a replica.
func (r *replicas) servedByReplica(sh *shard, replica *node, n int) {
	replica.replicaReads.Add(uint64(n))
	if r.k.cfg.ReadFrom != ReadFromMasterPreferred || sh.since.Load() != 0 {
		return
	}
	now := r.k.clock.Now()
	if sh.since.CompareAndSwap(0, now.UnixNano()) {
		r.k.emit(Event{Kind: EventReplicaReadsStarted, Addr: sh.master.addr, Time: now}, slog.String("replica", replica.addr))
	}
}

// servedByMaster reports the end of a master's reads going to a replica.
func (r *replicas) servedByMaster(sh *shard) {
	since := sh.since.Load()
	if since == 0 || !sh.since.CompareAndSwap(since, 0) {
		return
	}
	now := r.k.clock.Now()
	r.k.emit(Event{Kind: EventReplicaReadsStopped, Addr: sh.master.addr, Time: now, Duration: now.Sub(time.Unix(0, since))})
}

// readFromReplica lists the masters whose reads go to a replica now, sorted.
func (r *replicas) readFromReplica() []string {
	m := r.shards.Load()
	if m == nil {
		return nil
	}
	var out []string
	for addr, sh := range m.byMaster {
		if sh.since.Load() != 0 && sh.master.br.State() == breaker.Open {
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// pollLag asks the replica at addr how far it lags, on its node client.
func (r *replicas) pollLag(ctx context.Context, addr string) (time.Duration, error) {
	cl := r.client(addr)
	if cl == nil {
		return 0, errNotServing
	}
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	return parseReplicationLag(info)
}

// directNodeKey marks the context of calls a caller makes on a node client
// of its choice (ForEachShard, ForEachSlave): replicaHook leaves them where
// the caller sent them.
type directNodeKey struct{}

// replicaHook sits on each node client of the ordinary cluster client,
// outside the node's guard. On a replica it takes the reads go-redis routed
// there and sends each where replicas.route says; on a master, and for
// everything else, it does nothing.
type replicaHook struct {
	r *replicas
	n *node // the node the client talks to
}

func (h replicaHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// routed returns the shard of a read go-redis routed to h's replica, or nil.
func (h replicaHook) routed(ctx context.Context, cmd redis.Cmder) *shard {
	sh := h.r.shardOf(h.n.addr)
	if sh == nil || isNodeAdmin(cmd) || ctx.Value(directNodeKey{}) != nil {
		return nil
	}
	return sh
}

func (h replicaHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	r, self := h.r, h.n
	return func(ctx context.Context, cmd redis.Cmder) error {
		sh := h.routed(ctx, cmd)
		if sh == nil {
			return next(ctx, cmd)
		}
		switch r.route(ctx, sh, self) {
		case routeReplica:
			r.servedByReplica(sh, self, 1)
			return next(ctx, cmd)
		case routeNowhere:
			return sh.master.unavailable
		}
		mc := r.client(sh.master.addr)
		if mc == nil {
			return next(ctx, cmd) // go-redis has not built the master's client yet
		}
		err := mc.Process(ctx, cmd)
		if !masterMissed(ctx, err) {
			if err == nil || err == redis.Nil || isRedisReply(err) {
				r.servedByMaster(sh)
			}
			return err
		}
		// The master did not answer a read its replica can: the replica
		// answers it, and go-redis, which sees only the replica's result,
		// never marks the replica failing for the master's fault.
		if r.usable(ctx, self) {
			r.servedByReplica(sh, self, 1)
			return next(ctx, cmd)
		}
		return err
	}
}

// ProcessPipelineHook routes a pipeline go-redis sent to a replica (every
// command a read, all of one shard) as one read; it is sent on to the
// master whole, and not retried on the replica if the master fails it.
func (h replicaHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	r, self := h.r, h.n
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 {
			return next(ctx, cmds)
		}
		sh := h.routed(ctx, cmds[0])
		if sh == nil {
			return next(ctx, cmds)
		}
		switch r.route(ctx, sh, self) {
		case routeReplica:
			r.servedByReplica(sh, self, len(cmds))
			return next(ctx, cmds)
		case routeNowhere:
			err := sh.master.unavailable
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		mc := r.client(sh.master.addr)
		if mc == nil {
			return next(ctx, cmds)
		}
		pipe := mc.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		_, err := pipe.Exec(ctx)
		if err == nil || err == redis.Nil || isRedisReply(err) {
			// Every command holds its own reply; returning an error reply
			// here would stamp it on the commands that succeeded.
			r.servedByMaster(sh)
			return nil
		}
		return err
	}
}

// masterMissed reports whether err says the master did not answer: not a
// reply, not the caller giving up, not Close.
func masterMissed(ctx context.Context, err error) bool {
	return err != nil && err != redis.Nil && !isRedisReply(err) && contextDone(ctx) == nil &&
		!errors.Is(err, ErrClosed)
}
