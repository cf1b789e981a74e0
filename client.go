package redisguard

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
)

// Client is a drop-in replacement for a go-redis client. It embeds the
// go-redis client it built, so every command method, Pipeline, TxPipeline,
// Watch, Do and Process behave as in go-redis; what changes is what happens
// around them (see the package documentation).
//
// A Client is safe for concurrent use. Close it when done.
type Client struct {
	// UniversalClient is the ordinary go-redis client (standalone, failover
	// or cluster), with redisguard's hooks installed. Calls made on it
	// directly are guarded too.
	redis.UniversalClient

	*core // the resolved Config, clock, logger, events and closed flag

	nodes    *nodeSet        // per-node breakers, shared by the ordinary and long clients
	probeOpt *redis.Options  // the node handshake recovery probes use; Addr set per probe
	sentinel *sentinelMaster // the master's address (Sentinel mode); nil otherwise
	topo     *topology       // cluster slot-map refresh; nil outside Cluster mode
	div      *divergence     // redirect-cycle decisions (Cluster mode)
	adm      *admission      // the long budget and the long client (admission.go)
	hooks    *clientHooks    // the hooks newGoRedis installs around the node guards
	subs     *subscriptions  // live subscription connections (subscription_move.go)
	ride     *rideOut        // waits out the replies that say a server cannot serve now
	pending  *pendingMode    // ModeAuto's question, when the server gave no answer at NewClient; nil otherwise
	replicas *replicas       // replica reads (Config.ReadFrom); nil without
	watch    *redis.Client   // Standalone and Sentinel: the client Watch runs on (watch.go); nil in Cluster mode

	closeOnce sync.Once
	closeErr  error
}

var _ redis.UniversalClient = (*Client)(nil)

// NewClient checks cfg and builds the go-redis client it describes. With
// ModeAuto and one address it asks that server once whether it is a cluster
// node (see ModeAuto), waiting at most a second for each step; otherwise it
// opens no connection and the first command dials. To fail fast at start-up
// on an unreachable server, Ping once:
//
//	if err := c.Ping(ctx).Err(); err != nil { ... }
func NewClient(cfg Config) (*Client, error) {
	return newClient(cfg, clock.Real())
}

