package redisguard

import (
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// clientKind names the go-redis clients a Client runs.
type clientKind uint8

const (
	// clientOrdinary is the embedded client: every command a user sends
	// enters here.
	clientOrdinary clientKind = iota
	// clientLong runs blocking calls and the batches holding one (admission.go),
	// built on the first such call.
	clientLong
	// clientDedicated is one long connection to one node (dedicated.go).
	clientDedicated
	// clientProbe sends one command on a fresh connection to one address:
	// recovery probes, ROLE checks, the first contact of ModeAuto.
	clientProbe
	// clientSentinelQuestion asks one sentinel where the master is, or
	// which replicas it has.
	clientSentinelQuestion
	// clientSharded runs the sharded subscriptions of a Cluster-mode Client
	// (subscription_sharded.go), built on the first SSubscribe.
	clientSharded
	// clientSubscriptions runs the subscriptions of Subscribe and
	// PSubscribe (subscription_client.go), built on the first.
	clientSubscriptions
	// clientReplica serves the reads a Sentinel-managed master's replica
	// takes (replica_sentinel.go): a node client of its own.
	clientReplica
)

// clientSpec says which go-redis client newGoRedis builds and what that
// kind of client needs; fields another kind does not use stay zero.
type clientSpec struct {
	kind clientKind

	// Ordinary and long clients.
	k        *core
	nodes    *nodeSet     // whose guards the client, or each node client, carries
	poolSize int          // connections per node
	hooks    *clientHooks // the Client's own hooks; dedicated clients too
	// scoring, set on the long client in Standalone and Sentinel mode, is
	// the ordinary client's node set, whose guards score the long calls:
	// its nodes hear the long connections' maintenance notifications.
	scoring *nodeSet

	// Dedicated, probe, sentinel-question and replica clients.
	base *redis.Options // the handshake to copy: credentials, TLS, database, name
	addr string         // probe, sentinel question, replica: where to connect
	wait time.Duration  // probe, sentinel question: the bound on each step

	// watch, for the ordinary client in Standalone and Sentinel mode, is
	// where newGoRedis stores the client Watch runs on (watchClient).
	watch **redis.Client

	// Dedicated clients.
	guard  nodeGuard  // the node's guard
	socket socketHook // hands the dialled socket to the dedicated connection
}

// clientHooks are the hooks a Client installs around the node guards of its
// ordinary and long clients.
type clientHooks struct {
	user     *userHooks         // Client.AddHook's hooks: outermost on every client
	ext      *extensions        // Client.Instrument's functions: long and dedicated clients get them when built
	facade   facadeHook         // ordinary client
	budget   subscriptionBudget // subscriptions client (its node clients in Cluster mode)
	div      divergenceHook     // Cluster mode
	topo     *topology          // Cluster mode: the single-flight slot-map cache
	sentinel *sentinelMaster    // Sentinel mode
	replicas *replicas          // ordinary client, with Config.ReadFrom: replica reads
	pending  *pendingMode       // Standalone, when ModeAuto waits for the server's answer
}

// hookable is what every go-redis client newGoRedis builds can do; the
// caller knows the concrete type its kind builds.
type hookable interface {
	AddHook(redis.Hook)
	Close() error
}

// newGoRedis builds the go-redis client s describes and installs its hooks:
// every go-redis client a Client runs comes from here, so the option
// derivation of each kind and the hook order below have one home.
//
//   - ordinary: the client k's Config describes, poolSize connections per node.
//   - long: the same with its own pool size, without what only ordinary
//     traffic wants (longOnly); in Cluster mode its batches are read without
//     the cluster's ReadTimeout (admission sets their deadline).
//   - dedicated: base with a pool of one, no client-side cache and no read
//     timeout of its own (the socket caps every read, see socketHook).
//   - probe and sentinel question: base, or the sentinels' handshake, at
//     addr, each step bounded by wait, never retried, closed after use; a
//     probe runs no OnConnect and no client-side cache. Their dials fail
//     without a go-redis log line (quietDial).
//   - replica: base at addr with poolSize connections, the node client of a
//     Sentinel-managed replica that serves reads (Config.ReadFrom).
//   - watch: built with the ordinary client in Standalone and Sentinel mode,
//     a clone of it that shares its pools, for Watch (watchClient).
//
// The hooks of each client, outermost first. [sentinelMaster] is there in
// Sentinel mode only; "dials" marks a userLayer that runs the user's dial
// hooks alone; "no breakers" a guard whose breakers are turned off (see
// longClient); extensions are the hooks Instrument's functions add, which
// go-redis appends innermost (on node clients, for a cluster client).
//
//	Standalone, Sentinel
//	  ordinary    userLayer, [sentinelMaster], nodeGuard+facadeHook, extensions
//	              (Standalone: userLayer dials, user hooks+nodeGuard+facadeHook, ...)
//	  long        userLayer dials, [sentinelMaster], nodeGuard no breakers, extensions
//	  dedicated   userLayer dials, nodeGuard no breakers, socketHook, extensions
//	  replica     userLayer dials, nodeGuard, extensions (Sentinel)
//	  watch       as ordinary; its nodeGuard+facadeHook marked tx
//	  subscriptions  userLayer (no set-up marks), [sentinelMaster], nodeGuard subscriptions, subscriptionBudget, extensions
//	Cluster
//	  ordinary    cluster client: userLayer, stepCountHook, facadeHook, divergenceHook
//	              node clients:   userLayer dials, [replicaHook], nodeGuard, extensions
//	  long        cluster client: stepCountHook, divergenceHook
//	              node clients:   userLayer dials, nodeGuard, extensions
//	  sharded     cluster client: stepCountHook, divergenceHook
//	              node clients:   userLayer dials, nodeGuard subscriptions, subscriptionBudget (slot owner), extensions
//	  subscriptions  as sharded, subscriptionBudget (any node)
//	  dedicated   userLayer dials, nodeGuard, socketHook, extensions
//	probe, sentinel question: quietDial
//
// With Config.ReadFrom the ordinary client routes reads to replicas
// (replica.go): sentinelReadHook sits between sentinelMaster and nodeGuard
// on the Sentinel client, replicaHook outside nodeGuard on each node client
// of the cluster client.
//
// The user's hooks (Client.AddHook) are outermost, so they see each command
// once, with the error the caller gets; their process and pipeline hooks run
// on the ordinary client alone, where every command enters, so a blocking
// command that facadeHook hands to the long client is not seen again there.
// Extensions sit innermost and see what go-redis sends and returns: a
// blocking command once, on its dedicated connection.
//
// In Standalone and Sentinel mode nodeGuard is outside facadeHook: it
// already admits and scores the long calls facadeHook hands to the long
// client, whose guards therefore have no breakers. The two are one hook
// there (nodeGuard.facade), which runs facadeHook's step right after its
// own, so that a command passes one frame for both. In Standalone mode,
// where nothing sits between the userLayer and the guard, the guard runs
// the user's process and pipeline hooks too, outside itself and only while
// there are any (nodeGuard.user). In Cluster mode the node
// is only known on the node clients, so nodeGuard sits there, inside every
// cluster-level hook. One order for every mode would move the scoring of
// Standalone blocking calls from the ordinary client's guard to the long
// client's: a change of behaviour (isExhaustion, the reset retry and the
// dedicated set-up marks rely on it), not of shape.
func newGoRedis(s clientSpec) hookable {
	switch s.kind {
	case clientOrdinary, clientLong, clientSharded, clientSubscriptions:
		cl := newNodeClient(s)
		switch s.kind {
		case clientLong:
			s.hooks.ext.apply(cl, RoleLong)
		case clientSharded:
			s.hooks.ext.apply(cl, RoleSharded)
		case clientSubscriptions:
			s.hooks.ext.apply(cl, RoleSubscriptions)
		}
		return cl
	case clientDedicated:
		opt := *s.base
		opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 0, 0
		withoutCache(&opt) // blocking calls are no cacheable reads; OnConnect does run
		opt.PipelinePoolSize = noPipelinePool
		opt.MaxRetries = -1             // base was resolved once already: 0 would now mean three
		opt.ReadTimeout = noReadTimeout // the socket caps every read instead
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		cl := redis.NewClient(&opt)
		cl.AddHook(s.hooks.user.layer(false))
		cl.AddHook(s.guard)
		cl.AddHook(s.socket)
		s.hooks.ext.apply(cl, RoleDedicated)
		return cl
	case clientProbe:
		opt := *s.base
		opt.Addr = s.addr
		// Two, though one connection is used: go-redis starts a background
		// redial loop once a pool's failed dials reach its size, and a
		// probe's single failed dial must not.
		opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 2, 0, 0, 0
		// It authenticates as a node client does (credentials and their
		// providers, TLS, dialer, protocol), but carries no command of the
		// caller's: no OnConnect, no client-side cache.
		opt.OnConnect = nil
		withoutCache(&opt)
		opt.MaxRetries, opt.DialerRetries = -1, dialAttempts
		opt.DialTimeout = min(opt.DialTimeout, s.wait)
		opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = s.wait, s.wait, s.wait
		opt.ContextTimeoutEnabled = true
		opt.PipelinePoolSize = noPipelinePool
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		cl := redis.NewClient(&opt)
		cl.AddHook(newQuietDial(cl.Options()))
		return cl
	case clientReplica:
		opt := *s.base
		opt.Addr, opt.PoolSize = s.addr, s.poolSize
		// go-redis's failover client, whose replica reads this one
		// takes over, runs without maintenance notifications.
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		cl := redis.NewClient(&opt)
		cl.AddHook(s.hooks.user.layer(false))
		cl.AddHook(s.guard)
		s.hooks.ext.apply(cl, RoleReplica)
		return cl
	default: // clientSentinelQuestion
		opt := *s.base
		opt.Addr = s.addr
		opt.PoolSize, opt.MaxRetries, opt.DialerRetries = 2, -1, dialAttempts // two: as a probe
		opt.DialTimeout = min(opt.DialTimeout, s.wait)
		opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = s.wait, s.wait, s.wait
		cl := redis.NewSentinelClient(&opt)
		cl.AddHook(newQuietDial(&opt)) // opt as go-redis completed it
		return cl
	}
}

// newNodeClient builds an ordinary or long client: the client k's Config
// describes, with the node guards of s.nodes on the single server in
// Standalone, on the failover client in Sentinel, and on each node client in
// Cluster through ClusterOptions.NewClient, go-redis's per-node constructor.
func newNodeClient(s clientSpec) redis.UniversalClient {
	cfg, h := s.k.cfg, s.hooks
	ordinary := s.kind == clientOrdinary
	// A subscription client dials for its subscriptions alone: its pools,
	// with no idle connections to keep (longOnly), are never used, and in
	// Cluster mode its node clients' guards answer CLUSTER SLOTS from the
	// topology cache.
	subs := s.kind == clientSharded || s.kind == clientSubscriptions
	uo := s.k.options(s.poolSize)
	if !ordinary {
		longOnly(uo)
	}
	switch cfg.Mode {
	case ModeSentinel:
		cl := redis.NewFailoverClient(uo.Failover())
		g := s.nodes.guard(sentinelNodeName(cfg.MasterName))
		g.long = s.kind == clientLong
		if g.n == h.sentinel.role {
			// The guard charges each command to the master's current
			// address. The long client's guard has breakers of its own,
			// turned off, and keeps its one node.
			g.follow = h.sentinel
		}
		if ordinary {
			g.facade = h.facade.c
		}
		g.subscriptions = subs
		install := func(cl *redis.Client, g nodeGuard) {
			if subs {
				cl.AddHook(h.user.subscriptionLayer())
			} else {
				cl.AddHook(h.user.layer(ordinary))
			}
			cl.AddHook(h.sentinel)
			if ordinary && h.replicas != nil {
				cl.AddHook(sentinelReadHook{r: h.replicas, sm: h.sentinel})
			}
			cl.AddHook(g)
		}
		if ordinary {
			s.watchClient(cl, g, install)
		}
		install(cl, g)
		if subs {
			cl.AddHook(h.budget)
		}
		return cl
	case ModeCluster:
		co := uo.Cluster()
		if !ordinary {
			// go-redis reads a Cluster batch with the cluster's ReadTimeout,
			// whatever its blocking commands wait for. The long client's
			// batches are all blocking ones, read under the deadline
			// admission sets (readDeadline); its node clients, which
			// answer everything else, keep ReadTimeout.
			co.ReadTimeout = noReadTimeout
		}
		rr := h.replicas
		if !ordinary {
			rr = nil // blocking reads stay on the masters
		}
		if rr != nil && cfg.ReadFrom != ReadFromMasterPreferred {
			// go-redis then sends READONLY on every node connection and
			// reads to a node of the slot's shard; replicaHook decides.
			co.ReadOnly = true
			co.RouteByLatency = cfg.ReadFrom == ReadFromNearest
			co.RouteRandomly = cfg.ReadFrom == ReadFromAny
			if cfg.FailingTimeoutSeconds == 0 {
				// go-redis steers reads away from a node it marked
				// failing (after a timeout, LOADING) for this long, 15s
				// by default, however soon the node answers again; the
				// breakers steer them from then on.
				co.FailingTimeoutSeconds = 1
			}
		}
		co.ClusterStateReloadInterval = cfg.ClusterStateReloadInterval
		co.DisableRoutingPolicies = cfg.DisableRoutingPolicies
		if cfg.ShardPicker != nil {
			co.ShardPicker = cfg.ShardPicker
		}
		if cfg.ClusterSlots != nil {
			// Every cluster client's map comes through the one cache. A
			// subscription client's CLUSTER SLOTS never leaves its node
			// clients' guards (topology.answer).
			co.ClusterSlots = h.topo.clusterSlots(cfg.ClusterSlots)
		}
		co.NewClient = func(opt *redis.Options) *redis.Client {
			opt.ReadTimeout = cfg.ReadTimeout
			if rr != nil && !co.ReadOnly {
				opt.OnConnect = duringSetUp(rr.withReadOnly(opt.Addr, opt.OnConnect))
			}
			cl := redis.NewClient(opt)
			cl.AddHook(h.user.layer(false)) // dials: go-redis never dials on the cluster client itself
			if rr != nil {
				cl.AddHook(rr.register(opt.Addr, cl))
			}
			g := s.nodes.guard(opt.Addr)
			g.long = s.kind == clientLong
			g.subscriptions = subs
			cl.AddHook(g)
			watchMaintenance(cl, g.n, s.k.clock)
			reloadOnMigrated(cl, h.topo)
			// Subscriptions dial through the node clients.
			switch s.kind {
			case clientSubscriptions:
				cl.AddHook(h.budget)
			case clientSharded:
				cl.AddHook(subscriptionBudget{h.budget.subs, routeSlotOwner})
			}
			return cl
		}
		cc := redis.NewClusterClient(co)
		// go-redis sets its own answer to SMIGRATED on each new node
		// client, after NewClient; this one, registered later, runs last.
		cc.OnNewNode(func(cl *redis.Client) { reloadOnMigrated(cl, h.topo) })
		if ordinary {
			cc.AddHook(h.user.layer(true))
		}
		cc.AddHook(stepCountHook{cc})
		if ordinary {
			cc.AddHook(h.facade)
		}
		// Inside the facade it sees go-redis's final error; on the long
		// client it ends a redirect cycle of go-redis's own loop typed too.
		cc.AddHook(h.div)
		// Its CLUSTER SLOTS go through the shared single-flight cache.
		h.topo.attach(cc, ordinary)
		return cc
	default:
		cl := redis.NewClient(uo.Simple())
		g := s.nodes.guard(cl.Options().Addr)
		g.long = s.kind == clientLong
		g.subscriptions = subs
		install := func(cl *redis.Client, g nodeGuard) {
			switch {
			case subs:
				cl.AddHook(h.user.subscriptionLayer())
			case ordinary && h.pending != nil:
				// Outermost the user's hooks, then the hand-over to the
				// Cluster-mode Client the server's first answer may call for.
				cl.AddHook(h.user.layer(true))
				cl.AddHook(h.pending)
			default:
				cl.AddHook(h.user.layer(false)) // dials; on the ordinary client the guard runs the rest
			}
			cl.AddHook(g)
		}
		switch {
		case ordinary && h.pending != nil:
			g.facade = h.facade.c
		case ordinary:
			g.facade, g.user = h.facade.c, h.user
		}
		if ordinary {
			s.watchClient(cl, g, install)
		}
		install(cl, g)
		if subs {
			cl.AddHook(h.budget)
		}
		mn := g.n
		if s.scoring != nil {
			mn = s.scoring.get(mn.addr)
		}
		watchMaintenance(cl, mn, s.k.clock)
		return cl
	}
}

// watchClient builds the client the Watch transactions of cl, a Standalone
// or Sentinel ordinary client without hooks yet, run on, and stores it in
// s.watch. It is go-redis's clone of cl (WithTimeout, with cl's timeouts),
// which shares cl's pools: a Tx takes its connection from cl's pool, as it
// would from cl, and every dial is cl's. Its hooks are its own, and
// install puts on it what it puts on cl, but for the guard, which is g
// marked tx: every chain built on the clone is a Tx's (go-redis's newTx
// clones the client's hooks), and so every command the guard's facade
// step sees there is sent on a Tx. The clone is never closed: closing cl
// closes the pools they share, and the clone owns nothing else.
func (s clientSpec) watchClient(cl *redis.Client, g nodeGuard, install func(*redis.Client, nodeGuard)) {
	opt := cl.Options()
	w := cl.WithTimeout(opt.ReadTimeout)
	w.Options().WriteTimeout = opt.WriteTimeout // WithTimeout set both; w is not in use yet
	g.tx = true
	install(w, g)
	s.hooks.ext.apply(w, RoleWatch)
	*s.watch = w
}

// longClient builds the long client (admission.go) and says which guard a
// dedicated connection to an address gets. Its pools never bind: a node
// needs at most MaxLongConnections pooled connections for Cluster batches
// and redirects, as many for the CLIENT UNBLOCKs of calls cancelled at once,
// and one more; the permits are the budget.
func (c *Client) longClient() (redis.UniversalClient, func(addr string) nodeGuard) {
	spec := clientSpec{kind: clientLong, k: c.core, nodes: c.nodes, poolSize: 2*c.cfg.MaxLongConnections + 1, hooks: c.hooks}
	if c.cfg.Mode != ModeCluster {
		// In Standalone and Sentinel mode the ordinary client's guard,
		// outside facadeHook, already admits and scores every long call.
		// The guards of the long client and of its dedicated connections
		// get breakers of their own, turned off: a second guard on the
		// shared breaker would count each call twice. They still mark
		// failed connection set-ups (setup.go) for the outer guard.
		cfg := c.cfg
		cfg.NodeFailureThreshold = -1
		cfg.SlowNodeFactor = -1 // and so does its slow-node marking
		spec.k = newCore(cfg, c.clock)
		spec.k.log = c.log
		spec.nodes = newNodeSet(spec.k, nil, nodeProbe(c.probeOpt, nil))
		spec.nodes.nested = true
		spec.scoring = c.nodes
	}
	guard := func(addr string) nodeGuard {
		g := spec.nodes.guard(addr)
		g.long = true
		return g
	}
	return newGoRedis(spec).(redis.UniversalClient), guard
}

// options is the one UniversalOptions every client is built from, converted
// by go-redis itself for each mode, so that the option structs of the
// ordinary, long and probe clients cannot disagree about a field.
//
// The go-redis fields of Config pass through unchanged; docs/options.md
// lists them and the ones set here that Config cannot change.
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

		Protocol:                     cfg.Protocol,
		MaintNotificationsConfig:     cfg.MaintNotificationsConfig,
		Dialer:                       cfg.Dialer,
		OnConnect:                    duringSetUp(cfg.OnConnect),
		CredentialsProvider:          cfg.CredentialsProvider,
		CredentialsProviderContext:   cfg.CredentialsProviderContext,
		StreamingCredentialsProvider: cfg.StreamingCredentialsProvider,
		PoolFIFO:                     cfg.PoolFIFO,
		MinIdleConns:                 cfg.MinIdleConns,
		MaxIdleConns:                 cfg.MaxIdleConns,
		MaxActiveConns:               cfg.MaxActiveConns,
		MaxConcurrentDials:           cfg.MaxConcurrentDials,
		ConnMaxIdleTime:              cfg.ConnMaxIdleTime,
		ConnMaxLifetime:              cfg.ConnMaxLifetime,
		ConnMaxLifetimeJitter:        cfg.ConnMaxLifetimeJitter,
		ReadBufferSize:               cfg.ReadBufferSize,
		WriteBufferSize:              cfg.WriteBufferSize,
		DisableIdentity:              cfg.DisableIdentity,
		DisableIndentity:             cfg.DisableIndentity,
		IdentitySuffix:               cfg.IdentitySuffix,
		UnstableResp3:                cfg.UnstableResp3,
		FailingTimeoutSeconds:        cfg.FailingTimeoutSeconds,
		PushNotificationProcessor:    cfg.PushNotificationProcessor,
		AutoPipelineOptions:          cfg.AutoPipelineOptions,
		RouteByLatencyTolerance:      cfg.RouteByLatencyTolerance,

		ClientSideCacheConfig:                  cfg.ClientSideCacheConfig,
		ClientSideCache:                        cfg.ClientSideCache,
		ClientSideCacheStrategy:                cfg.ClientSideCacheStrategy,
		ClientSideCacheRefreshOnInvalidate:     cfg.ClientSideCacheRefreshOnInvalidate,
		ClientSideCacheCoalesceMisses:          cfg.ClientSideCacheCoalesceMisses,
		ClientSideCacheInvalidationBatchWindow: cfg.ClientSideCacheInvalidationBatchWindow,

		// No go-redis retries: it would retry read and pool timeouts too.
		// nodeGuard retries a reset connection once instead (Standalone and
		// Sentinel); the cluster client's loop retries a node once by itself.
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		PipelinePoolSize:      noPipelinePool,
	}
}

