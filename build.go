package redisguard

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// build assembles the go-redis client that Config describes, with poolSize
// connections per node, and installs a nodeGuard on every node client: the
// single server in Standalone, the failover client in Sentinel, and each node
// client in Cluster through ClusterOptions.NewClient, go-redis's per-node
// constructor. The ordinary and the long clients are both built here, so the
// two cannot drift apart in anything but their pool size and, for the long
// one, the read timeout of Cluster batches.
func (c *Client) build(poolSize int, long bool) redis.UniversalClient {
	cfg := c.cfg
	uo := c.options(poolSize)
	switch cfg.Mode {
	case ModeSentinel:
		cl := redis.NewFailoverClient(uo.Failover())
		cl.AddHook(c.sentinel)
		g := c.nodes.guard(sentinelNodeName(cfg.MasterName))
		if g.n == c.sentinel.role {
			// The guard charges each command to the master's current
			// address. The long client's guard (admission.go) has
			// breakers of its own, turned off, and keeps its one node.
			g.follow = c.sentinel
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
			cl.AddHook(c.nodes.guard(opt.Addr))
			return cl
		}
		return redis.NewClusterClient(co)
	default:
		opt := uo.Simple()
		cl := redis.NewClient(opt)
		cl.AddHook(c.nodes.guard(opt.Addr))
		return cl
	}
}

// options is the one UniversalOptions every client is built from, converted
// by go-redis itself for each mode, so that the option structs of the
// ordinary, long and probe clients cannot disagree about a field.
func (c *Client) options(poolSize int) *redis.UniversalOptions {
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
func (c *Client) sentinelOptions() *redis.Options {
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
