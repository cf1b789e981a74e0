package redisguard

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// newGoRedis is the one place that builds a go-redis client: it assembles
// the client that k's Config describes, with poolSize connections per node,
// and installs the node guards of nodes on it: on the single server in
// Standalone, on the failover client in Sentinel, and on each node client in
// Cluster through ClusterOptions.NewClient, go-redis's per-node constructor.
// The ordinary and the long clients are both built here, so the two cannot
// drift apart in anything but their pool size and, for the long one, the
// read timeout of Cluster batches. The caller adds the client-level hooks.
//
// The hooks every go-redis client of a Client carries, outermost first:
//
//	hook                 Standalone   Sentinel          Cluster
//	facadeHook           client       client            cluster client (ordinary only)
//	subscriptionBudget   client       client            each node client
//	divergenceHook       -            -                 cluster client
//	sentinelMaster       -            client (first)    -
//	nodeGuard            client       client            each node client
//
// Sharded subscriptions in Cluster mode run on a cluster client of their own
// (subscription_sharded.go), built here too: nodeGuard, then
// subscriptionBudget, on each node client, and no cluster-level hook.
//
// In Standalone and Sentinel mode nodeGuard is added here, before the
// caller adds facadeHook, so it is the outer one and already scores the
// long calls facadeHook hands to the long client; in Cluster mode it sits
// on the node clients, inside every cluster-level hook.
func newGoRedis(k *core, nodes *nodeSet, sm *sentinelMaster, poolSize int, long bool) redis.UniversalClient {
	cfg := k.cfg
	uo := k.options(poolSize)
	switch cfg.Mode {
	case ModeSentinel:
		cl := redis.NewFailoverClient(uo.Failover())
		cl.AddHook(sm)
		g := nodes.guard(sentinelNodeName(cfg.MasterName))
		if g.n == sm.role {
			// The guard charges each command to the master's current
			// address. The long client's guard (admission.go) has
			// breakers of its own, turned off, and keeps its one node.
			g.follow = sm
		}
		cl.AddHook(g)
		return cl
	case ModeCluster:
		co := uo.Cluster()
		if long {
			// go-redis reads a Cluster batch with the cluster's ReadTimeout,
			// whatever its blocking commands wait for. The long client's
			// batches are all blocking ones, read under the deadline
			// admission sets (readDeadline); its node clients, which
			// answer everything else, keep ReadTimeout.
			co.ReadTimeout = noReadTimeout
		}
		co.NewClient = func(opt *redis.Options) *redis.Client {
			opt.ReadTimeout = cfg.ReadTimeout
			cl := redis.NewClient(opt)
			cl.AddHook(nodes.guard(opt.Addr))
			return cl
		}
		return redis.NewClusterClient(co)
	default:
		opt := uo.Simple()
		cl := redis.NewClient(opt)
		cl.AddHook(nodes.guard(opt.Addr))
		return cl
	}
}

// longClient builds the long client (admission.go) and says which guard a
// dedicated connection to an address gets. Its pools never bind: a node
// needs at most MaxLongConnections pooled connections for Cluster batches
// and redirects, as many for the CLIENT UNBLOCKs of calls cancelled at once,
// and one more; the permits are the budget.
func (c *Client) longClient() (redis.UniversalClient, func(addr string) nodeGuard) {
	size := 2*c.cfg.MaxLongConnections + 1
	if c.cfg.Mode == ModeCluster {
		// Node clients carry the shared breakers; attaching the client makes
		// its CLUSTER SLOTS go through the shared single-flight cache.
		cc := newGoRedis(c.core, c.nodes, nil, size, true).(*redis.ClusterClient)
		c.topo.attach(cc)
		// Redirects on the long client are followed by go-redis's loop
		// (process, batch); a cycle ends typed there too, not as the raw
		// MOVED the loop gives up with.
		cc.AddHook(divergenceHook{c.div})
		return cc, c.nodes.guard
	}
	// In Standalone and Sentinel mode the ordinary client's guard, outside
	// facadeHook, already admits and scores every long call. The guards of
	// the long client and of its dedicated connections get breakers of
	// their own, turned off: a second guard on the shared breaker would count
	// each call twice. They still mark failed connection set-ups (setup.go)
	// for the outer guard.
	cfg := c.cfg
	cfg.NodeFailureThreshold = -1
	k := newCore(cfg, c.clock)
	k.log = c.log
	nodes := newNodeSet(k, nil, nodeProbe(c.probeOpt, nil))
	return newGoRedis(k, nodes, c.sentinel, size, true), nodes.guard
}

// options is the one UniversalOptions every client is built from, converted
// by go-redis itself for each mode, so that the option structs of the
// ordinary, long and probe clients cannot disagree about a field.
func (c *core) options(poolSize int) *redis.UniversalOptions {
	cfg := c.cfg
	return &redis.UniversalOptions{
		Addrs:            cfg.Addrs,
		MasterName:       cfg.MasterName,
		Username:         cfg.Username,
		Password:         cfg.Password,
		SentinelUsername: cfg.SentinelUsername,
		SentinelPassword: cfg.SentinelPassword,
		DB:               cfg.DB,
		ClientName:       cfg.ClientName,
		TLSConfig:        cfg.TLSConfig,
		DialTimeout:      cfg.DialTimeout,
		DialerRetries:    dialAttempts,
		ReadTimeout:      cfg.ReadTimeout,
		WriteTimeout:     cfg.WriteTimeout,
		PoolSize:         poolSize,
		PoolTimeout:      cfg.PoolTimeout,
		MaxRedirects:     cfg.MaxRedirects,
		// No go-redis retries: it would retry read and pool timeouts too.
		// nodeGuard retries a reset connection once instead (Standalone and
		// Sentinel); the cluster client's loop retries a node once by itself.
		MaxRetries:               -1,
		ContextTimeoutEnabled:    true,
		PipelinePoolSize:         noPipelinePool,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// sentinelOptions is the handshake with the sentinels themselves.
func (c *core) sentinelOptions() *redis.Options {
	return &redis.Options{
		Username:    c.cfg.SentinelUsername,
		Password:    c.cfg.SentinelPassword,
		ClientName:  c.cfg.ClientName,
		TLSConfig:   c.cfg.TLSConfig,
		DialTimeout: c.cfg.DialTimeout,
	}
}

// dialAttempts makes each dial a single attempt. go-redis v9.23 otherwise
// tries five times, 100ms apart, each with the full DialTimeout: a host that
// drops SYNs would hold a caller for five dial timeouts before its breaker
// even hears of one failure. Transient faults are covered by the one command
// retry; persistent ones are the breaker's job.
const dialAttempts = 1

// noReadTimeout is go-redis's "no read timeout of its own": reads then end
// at the context's deadline, if it has one.
const noReadTimeout = -1

// noPipelinePool opts out of go-redis's dedicated pipeline pool, so that
// pipelines share the node's ordinary pool and MaxConnections is the whole
// per-node budget rather than MaxConnections plus a hidden ten.
const noPipelinePool = -1
