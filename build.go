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
	// clientReplica serves the reads a Sentinel-managed master's replica
	// takes (replica_sentinel.go): a node client of its own.
	clientReplica
	// clientSubscriptions runs the subscriptions of Subscribe and
	// PSubscribe (subscription_client.go), built on the first.
	clientSubscriptions
	// clientWatch runs the Watch transactions of a Standalone or Sentinel
	// Client (watch.go): built with the ordinary client, a go-redis clone of
	// it that shares its pools (watchClient).
	clientWatch
)

var kindNames = [...]string{
	clientOrdinary: "ordinary", clientLong: "long", clientDedicated: "dedicated", clientProbe: "probe",
	clientSentinelQuestion: "sentinel question", clientSharded: "sharded", clientReplica: "replica",
	clientSubscriptions: "subscriptions", clientWatch: "watch",
}

func (k clientKind) String() string { return kindNames[k] }

// clientSpec says which go-redis client newGoRedis builds and what that
// kind of client needs; fields another kind does not use stay zero.
type clientSpec struct {
	kind clientKind

	// Ordinary and long clients.
	k        *core        // dedicated clients too
	nodes    *nodeSet     // whose guards the client, or each node client, carries
	poolSize int          // connections per node
	hooks    *clientHooks // the Client's own hooks; dedicated clients too
	// The ordinary client's own hooks, and where newGoRedis stores the
	// client Watch runs on in Standalone and Sentinel mode (watchClient).
	front frontHooks
	watch **redis.Client
	// The subscription clients' budget: where their dials go.
	budget subscriptionBudget

	// Dedicated, probe, sentinel-question and replica clients.
	base *redis.Options // the handshake to copy: credentials, TLS, database, name
	addr string         // probe, sentinel question, replica: where to connect
	wait time.Duration  // probe, sentinel question: the bound on each step

	// Dedicated clients.
	guard  nodeGuard  // the node's guard
	socket socketHook // hands the dialled socket to the dedicated connection
}

// clientHooks are the hooks a Client installs around the node guards of
// every client it runs.
type clientHooks struct {
	user     *userHooks      // Client.AddHook's hooks: outermost on every client
	ext      *extensions     // Client.Instrument's functions: long and dedicated clients get them when built
	div      divergenceHook  // Cluster mode
	topo     *topology       // Cluster mode: the single-flight slot-map cache
	sentinel *sentinelMaster // Sentinel mode
	pending  *pendingMode    // Standalone, when ModeAuto waits for the server's answer
	// moving are told the MOVING announcements of the node at key
	// (admission's key: "" outside Cluster mode), each with the go-redis
	// connection it came on (moving.go); the components that follow one
	// register while they are built (whenMoving), before any client runs.
	moving []func(key string, conn any, m movingNotice)
}

// whenMoving has fn told each MOVING a node announces.
func (h *clientHooks) whenMoving(fn func(key string, conn any, m movingNotice)) {
	h.moving = append(h.moving, fn)
}

// movedAt tells h.moving of the MOVING announcements of the node at key;
// nil when none listens.
func (h *clientHooks) movedAt(key string) func(conn any, m movingNotice) {
	if len(h.moving) == 0 {
		return nil
	}
	return func(conn any, m movingNotice) {
		for _, fn := range h.moving {
			fn(key, conn, m)
		}
	}
}

// frontHooks are the hooks of the ordinary client alone, where every command
// of the caller's enters.
type frontHooks struct {
	facade   *facade   // the client-level step (facade.go)
	replicas *replicas // with Config.ReadFrom: replica reads; nil otherwise
}

// hookable is what every go-redis client newGoRedis builds can do; the
// caller knows the concrete type its kind builds.
type hookable interface {
	hooked
	Close() error
}

// hooked is what a chain is installed on: a client, or a Watch's Tx.
type hooked interface{ AddHook(redis.Hook) }