// longOnly drops from the long client's options what only ordinary traffic
// wants: idle connections kept warm (the long client answers rare calls), a
// connection cap below its pool size (its permits are its budget), and the
// client-side cache (long operations are no cacheable reads).
func longOnly(uo *redis.UniversalOptions) {
	uo.MinIdleConns, uo.MaxActiveConns = 0, 0
	uo.ClientSideCacheConfig, uo.ClientSideCache = nil, nil
	uo.ClientSideCacheRefreshOnInvalidate, uo.ClientSideCacheCoalesceMisses = false, false
	uo.ClientSideCacheInvalidationBatchWindow = 0
}

// withoutCache turns the client-side cache off in opt, for a client that
// serves no cacheable reads: a cache there would only track keys for nothing.
func withoutCache(opt *redis.Options) {
	opt.ClientSideCacheConfig, opt.ClientSideCache = nil, nil
	opt.ClientSideCacheRefreshOnInvalidate, opt.ClientSideCacheCoalesceMisses = false, false
	opt.ClientSideCacheInvalidationBatchWindow = 0
}

// sentinelOptions is the handshake of the questions redisguard asks the
// sentinels itself: sentinel credentials, the same dialer, TLS and
// identity. OnConnect, written for data nodes, does not run on them.
func (c *core) sentinelOptions() *redis.Options {
	return &redis.Options{
		Username:        c.cfg.SentinelUsername,
		Password:        c.cfg.SentinelPassword,
		ClientName:      c.cfg.ClientName,
		TLSConfig:       c.cfg.TLSConfig,
		DialTimeout:     c.cfg.DialTimeout,
		Dialer:          c.cfg.Dialer,
		DisableIdentity: c.cfg.DisableIdentity || c.cfg.DisableIndentity,
		IdentitySuffix:  c.cfg.IdentitySuffix,
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