// newClient is NewClient with an injected clock, for tests.
func newClient(cfg Config, clk clock.Clock) (*Client, error) {
	resolved, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	c := &Client{core: newCore(resolved, clk)}
	c.probeOpt = c.core.options(1).Simple()
	if resolved.Mode == ModeAuto {
		mode, contact := detectMode(resolved, c.probeOpt)
		if contact != nil {
			// No answer: Standalone until the server's first answer
			// decides (detect_pending.go).
			mode = ModeStandalone
			c.log.Warn("redisguard: the server did not say whether it is a cluster node; running Standalone until it answers",
				"addr", resolved.Addrs[0], "err", c.redact(contact.Error()))
			c.pending = &pendingMode{c: c.core, build: func() (*Client, error) {
				up := cfg
				up.Mode = ModeCluster
				uc, err := newClient(up, clk)
				if err == nil {
					c.hooks.ext.each(func(fn func(redis.UniversalClient, ClientRole) error) {
						if err := uc.InstrumentRoles(fn); err != nil {
							c.log.Warn("redisguard: an Instrument extension failed on the cluster client; it runs without it",
								"err", c.redact(err.Error()))
						}
					})
				}
				return uc, err
			}}
		}
		if err := applyDetected(&resolved, mode); err != nil {
			return nil, err
		}
		c.core.cfg = resolved
		c.probeOpt = c.core.options(1).Simple()
	}
	if resolved.Mode == ModeCluster {
		c.topo = newTopology(c.core)
	}
	c.nodes = newNodeSet(c.core, c.topo, nodeProbe(c.probeOpt, nil))
	if c.topo != nil && c.nodes.slow != nil {
		c.nodes.slow.groups = c.topo.shards
	}
	if resolved.Mode == ModeSentinel {
		sm := newSentinelMaster(resolved.MasterName, resolved.Addrs, c.probeOpt, c.sentinelOptions(), c.nodes.get, c.core)
		c.sentinel = sm
		c.nodes.probes.probe = nodeProbe(c.probeOpt, sm)
		c.nodes.onOpen = func(n *node) {
			if n == sm.node() {
				sm.lookup(false)
			}
		}
	}
	c.div = &divergence{k: c.core, topo: c.topo, nodes: c.nodes, probe: c.probeOpt}
	c.ride = newRideOut(resolved.ClusterNodeTimeout, c.readOnlyAnswered())
	c.adm = newAdmission(c.core, c.longClient)
	c.adm.nodeDown = func(addr string) bool {
		switch {
		case c.sentinel != nil:
			return c.sentinel.node().br.State() == breaker.Open
		case addr == "":
			addr = c.cfg.Addrs[0] // Standalone: the long client's one server
		}
		n, ok := c.nodes.lookup(addr)
		return ok && n.br.State() == breaker.Open
	}
	// Subscriptions run on clients of their own (subscription_client.go),
	// and are moved off a node that stops answering (subscription_move.go).
	c.subs = newSubscriptions(c.core, c.adm, c.nodes, c.topo, c.sentinel)
	budget := subscriptionBudget{c.subs, routeAsked}
	switch {
	case c.topo != nil:
		// Another node serves a classic subscription at once, and a
		// sharded one once the slot map names the new owner.
		budget.route = routeAnyNode
		c.nodes.onOpen = func(n *node) { c.subs.moveFrom(n.addr) }
	case c.sentinel != nil:
		budget.route = routeMaster
		c.sentinel.leaving = c.subs.moveFrom
	}
	c.hooks = &clientHooks{
		user: &userHooks{}, ext: &extensions{k: c.core},
		facade: facadeHook{c}, budget: budget, div: divergenceHook{c.div},
		topo: c.topo, sentinel: c.sentinel, pending: c.pending,
	}
	if resolved.ReadFrom != ReadFromMaster {
		c.replicas = newReplicas(c.core, c.nodes, c.topo)
		if c.sentinel != nil {
			r := c.replicas
			newClient := func(addr string) *redis.Client {
				return newGoRedis(clientSpec{kind: clientReplica, base: c.probeOpt, addr: addr,
					poolSize: resolved.MaxConnections, hooks: c.hooks, guard: c.nodes.guard(addr)}).(*redis.Client)
			}
			r.sentinel = newSentinelReplicas(c.core, c.nodes, c.sentinel, newClient, func(addr string, cl *redis.Client) { r.clients.Store(addr, cl) })
			r.members = r.sentinel.of
			r.translate = c.translate
		}
		c.hooks.replicas = c.replicas
	}
	c.adm.hooks = c.hooks
	c.subs.hooks = c.hooks
	c.UniversalClient = newGoRedis(clientSpec{
		kind: clientOrdinary, k: c.core, nodes: c.nodes, poolSize: resolved.MaxConnections, hooks: c.hooks, watch: &c.watch,
	}).(redis.UniversalClient)
	if cc, ok := c.UniversalClient.(*redis.ClusterClient); ok {
		c.div.cluster = cc
	}
	return c, nil
}

// readOnlyAnswered is what a READONLY from the node the client takes for
// the master makes it do, before it sends the command again: in Standalone
// mode, drop the idle pooled connections, so that new dials follow the
// server's name to wherever it leads now (a managed service's primary
// endpoint after a failover); in Sentinel mode, ask the sentinels. go-redis
// reloads the slot map itself in Cluster mode.
func (c *Client) readOnlyAnswered() func() {
	switch c.cfg.Mode {
	case ModeStandalone:
		n := c.nodes.get(c.cfg.Addrs[0])
		return n.conns.dropIdle
	case ModeSentinel:
		return func() { c.sentinel.lookup(true) }
	}
	return nil
}

// Mode reports the mode the client runs in (never ModeAuto). With ModeAuto
// and a server that did not answer at NewClient, it is Standalone until the
// server's first answer, and Cluster from then on if that said so.
func (c *Client) Mode() Mode { return c.current().cfg.Mode }

// Close closes the client. It is terminal, idempotent and safe to call from
// many goroutines. Calls in flight, blocking ones included, are cut short
// because their connections are closed; every later call, including those on
// retained Pipelines, Txs, PubSubs and AutoPipeliners, fails with ErrClosed
// (or, for a PubSub or an AutoPipeliner, with go-redis's closed error) and
// opens no socket. errors.Is(err, redis.ErrClosed) holds for either.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.nodes.close()
		if c.replicas != nil {
			c.replicas.close()
		}
		if c.sentinel != nil {
			c.sentinel.close()
		}
		longErr := c.adm.close()
		subsErr := c.subs.close()
		var upErr error
		if c.pending != nil {
			upErr = c.pending.close()
		}
		c.closeErr = errors.Join(c.UniversalClient.Close(), upErr)
		if c.closeErr == nil {
			c.closeErr = longErr
		}
		if c.closeErr == nil {
			c.closeErr = subsErr
		}
		c.log.Debug("redisguard: client closed")
	})
	return c.closeErr
}