// newGoRedis builds the go-redis client s describes and installs its hooks:
// every go-redis client a Client runs comes from here, so the option
// derivation of each kind has one home, and each client's hooks come from
// the one table of them (hookOrder).
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
//   - subscriptions and sharded: as long, for subscriptions alone; their
//     pools are never used (subscriptionBudget).
//   - watch: built with the ordinary client in Standalone and Sentinel
//     mode, a clone of it that shares its pools (watchClient).
//
// Each client's hooks are its chain in hookOrder (hookorder.go), which
// testdata/hook-order.txt prints.
func newGoRedis(s clientSpec) hookable {
	switch s.kind {
	case clientOrdinary, clientLong, clientSharded, clientSubscriptions:
		return newNodeClient(s)
	case clientDedicated:
		opt := *s.base
		opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 0, 0
		withoutCache(&opt) // blocking calls are no cacheable reads; OnConnect does run
		opt.PipelinePoolSize = noPipelinePool
		opt.MaxRetries = -1             // base was resolved once already: 0 would now mean three
		opt.ReadTimeout = noReadTimeout // the socket caps every read instead
		// go-redis stores each client's push processor in its options: a
		// node's would hand this client's notifications to the node's.
		opt.PushNotificationProcessor = s.k.cfg.PushNotificationProcessor
		if opt.PushNotificationProcessor == nil {
			// Notifications as the Config asks the node's for: a server
			// sends MOVING only on connections that asked for
			// notifications, and a blocking call must hear it
			// (dedicated_moving.go). From the Config, not from the node's
			// options, which go-redis changes under its own lock (a
			// handshake refused in ModeAuto turns them off).
			opt.MaintNotificationsConfig = nil
			if m := s.k.cfg.MaintNotificationsConfig; m != nil {
				m := *m
				opt.MaintNotificationsConfig = &m
			}
		} else {
			// The caller's processor has the node clients' manager already;
			// a second one cannot register.
			opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		}
		cl := redis.NewClient(&opt)
		chainOf(s.kind, ModeAuto, levelClient, false).install(cl, chainHooks{
			user: s.hooks.user, guard: s.guard, socket: s.socket, ext: s.hooks.ext, role: RoleDedicated})
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
		chainOf(s.kind, ModeAuto, levelClient, false).install(cl, chainHooks{quiet: newQuietDial(cl.Options())})
		return cl
	case clientReplica:
		opt := *s.base
		opt.Addr, opt.PoolSize = s.addr, s.poolSize
		// go-redis's failover client, whose replica reads this one
		// takes over, runs without maintenance notifications.
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		cl := redis.NewClient(&opt)
		s.guard.ordinary(cl)
		chainOf(s.kind, ModeSentinel, levelClient, false).install(cl, chainHooks{
			user: s.hooks.user, guard: s.guard, ext: s.hooks.ext, role: RoleReplica})
		return cl
	default: // clientSentinelQuestion
		opt := *s.base
		opt.Addr = s.addr
		opt.PoolSize, opt.MaxRetries, opt.DialerRetries = 2, -1, dialAttempts // two: as a probe
		opt.DialTimeout = min(opt.DialTimeout, s.wait)
		opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = s.wait, s.wait, s.wait
		cl := redis.NewSentinelClient(&opt)
		// opt as go-redis completed it
		chainOf(s.kind, ModeAuto, levelClient, false).install(cl, chainHooks{quiet: newQuietDial(&opt)})
		return cl
	}
}

// newNodeClient builds an ordinary or long client: the client k's Config
// describes, with the node guards of s.nodes on the single server in
// Standalone, on the failover client in Sentinel, and on each node client in
// Cluster through ClusterOptions.NewClient, go-redis's per-node constructor.
func newNodeClient(s clientSpec) redis.UniversalClient {
	cfg, h, f := s.k.cfg, s.hooks, s.front
	ordinary := s.kind == clientOrdinary
	uo := s.k.options(s.poolSize)
	if !ordinary {
		longOnly(uo)
	}
	parts := chainHooks{user: h.user, pending: h.pending, sentinel: h.sentinel, facade: f.facade, replicas: f.replicas,
		budget: s.budget, div: h.div, ext: h.ext, role: RoleOrdinary}
	switch s.kind {
	case clientLong:
		parts.role = RoleLong
	case clientSharded:
		parts.role = RoleSharded
	case clientSubscriptions:
		parts.role = RoleSubscriptions
	}
	switch cfg.Mode {
	case ModeSentinel:
		cl := redis.NewFailoverClient(uo.Failover())
		g := s.nodes.masterGuard(h.sentinel) // the long client's too
		g.long = s.kind == clientLong
		parts.guard = g
		if ordinary {
			g.ordinary(cl)
			s.watchClient(cl, parts, false)
		}
		chainOf(s.kind, ModeSentinel, levelClient, false).install(cl, parts)
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
		rr := f.replicas
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
			// Every cluster client's map comes through the one cache.
			co.ClusterSlots = h.topo.clusterSlots(cfg.ClusterSlots)
		}
		co.NewClient = func(opt *redis.Options) *redis.Client {
			opt.ReadTimeout = cfg.ReadTimeout
			if rr != nil && !co.ReadOnly {
				opt.OnConnect = duringSetUp(rr.withReadOnly(opt.Addr, opt.OnConnect))
			}
			cl := redis.NewClient(opt)
			g := s.nodes.guard(opt.Addr)
			g.long = s.kind == clientLong
			if ordinary {
				g.ordinary(cl)
			}
			// go-redis dials on the node clients alone, subscriptions too.
			node := parts
			node.guard, node.replicas, node.addr = g, rr, opt.Addr
			chainOf(s.kind, ModeCluster, levelNode, false).install(cl, node)
			watchMaintenance(cl, g.n, s.k.clock, h.movedAt(opt.Addr))
			reloadOnMigrated(cl, h.topo)
			return cl
		}
		cc := redis.NewClusterClient(co)
		// go-redis sets its own answer to SMIGRATED on each new node
		// client, after NewClient; this one, registered later, runs last.
		cc.OnNewNode(func(cl *redis.Client) { reloadOnMigrated(cl, h.topo) })
		// The divergence hook, inside the facade, sees go-redis's final
		// error; on the long client it ends a redirect cycle of go-redis's
		// own loop typed too.
		chainOf(s.kind, ModeCluster, levelClient, false).install(cc, parts)
		// Its CLUSTER SLOTS go through the shared single-flight cache.
		h.topo.attach(cc, s.kind)
		return cc
	default:
		cl := redis.NewClient(uo.Simple())
		g := s.nodes.guard(cl.Options().Addr)
		g.long = s.kind == clientLong
		parts.guard = g
		// While ModeAuto waits, the hand-over to the Cluster-mode Client
		// sits between the user's hooks and the guard.
		pending := ordinary && h.pending != nil
		if ordinary {
			g.ordinary(cl)
			s.watchClient(cl, parts, pending)
		}
		chainOf(s.kind, ModeStandalone, levelClient, pending).install(cl, parts)
		watchMaintenance(cl, g.n, s.k.clock, h.movedAt(""))
		return cl
	}
}

