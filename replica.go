package redisguard

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// ReadFrom says which node of a shard serves read-only commands, in Cluster
// and Sentinel mode. A command is a read when COMMAND flags it readonly:
// GET, EVAL_RO and FCALL_RO are reads; EVAL, FCALL and every transaction go
// to the master. Where the servers refuse COMMAND, redisguard's own table of
// reads stands in (knownReads), and the log says so once.
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
	// latency, the master when the replica it picks is not usable: in
	// Cluster mode by go-redis's RouteByLatency, in Sentinel mode by the
	// nodes' sampled latencies (Stats().Nodes[].Latency), trying another
	// usable node now and then so that every estimate stays current.
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

// setReadFrom is ParseURL's read_from.
func setReadFrom(c *Config, v string) error {
	r, ok := parseReadFrom(v)
	if !ok {
		return errors.New("is not one of master, master_preferred, replica_preferred, nearest, any")
	}
	c.ReadFrom = r
	return nil
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

// replicas routes reads between the nodes of a shard with redisguard's
// breakers; replicaHook, on every node client of the ordinary cluster
// client, and sentinelReadHook, on the Sentinel client, apply its
// decisions. Two paths:
//
//   - A master whose breaker is open hands the reads that reach it to a
//     usable replica of its shard (every ReadFrom but ReadFromMaster); so
//     does a master that just failed to answer one. A read is what COMMAND
//     flags readonly, asked once of a replica (isRead). With ReadFromMasterPreferred
//     this is the only path: go-redis routes everything to the masters, so
//     the healthy path costs one atomic load, and replica connections are
//     opened with READONLY by the node clients' OnConnect.
//   - With ReadFromReplicaPreferred, ReadFromNearest and ReadFromAny,
//     go-redis's ReadOnly routing (with RouteByLatency or RouteRandomly)
//     decides what is a read, opens replica connections with READONLY and
//     picks a node of the shard; a replica that is not usable hands the read
//     on to its master. go-redis asks COMMAND for that; once a server has
//     refused it, it is answered with the refusal and not sent again
//     (commandInfo): go-redis then sends every command to the master.
//
// A replica is usable when its breaker is not open and, with
// Config.MaxReplicaStaleness, its lag is within the bound (lagTracker); none
// is once the servers refuse what that takes: INFO for the lag, READONLY on
// a cluster replica's connections.
type replicas struct {
	k     *core
	nodes *nodeSet
	// translate maps a replica's errors onto the documented set, as the
	// facade does for the master's (Sentinel mode, where sentinelReadHook
	// sits outside the facade); identity when nil.
	translate func(context.Context, error) error
	view      func() *slotmap.Map // the last slot map (topology.slotMap); Cluster mode
	lag       *lagTracker         // nil without MaxReplicaStaleness
	// members returns the replicas of master: from the slot map in Cluster
	// mode, from the sentinels in Sentinel mode (sentinelReplicas).
	members  func(ctx context.Context, master *node) []*node
	sentinel *sentinelReplicas // the replicas' clients in Sentinel mode; nil otherwise

	clients sync.Map // address → *redis.Client: the ordinary client's node clients

	shards atomic.Pointer[shardMap] // derived from view; rebuilt when it changes
	mu     sync.Mutex               // serialises rebuilds and guards shardState

	// shardState holds each master's fallback state, kept across slot maps;
	// guarded by mu, entries never removed.
	shardState map[string]*fallback
	falling    atomic.Int64 // fallbacks with since set: the healthy path skips them while 0

	reads      atomic.Pointer[map[string]bool] // COMMAND's readonly names, or knownReads; nil until fetched
	readsAsked singleflight.Group              // the COMMAND in flight, whose answer the reads that need it share
	nextFetch  time.Time                       // read and written only in readsAsked's calls, which do not overlap; before it COMMAND is not asked again

	// The questions replica routing asks the servers for itself, and what a
	// refusal costs (permission.go).
	command  denial   // COMMAND: which commands are reads
	commandQ question // COMMAND, as its refusal is logged in this mode
	lagInfo  denial   // INFO replication: a replica's lag
	readonly denial   // READONLY on a cluster node's connections (ReadFromMasterPreferred)
	// commandRefusal is the first refusal of COMMAND, which commandInfo
	// answers in its place; nil while none.
	commandRefusal atomic.Pointer[error]
}

// shardMap is one slot map's shards as nodes: which master each replica
// serves and which replicas each master has.
type shardMap struct {
	from       *slotmap.Map       // the slot map it was built from
	masterOf   map[string]*node   // replica address → its master
	replicasOf map[string][]*node // master address → its replicas
	// formerReplicasOf holds, for each master the map before this one had
	// and this one has not (replaced by a promoted replica), the replicas
	// it had there: go-redis routes by its own copy of the map, which it
	// swaps a moment after this one is stored, and a read it still sends to
	// the replaced master is served by one of them, the promoted one
	// included (one whose master no longer owns the slot answers MOVED).
	formerReplicasOf map[string][]*node
}

// fallback is a master's reads going to a replica while its breaker is open
// or it is marked slow.
type fallback struct {
	// since is when they started (ReadFromMasterPreferred), unix ns by the
	// client's clock; 0 while its reads go to the master.
	since atomic.Int64
}

// replicaSource is what replica routing needs in Sentinel mode: the
// master whose replicas the sentinels name, the builder of a replica's node
// client, and the facade's translation of the errors a replica returns.
type replicaSource struct {
	master    *sentinelMaster
	newClient func(addr string) *redis.Client
	translate func(context.Context, error) error
}

// newReplicas returns the router of a cluster client (topo set) or of a
// Sentinel client (sentinel set).
func newReplicas(k *core, nodes *nodeSet, topo *topology, sentinel *replicaSource) *replicas {
	r := &replicas{k: k, nodes: nodes, shardState: make(map[string]*fallback), commandQ: commandQuestion}
	if sentinel != nil {
		r.translate = sentinel.translate
		r.sentinel = newSentinelReplicas(k, nodes, sentinel.master, sentinel.newClient,
			func(addr string, cl *redis.Client) { r.clients.Store(addr, cl) })
		r.members = r.sentinel.of
	}
	if topo != nil && k.cfg.ReadFrom != ReadFromMasterPreferred {
		r.commandQ.instead = "go-redis's cluster client routes reads by it: with ReadFrom " + k.cfg.ReadFrom.String() +
			" every command now goes to the master, and go-redis logs each look-up it cannot make"
	}
	if topo != nil {
		r.view = topo.slotMap
		r.members = func(_ context.Context, master *node) []*node { return r.replicasOf(master.addr) }
	}
	if k.cfg.MaxReplicaStaleness > 0 {
		r.lag = newLagTracker(k.clock, k.cfg.MaxReplicaStaleness, k.cfg.ReadTimeout, r.pollLag)
	}
	return r
}

// close stops the lag polls and, in Sentinel mode, the replica look-ups,
// and closes the replicas' clients there.
func (r *replicas) close() {
	if r.lag != nil {
		r.lag.close()
	}
	if r.sentinel != nil {
		r.sentinel.close()
	}
}

// register records the node client go-redis built for addr, and returns the
// hook to install on it, outside its node guard.
func (r *replicas) register(addr string, cl *redis.Client) replicaHook {
	r.clients.Store(addr, cl)
	return replicaHook{r: r, n: r.nodes.get(addr), fb: r.fallback(addr)}
}

func (r *replicas) fallback(addr string) *fallback {
	r.mu.Lock()
	defer r.mu.Unlock()
	fb, ok := r.shardState[addr]
	if !ok {
		fb = &fallback{}
		r.shardState[addr] = fb
	}
	return fb
}

// fallbackOf returns fb, or master's if fb is nil.
func (r *replicas) fallbackOf(fb *fallback, master *node) *fallback {
	if fb != nil {
		return fb
	}
	return r.fallback(master.addr)
}

func (r *replicas) client(addr string) *redis.Client {
	if v, ok := r.clients.Load(addr); ok {
		return v.(*redis.Client)
	}
	return nil
}

// shardMap returns the shard map of the last slot map, or nil before one
// and outside Cluster mode.
func (r *replicas) shardMap() *shardMap {
	if r.view == nil {
		return nil
	}
	view := r.view()
	if view == nil {
		return nil
	}
	if m := r.shards.Load(); m != nil && m.from == view {
		return m
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.shards.Load(); m != nil && m.from == view {
		return m
	}
	m := &shardMap{from: view, masterOf: make(map[string]*node), replicasOf: make(map[string][]*node)}
	for _, addr := range view.Masters() {
		master := r.nodes.get(addr)
		reps := make([]*node, 0, len(view.Replicas(addr)))
		for _, rep := range view.Replicas(addr) {
			reps = append(reps, r.nodes.get(rep))
			m.masterOf[rep] = master
		}
		m.replicasOf[addr] = reps
	}
	if prev := r.shards.Load(); prev != nil {
		for addr, reps := range prev.replicasOf {
			if _, ok := m.replicasOf[addr]; !ok && len(reps) > 0 {
				if m.formerReplicasOf == nil {
					m.formerReplicasOf = make(map[string][]*node)
				}
				m.formerReplicasOf[addr] = reps
			}
		}
	}
	r.shards.Store(m)
	// A master the new map no longer has (replaced by its replica) is not
	// read from a replica any more.
	for addr, fb := range r.shardState {
		if _, ok := m.replicasOf[addr]; !ok {
			r.stop(fb, addr)
		}
	}
	return m
}

// masterOf returns the master of the replica at addr, or nil.
func (r *replicas) masterOf(addr string) *node {
	if m := r.shardMap(); m != nil {
		return m.masterOf[addr]
	}
	return nil
}

// replicasOf returns the replicas of the master at addr; for a master the
// last map replaced, the replicas the map before it gave it.
func (r *replicas) replicasOf(addr string) []*node {
	if m := r.shardMap(); m != nil {
		if reps, ok := m.replicasOf[addr]; ok {
			return reps
		}
		return m.formerReplicasOf[addr]
	}
	return nil
}

// usable reports whether replica may serve a read now: its breaker is not
// open, it is not marked slow, and it lags no more than MaxReplicaStaleness.
func (r *replicas) usable(ctx context.Context, replica *node) bool {
	return replica.br.State() != breaker.Open && !replica.slow.Load() && !r.readonly.refused() &&
		(r.lag == nil || r.lag.fresh(ctx, replica.addr))
}

// away reports whether master's reads should go to a replica: its breaker
// is open or it is marked slow.
func away(master *node) bool { return master.br.State() == breaker.Open || master.slow.Load() }

// standIn returns a usable replica of master and its client, or nil.
func (r *replicas) standIn(ctx context.Context, master *node) (*node, *redis.Client) {
	reps := r.members(ctx, master)
	if len(reps) == 0 {
		return nil, nil
	}
	first := rand.N(len(reps)) // spreads the reads over the replicas
	for i := range reps {
		rep := reps[(first+i)%len(reps)]
		if cl := r.client(rep.addr); cl != nil && r.usable(ctx, rep) {
			return rep, cl
		}
	}
	return nil, nil
}

// isRead reports whether cmd is a read, by COMMAND's readonly flag, asked
// once (and again at most once a second while it fails) of cl. The reads
// that need it meanwhile wait for that COMMAND, asked with the first one's
// ctx, and share its answer, a failure included. Until COMMAND has answered,
// and for good once a server has refused it, knownReads decides.
func (r *replicas) isRead(ctx context.Context, cmd redis.Cmder, cl *redis.Client) bool {
	reads := r.reads.Load()
	if reads == nil {
		reads = r.fetchReads(ctx, cl)
	}
	return (*reads)[cmd.Name()]
}

func (r *replicas) fetchReads(ctx context.Context, cl *redis.Client) *map[string]bool {
	v, _, _ := r.readsAsked.Do("", func() (any, error) {
		if reads := r.reads.Load(); reads != nil {
			return reads, nil
		}
		now := r.k.clock.Now()
		if now.Before(r.nextFetch) {
			return &knownReads, nil
		}
		r.nextFetch = now.Add(time.Second)
		info, err := cl.Command(ctx).Result()
		if err != nil {
			if r.command.refusedBy(r.k, r.commandQ, cl.Options().Addr, err) {
				r.reads.Store(&knownReads)
			}
			return &knownReads, nil
		}
		m := make(map[string]bool)
		for name, ci := range info {
			if ci != nil && ci.ReadOnly {
				m[name] = true
			}
		}
		r.reads.Store(&m)
		return &m, nil
	})
	return v.(*map[string]bool)
}

// knownReads is what replica routing takes for reads when the servers do
// not say: the reads of classify_repeat.go, by go-redis's lower-case command
// name. As in COMMAND's own table, a command with subcommands (MEMORY,
// OBJECT, XINFO) is no read as a whole. A read of a later Redis version
// that the table does not know goes to the master, which is always correct.
var knownReads = func() map[string]bool {
	m := make(map[string]bool)
	for _, name := range append(slices.Clone(readCommands), laterReadCommands...) {
		if !strings.Contains(name, "|") {
			m[strings.ToLower(name)] = true
		}
	}
	return m
}()

// The questions of replica routing, as their refusals are logged.
var (
	commandQuestion  = question{"command", "reads are told from writes by redisguard's table of read commands (a read it does not know goes to the master)"}
	lagQuestion      = question{"info", "a replica's lag cannot be read, so with MaxReplicaStaleness no read goes to a replica"}
	readonlyQuestion = question{"readonly", "replica connections cannot be made read-only, so no read goes to a replica"}
)

// commandInfo sends COMMAND, which go-redis's cluster client asks a node to
// route reads (and fetchReads to tell them), on the node client at addr;
// next sends it. Once a server has refused it, it is answered with that
// refusal without being sent: go-redis would otherwise ask again, of up to
// three nodes, for every command.
func (r *replicas) commandInfo(ctx context.Context, cmd *redis.CommandsInfoCmd, addr string, next redis.ProcessHook) error {
	if err := r.commandRefusal.Load(); err != nil {
		cmd.SetErr(*err)
		return *err
	}
	err := next(ctx, cmd)
	if r.command.refusedBy(r.k, r.commandQ, addr, err) {
		r.commandRefusal.CompareAndSwap(nil, &err)
	}
	return err
}

// servedByReplica counts reads replica serves for master, and reports the
// start of a master's reads going to a replica.
func (r *replicas) servedByReplica(fb *fallback, master, replica *node, n int) {
	replica.replicaReads.Add(uint64(n))
	if r.k.cfg.ReadFrom != ReadFromMasterPreferred || fb.since.Load() != 0 {
		return
	}
	now := r.k.clock.Now()
	if fb.since.CompareAndSwap(0, now.UnixNano()) {
		r.falling.Add(1)
		r.k.emit(Event{Kind: EventReplicaReadsStarted, Addr: master.addr, Time: now}, slog.String("replica", replica.addr))
	}
}

// servedByMaster reports the end of a master's reads going to a replica.
// In Sentinel mode a master that serves ends them for every address: the
// one it replaced, too, is no longer read from a replica.
func (r *replicas) servedByMaster(fb *fallback, master *node) {
	if r.sentinel == nil {
		r.stop(fb, master.addr)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, fb := range r.shardState {
		r.stop(fb, addr)
	}
}

// stop ends addr's fallback, if it has one.
func (r *replicas) stop(fb *fallback, addr string) {
	since := fb.since.Load()
	if since == 0 || !fb.since.CompareAndSwap(since, 0) {
		return
	}
	r.falling.Add(-1)
	now := r.k.clock.Now()
	r.k.emit(Event{Kind: EventReplicaReadsStopped, Addr: addr, Time: now, Duration: now.Sub(time.Unix(0, since))})
}

// readFromReplica lists the masters, sorted, whose breaker is open or that
// are marked slow, and whose reads a replica serves.
func (r *replicas) readFromReplica() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for addr, fb := range r.shardState {
		if fb.since.Load() == 0 {
			continue
		}
		if n, ok := r.nodes.lookup(addr); ok && away(n) {
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// pollLag asks the replica at addr how far it lags, on its node client.
// Once a server has refused the question, no replica's lag is known, and
// none is asked again.
func (r *replicas) pollLag(ctx context.Context, addr string) (time.Duration, error) {
	cl := r.client(addr)
	if cl == nil || r.lagInfo.refused() {
		return 0, errNotServing
	}
	cmd := ownCmd{redis.NewCmd(ctx, "info", "replication")}
	_ = cl.Process(ctx, cmd)
	info, err := cmd.Text()
	if err != nil {
		r.lagInfo.refusedBy(r.k, lagQuestion, addr, err)
		return 0, err
	}
	return parseReplicationLag(info)
}

// allReads reports whether every command of cmds is a read.
func (r *replicas) allReads(ctx context.Context, cmds []redis.Cmder, cl *redis.Client) bool {
	for _, cmd := range cmds {
		if !r.isRead(ctx, cmd, cl) {
			return false
		}
	}
	return true
}

// divertible returns a usable replica of master, and its client, when cmd
// is a read it may serve instead; nil otherwise. Blocking reads stay: they
// belong to the long budget.
func (r *replicas) divertible(ctx context.Context, cmd redis.Cmder, master *node) (*node, *redis.Client) {
	if own(ctx, cmd) || classifyCmd(cmd) != classOrdinary {
		return nil, nil
	}
	rep, cl := r.standIn(ctx, master)
	if cl == nil || !r.isRead(ctx, cmd, cl) {
		return nil, nil
	}
	return rep, cl
}

// divertibleBatch is divertible for a pipeline: every command must be a
// read, so a transaction never is.
func (r *replicas) divertibleBatch(ctx context.Context, cmds []redis.Cmder, master *node) (*node, *redis.Client) {
	if own(ctx, cmds[0]) || batchIsBlocking(cmds) {
		return nil, nil
	}
	rep, cl := r.standIn(ctx, master)
	if cl == nil || !r.allReads(ctx, cmds, cl) {
		return nil, nil
	}
	return rep, cl
}

// refused does for a read handed to a replica what the open breaker's fast
// failure does: it keeps the master probed and the slot map looked after. A
// master that is only slow needs neither.
func (r *replicas) refused(master *node) {
	if master.br.State() != breaker.Open {
		return
	}
	r.nodes.refused(master)
	if t := r.nodes.topo; t != nil {
		t.trigger()
	}
}

// process sends cmd, for master, to the node next leads to, or to a
// replica of master while its breaker is open or it is marked slow, or when
// it failed to answer.
//
// fb is master's fallback state, or nil to look it up when needed (the
// Sentinel master's node changes with failovers).
func (r *replicas) process(ctx context.Context, cmd redis.Cmder, master *node, fb *fallback, next redis.ProcessHook) error {
	if away(master) {
		if rep, cl := r.divertible(ctx, cmd, master); cl != nil {
			r.refused(master)
			r.servedByReplica(r.fallbackOf(fb, master), master, rep, 1)
			return cl.Process(ctx, cmd)
		}
		return next(ctx, cmd) // fails fast, or waits its turn on a slow master
	}
	err := next(ctx, cmd)
	if err == nil || err == redis.Nil || isRedisReply(err) {
		if r.falling.Load() != 0 && !master.slow.Load() {
			// Answered, and not by a master that serves only its writes.
			r.servedByMaster(r.fallbackOf(fb, master), master)
		}
		return err
	}
	if masterMissed(ctx, err) {
		// The master did not answer a read a replica can answer.
		if rep, cl := r.divertible(ctx, cmd, master); cl != nil {
			r.servedByReplica(r.fallbackOf(fb, master), master, rep, 1)
			return cl.Process(ctx, cmd)
		}
	}
	return err
}

// processBatch is process for a pipeline.
func (r *replicas) processBatch(ctx context.Context, cmds []redis.Cmder, master *node, fb *fallback, next redis.ProcessPipelineHook) error {
	if len(cmds) > 0 && away(master) {
		if rep, cl := r.divertibleBatch(ctx, cmds, master); cl != nil {
			r.refused(master)
			r.servedByReplica(r.fallbackOf(fb, master), master, rep, len(cmds))
			return pipelineOn(ctx, cl, cmds)
		}
		return next(ctx, cmds)
	}
	err := next(ctx, cmds)
	if r.falling.Load() != 0 {
		r.masterAnswered(err, master, fb)
	}
	return err
}

// masterAnswered is told that master answered a batch with err, while reads
// are falling back somewhere: an answer ends its fallback.
func (r *replicas) masterAnswered(err error, master *node, fb *fallback) {
	if (err == nil || err == redis.Nil || isRedisReply(err)) && !master.slow.Load() {
		r.servedByMaster(r.fallbackOf(fb, master), master)
	}
}