// facadeHook is the client-level hook: it refuses work after Close, sends long
// commands to the long budget and translates go-redis's errors into
// redisguard's. Per-node concerns (breakers) live in nodeGuard. In Cluster
// mode nodeGuard sits on each node client, below this hook; in Standalone and
// Sentinel mode both are on the one client and nodeGuard wraps this hook
// (see newGoRedis; admission.go relies on that order).
type facadeHook struct{ c *Client }

func (h facadeHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.c.closed.Load() {
			return nil, ErrClosed
		}
		return next(ctx, network, addr)
	}
}

// ProcessHook is the Cluster client's: a plain command (plainCommand), the
// common one, goes on from the hook's own frame, as in the node guard.
func (h facadeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	c := h.c
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.closed.Load() || !plainCommand(cmd.Args()) {
			return c.process(ctx, cmd, next, false) // a Tx runs on a node client, below
		}
		return c.answered(ctx, cmd, next, next(ctx, cmd))
	}
}

// process is the facade's step for cmd, before next: it refuses cmd after
// Close, hands a long command to the long budget and translates errors.
// onTx says that cmd is sent on a Watch transaction's Tx (nodeGuard.tx).
func (c *Client) process(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, onTx bool) error {
	if c.closed.Load() {
		return ErrClosed
	}
	// One classification per command; ordinary ones go straight on.
	if class := classifyCmd(cmd); class != classOrdinary {
		return c.translate(ctx, c.adm.process(ctx, cmd, class, onTx))
	}
	return c.answered(ctx, cmd, next, next(ctx, cmd))
}

// answered returns err, what next answered an ordinary command, in
// redisguard's terms.
func (c *Client) answered(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, err error) error {
	if err == nil {
		return nil
	}
	return c.failedCmd(ctx, cmd, next, err)
}

// failedCmd is answered for a command that failed: a reply that says the
// server cannot serve it now is ridden out (rideOut), unless the command is
// marked NoRetry (go-redis's per-command switch; redisguard's health
// checks), and what remains is translated.
//
//go:noinline
func (c *Client) failedCmd(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, err error) error {
	if notServing(err) && !cmd.NoRetry() {
		err = c.ride.process(ctx, err, func(ctx context.Context) error { return next(ctx, cmd) })
	}
	c.nodes.sent.forget(cmd) // go-redis's attempts have ended
	if c.topo != nil {
		return c.leftover(ctx, cmd, c.translate(ctx, err))
	}
	return c.translate(ctx, err)
}

func (h facadeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	c := h.c
	return func(ctx context.Context, cmds []redis.Cmder) error { return c.processBatch(ctx, cmds, next, false) }
}

// processBatch is process for a batch. A batch after Close, or one that
// blocks, and a failed one run in functions of their own (see
// nodeGuard.ProcessHook).
func (c *Client) processBatch(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, onTx bool) error {
	if c.closed.Load() || batchIsBlocking(cmds) {
		return c.unusualBatch(ctx, cmds, onTx)
	}
	return c.batchDone(ctx, cmds, next, next(ctx, cmds))
}

// batchDone returns err, what next answered a batch of ordinary commands,
// in redisguard's terms.
//
// In Cluster mode err is the first command's error, of any node, that is
// not nil, and failedBatch looks for refusals in every command: one node's
// command may fail on its connection while another's is refused. A single
// node's batch shows a refusal that needs riding out in err: it returns its
// first command's reply, and LOADING and MASTERDOWN answer every command
// alike. (READONLY answers only the writes: a pipeline whose first command
// is a read keeps its writes' READONLY.)
func (c *Client) batchDone(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, err error) error {
	if (err == nil || (err == redis.Nil && c.topo == nil)) && !c.nodes.sent.pending() {
		return err
	}
	return c.failedBatch(ctx, cmds, next, err)
}