// watchClient builds the client the Watch transactions of cl, a Standalone
// or Sentinel ordinary client without hooks yet, run on, and stores it in
// s.watch. It is go-redis's clone of cl (WithTimeout, with cl's timeouts),
// which shares cl's pools: a Tx takes its connection from cl's pool, as it
// would from cl, and every dial is cl's. Its hooks are its own chain
// (clientWatch), whose guard knows it is a Tx's: every chain built on the
// clone is one (go-redis's newTx clones the client's hooks), so every
// command the guard's facade step sees there is sent on a Tx. The clone is
// never closed: closing cl closes the pools they share, and the clone owns
// nothing else.
func (s clientSpec) watchClient(cl *redis.Client, parts chainHooks, pending bool) {
	opt := cl.Options()
	w := cl.WithTimeout(opt.ReadTimeout)
	w.Options().WriteTimeout = opt.WriteTimeout // WithTimeout set both; w is not in use yet
	parts.role = RoleWatch
	chainOf(clientWatch, s.k.cfg.Mode, levelClient, pending).install(w, parts)
	*s.watch = w
}

// txHooks installs the hooks of a Cluster Watch's Tx, which go-redis
// builds from the node client the transaction runs on.
func txHooks(tx *redis.Tx) {
	chainOf(clientWatch, ModeCluster, levelTx, false).install(tx, chainHooks{})
}

// longClient returns what builds the long client (admission.go) and says
// which guard a dedicated connection to an address gets. Its pools never
// bind: a node needs at most MaxLongConnections pooled connections for
// Cluster batches and redirects, as many for the CLIENT UNBLOCKs of calls
// cancelled at once, and one more; the permits are the budget.
//
// In every mode the facade hands a long call to the long budget before any
// guard admits it, so the guards of the long client and of its dedicated
// connections are the ones that admit and score it: guards of the one node
// set, marked long. In Sentinel mode a dedicated connection dials the
// master through the sentinels, and its guard follows the master's
// address, as the long client's does.
func longClient(k *core, nodes *nodeSet, hooks *clientHooks) func() (redis.UniversalClient, func(addr string) nodeGuard) {
	return func() (redis.UniversalClient, func(addr string) nodeGuard) {
		spec := clientSpec{kind: clientLong, k: k, nodes: nodes, poolSize: 2*k.cfg.MaxLongConnections + 1, hooks: hooks}
		guard := func(addr string) nodeGuard {
			var g nodeGuard
			if hooks.sentinel != nil {
				g = nodes.masterGuard(hooks.sentinel) // addr is go-redis's name for the failover client
			} else {
				g = nodes.guard(addr)
			}
			g.long = true
			return g
		}
		return newGoRedis(spec).(redis.UniversalClient), guard
	}
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
