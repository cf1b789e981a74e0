package redisguard

import (
	"context"
	"errors"
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
	fac      *facade         // the client-level step of every command (facade.go)
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
//
// Each component is built with what it needs, in the order of what it
// needs: a component that must hear of another's changes (a breaker that
// opens, a Sentinel master that is replaced) registers with it while it is
// built, and nothing is wired after.
func newClient(cfg Config, clk clock.Clock) (*Client, error) {
	resolved, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	k := newCore(resolved, clk)
	probeOpt := k.options(1).Simple()
	ext := &extensions{k: k}
	var pending *pendingMode
	if resolved.Mode == ModeAuto {
		mode, contact := detectMode(resolved, probeOpt)
		if contact != nil {
			// No answer: Standalone until the server's first answer
			// decides (detect_pending.go).
			mode = ModeStandalone
			k.log.Warn("redisguard: the server did not say whether it is a cluster node; running Standalone until it answers",
				"addr", resolved.Addrs[0], "err", k.redact(contact.Error()))
			pending = &pendingMode{c: k, build: func() (*Client, error) {
				up := cfg
				up.Mode = ModeCluster
				uc, err := newClient(up, clk)
				if err == nil {
					ext.each(func(fn func(redis.UniversalClient, ClientRole) error) {
						if err := uc.InstrumentRoles(fn); err != nil {
							k.log.Warn("redisguard: an Instrument extension failed on the cluster client; it runs without it",
								"err", k.redact(err.Error()))
						}
					})
				}
				return uc, err
			}}
		}
		if err := applyDetected(&resolved, mode); err != nil {
			return nil, err
		}
		k.cfg = resolved
		probeOpt = k.options(1).Simple()
	}

	var topo *topology
	if resolved.Mode == ModeCluster {
		topo = newTopology(k)
	}
	nodes := newNodeSet(k, topo, nodeProbe(probeOpt))
	var sm *sentinelMaster
	if resolved.Mode == ModeSentinel {
		sm = newSentinelMaster(resolved.MasterName, resolved.Addrs, probeOpt, k.sentinelOptions(), nodes, k)
	}
	div := &divergence{k: k, topo: topo, nodes: nodes, probe: probeOpt}
	hooks := &clientHooks{user: &userHooks{}, ext: ext, div: divergenceHook{div}, topo: topo, sentinel: sm, pending: pending}
	adm := newAdmission(k, hooks, longClient(k, nodes, hooks), refuseDown(resolved, nodes, sm))
	// Subscriptions run on clients of their own (subscription_client.go),
	// and are moved off a node that stops answering (subscription_move.go).
	subs := newSubscriptions(k, adm, nodes, topo, sm, hooks)
	fac := &facade{k: k, adm: adm, ride: newRideOut(resolved.ClusterNodeTimeout, readOnlyAnswered(resolved, nodes, sm), clusterWhole(topo)),
		nodes: nodes, topo: topo}
	var reps *replicas
	if resolved.ReadFrom != ReadFromMaster {
		var src *replicaSource
		if sm != nil {
			src = &replicaSource{master: sm, translate: fac.translate, newClient: func(addr string) *redis.Client {
				return newGoRedis(clientSpec{kind: clientReplica, base: probeOpt, addr: addr,
					poolSize: resolved.MaxConnections, hooks: hooks, guard: nodes.guard(addr)}).(*redis.Client)
			}}
		}
		reps = newReplicas(k, nodes, topo, src)
	}
	c := &Client{
		core: k, nodes: nodes, probeOpt: probeOpt, sentinel: sm, topo: topo, div: div, adm: adm,
		hooks: hooks, subs: subs, fac: fac, pending: pending, replicas: reps,
	}
	c.UniversalClient = newGoRedis(clientSpec{
		kind: clientOrdinary, k: k, nodes: nodes, poolSize: resolved.MaxConnections, hooks: hooks,
		front: frontHooks{facade: fac, replicas: reps}, watch: &c.watch,
	}).(redis.UniversalClient)
	return c, nil
}

// refuseDown returns the refusal of the node a long call at addr goes to
// while its breaker is open, and nil while it is not: in Sentinel mode the
// master's, whatever addr says, and in Standalone mode the one server's
// when addr is empty. A refusal counts as traffic the node's prober hears
// of (nodeSet.refused), as a guard's fast failure does.
func refuseDown(cfg Config, nodes *nodeSet, sm *sentinelMaster) func(addr string) error {
	return func(addr string) error {
		var n *node
		switch {
		case sm != nil:
			n = sm.node()
		default:
			if addr == "" {
				addr = cfg.Addrs[0]
			}
			var ok bool
			if n, ok = nodes.lookup(addr); !ok {
				return nil
			}
		}
		if n.br.State() != breaker.Open {
			return nil
		}
		nodes.refused(n)
		return n.unavailable
	}
}

// readOnlyAnswered is what a READONLY from the node the client takes for
// the master makes it do, before it sends the command again: in Standalone
// mode, drop the idle pooled connections, so that new dials follow the
// server's name to wherever it leads now (a managed service's primary
// endpoint after a failover); in Sentinel mode, ask the sentinels. go-redis
// reloads the slot map itself in Cluster mode.
func readOnlyAnswered(cfg Config, nodes *nodeSet, sm *sentinelMaster) func() {
	switch cfg.Mode {
	case ModeStandalone:
		return nodes.get(cfg.Addrs[0]).conns.dropIdle
	case ModeSentinel:
		return func() { sm.lookup(true) }
	}
	return nil
}

// clusterWhole is what the ride-out does when CLUSTERDOWN ends: in Cluster
// mode, fetch the slot map at once, whose change (a promotion) ended it.
func clusterWhole(topo *topology) func() {
	if topo == nil {
		return nil
	}
	return topo.force
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
	return c.fac.translate(ctx, err)
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
// opt's handshake, then PING.
func nodeProbe(opt *redis.Options) func(context.Context, string, time.Duration) error {
	return func(ctx context.Context, addr string, wait time.Duration) error {
		_, err := probeAddr(ctx, opt, addr, wait, "ping")
		return err
	}
}