// failedBatch is batchDone for a batch that failed: its commands refused
// with a reply that says the server cannot serve them now are ridden out
// (rideOut.batch), and what remains is translated. In Cluster mode every
// failed batch is searched for them, whatever failed first and after the
// caller's context has ended too (rideOut then types them at once), so that
// none reaches the caller raw; a single node's batch when its error is a
// reply (see batchDone).
//
//go:noinline
func (c *Client) failedBatch(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, err error) error {
	refusalsShow := c.topo != nil || err == redis.Nil || isRedisReply(err)
	if refusalsShow && firstRefusal(cmds) != nil && !cmdsContainNoRetry(cmds) {
		err = c.ride.batch(ctx, cmds, next, err)
	}
	c.nodes.sent.forget(cmds...) // the caller's operation ends here
	if c.topo == nil {
		if batchAnswered(err) {
			// A single node's replies, all read: nothing to translate.
			return err
		}
		return translateBatch(ctx, cmds, err, c.translate)
	}
	// A cluster batch's commands may hold what node guards sealed, and
	// what go-redis's transaction loop stamped on them after the guard
	// (a raw read error): each gets its caller's error.
	var unknown error
	for _, cmd := range cmds {
		if cerr := cmd.Err(); cerr != nil && cerr != redis.Nil {
			cerr = c.leftover(ctx, cmd, c.translate(ctx, cerr))
			cmd.SetErr(cerr)
			if unknown == nil && errors.Is(cerr, ErrOutcomeUnknown) {
				unknown = cerr
			}
		}
	}
	if err == nil || err == redis.Nil {
		return err
	}
	if unknown != nil {
		return unknown
	}
	return c.leftover(ctx, nil, c.translate(ctx, err))
}

// leftover types a network error that reached the cluster facade past
// every node guard: go-redis's cluster transaction loop reads EXEC's reply
// itself and hands the raw read error on. Like the guard's (callerError), it
// ends a command that may have run and is not safe to repeat with
// ErrOutcomeUnknown, and any other with ErrNodeFailed, naming the node the
// error names.
func (c *Client) leftover(ctx context.Context, cmd redis.Cmder, err error) error {
	if !isNetworkError(err) || isGuardError(err) || contextDone(ctx) != nil {
		return err
	}
	addr := ""
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Addr != nil {
		addr = opErr.Addr.String()
	}
	n, ok := c.nodes.lookup(addr)
	if !ok {
		n = &node{addr: addr}
	}
	if cmd != nil && mayHaveRun(ctx, err) && !repeatable(cmd) {
		return n.outcomeUnknown(cmd, err)
	}
	return n.unreachable(err)
}

// unusualBatch is the facade's step for a batch after Close, or one that
// blocks: a transaction (MULTI ... EXEC) is ordinary even with BLPOP inside,
// since Redis never blocks within EXEC; any other batch holding a blocking
// command goes to the long budget.
//
//go:noinline
func (c *Client) unusualBatch(ctx context.Context, cmds []redis.Cmder, onTx bool) error {
	if c.closed.Load() {
		return failBatch(cmds, ErrClosed)
	}
	err := c.adm.processBatch(ctx, cmds, onTx)
	if err == nil {
		return nil
	}
	return translateBatch(ctx, cmds, err, c.translate)
}

// translateBatch returns err, a batch's, through translate, and passes each
// of its commands' errors through it too.
//
//go:noinline
func translateBatch(ctx context.Context, cmds []redis.Cmder, err error, translate func(context.Context, error) error) error {
	for _, cmd := range cmds {
		if cerr := cmd.Err(); cerr != nil && cerr != redis.Nil {
			cmd.SetErr(translate(ctx, cerr))
		}
	}
	return translate(ctx, err)
}

// translate maps what go-redis returns onto the documented error set. Redis
// replies (including redis.Nil) pass through untouched: they are answers.
func (c *Client) translate(ctx context.Context, err error) error {
	if err == nil || err == redis.Nil {
		return err
	}
	err = unseal(err)
	if isRedisReply(err) {
		return err
	}
	if c.closed.Load() || errors.Is(err, redis.ErrClosed) {
		return ErrClosed
	}
	if ctxErr := contextDone(ctx); ctxErr != nil && !isGuardError(err) {
		// The caller's own deadline or cancellation ended the call; go-redis
		// reports it as an i/o timeout on the socket. Hand back ctx.Err()
		// unchanged so callers can test it with ==.
		return ctxErr
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return ErrPoolExhausted
	}
	return err
}

// contextDone returns the caller's context's error once it is done, and
// DeadlineExceeded as soon as its deadline has passed: go-redis sets the
// socket deadline from the context, and the socket can fire a hair before
// the context's own timer. A context admission derived for a long call
// (withCaller) answers for the caller's: its own deadline is a read budget,
// and a server that overruns it is failing, not the caller giving up.
func contextDone(ctx context.Context) error {
	if caller, ok := ctx.Value(callerKey{}).(context.Context); ok {
		ctx = caller
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// callerKey keys the caller's own context in one derived from it.
type callerKey struct{}

// withCaller returns derived, marked as derived from caller (see
// contextDone).
func withCaller(derived, caller context.Context) context.Context {
	return context.WithValue(derived, callerKey{}, caller)
}

// isRedisReply reports whether err is an error reply from the server.
func isRedisReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// isGuardError reports whether err is one of redisguard's own decisions,
// which take precedence over a context that expired meanwhile.
func isGuardError(err error) bool {
	return errors.Is(err, ErrNodeUnavailable) || errors.Is(err, ErrPoolExhausted) || errors.Is(err, ErrOutcomeUnknown) ||
		errors.Is(err, ErrClusterFailover) || errors.Is(err, ErrSlotMapCorruption) || errors.Is(err, ErrNotServing) ||
		errors.Is(err, ErrNodeFailed)
}

// ForEachMaster calls fn for each master concurrently, as go-redis's
// ClusterClient.ForEachMaster does, and returns the first error. In Cluster
// mode fn gets the cluster's node clients, which carry the node breakers: a
// command for a node whose breaker is open fails at once with
// ErrNodeUnavailable. In Standalone and Sentinel mode fn gets the client's
// own go-redis client (the server, or the current master), once. fn's
// commands go straight to the node: a blocking command sent there is not
// counted against MaxLongConnections.
func (c *Client) ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error {
	return c.current().forEach(ctx, fn, (*redis.ClusterClient).ForEachMaster, true)
}

// ForEachShard calls fn for each node, masters and replicas, concurrently;
// see ForEachMaster. Outside Cluster mode it calls fn once, as ForEachMaster.
func (c *Client) ForEachShard(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error {
	return c.current().forEach(ctx, fn, (*redis.ClusterClient).ForEachShard, true)
}

// ForEachSlave calls fn for each replica concurrently; see ForEachMaster.
// Outside Cluster mode there are none the client talks to, and fn is not
// called.
func (c *Client) ForEachSlave(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error {
	return c.current().forEach(ctx, fn, (*redis.ClusterClient).ForEachSlave, false)
}

func (c *Client) forEach(ctx context.Context, fn func(context.Context, *redis.Client) error,
	cluster func(*redis.ClusterClient, context.Context, func(context.Context, *redis.Client) error) error, master bool) error {
	if c.closed.Load() {
		return ErrClosed
	}
	var err error
	switch cl := c.UniversalClient.(type) {
	case *redis.ClusterClient:
		// The caller chose the node: its reads stay there (replica.go).
		direct := func(ctx context.Context, node *redis.Client) error {
			return fn(context.WithValue(ctx, directNodeKey{}, true), node)
		}
		err = cluster(cl, ctx, direct)
	case *redis.Client:
		if master {
			err = fn(ctx, cl)
		}
	}
	return c.translate(ctx, err)
}

// ClusterClient returns the go-redis cluster client the Client runs in
// Cluster mode, with redisguard's hooks installed, for what the Client does
// not cover; nil in the other modes. The embedded UniversalClient is the same
// go-redis client in every mode.
func (c *Client) ClusterClient() *redis.ClusterClient {
	cc, _ := c.current().UniversalClient.(*redis.ClusterClient)
	return cc
}

// nodeProbe is the recovery probe of an address: a fresh connection with
// opt's handshake, then PING. With sm, the node that stands for a Sentinel
// master whose address is unknown is probed by asking the sentinels.
func nodeProbe(opt *redis.Options, sm *sentinelMaster) func(context.Context, string, time.Duration) error {
	return func(ctx context.Context, addr string, wait time.Duration) error {
		if sm != nil && addr == sm.role.addr {
			return sm.probeRole(ctx)
		}
		_, err := probeAddr(ctx, opt, addr, wait, "ping")
		return err
	}
}
