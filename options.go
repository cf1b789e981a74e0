package redisguard

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
)

// Mode selects the go-redis client that NewClient builds.
type Mode int

const (
	// ModeAuto picks the mode from the other fields: MasterName set means
	// Sentinel, more than one address means Cluster. With one address
	// NewClient asks the server once (HELLO, bounded by DialTimeout and at
	// most a second) whether it is a cluster node, and runs as
	// Cluster or Standalone accordingly; a Kubernetes Service in front of a
	// cluster needs no other setting. If the server does not answer then,
	// the client runs Standalone until it does, and its first answer
	// decides: a cluster node's HELLO reply, or a MOVED or ASK, makes every
	// later command, pipeline and subscription Cluster-mode.
	ModeAuto Mode = iota
	// ModeStandalone talks to one server.
	ModeStandalone
	// ModeSentinel discovers the master of MasterName through the sentinels
	// in Addrs and follows failovers.
	ModeSentinel
	// ModeCluster talks to a Redis Cluster; Addrs are seed nodes, and one is
	// enough.
	ModeCluster
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeStandalone:
		return "standalone"
	case ModeSentinel:
		return "sentinel"
	case ModeCluster:
		return "cluster"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults for the Config fields left at their zero value. They follow
// go-redis where go-redis has an opinion, so that switching constructors does
// not silently change timeouts.
const (
	DefaultDialTimeout          = 5 * time.Second
	DefaultReadTimeout          = 3 * time.Second
	DefaultNodeFailureThreshold = 5
	DefaultNodeRecoveryTime     = 10 * time.Second
	DefaultHungNodeAfter        = 400 * time.Millisecond
	DefaultMaxRedirects         = 3
	DefaultClusterNodeTimeout   = 15 * time.Second
	DefaultHealthWriteTTL       = 5 * time.Second
	DefaultSlowNodeFactor       = 4.0
	DefaultSlowNodeFloor        = 5 * time.Millisecond
	DefaultSlowNodeMarkAfter    = time.Second
	DefaultSlowNodeEjection     = 5 * time.Second
)

// NoRedirects, as Config.MaxRedirects, follows no MOVED or ASK redirect:
// go-redis's -1.
const NoRedirects = -1

// maxConnections is the largest MaxConnections and MaxLongConnections
// accepted. go-redis keeps a pool's size in an int32 and panics past it, and
// it sets up each pool's bookkeeping in proportion to its size before the
// first command: 8 bytes a connection, 8 MiB at this limit and 16 GiB at
// int32's. The long client's pools hold 2n+1. No host reaches the limit:
// one source address has 65535 ports to open connections to one server.
const maxConnections = 1 << 20

// DefaultMaxConnections is the per-node ordinary connection budget when
// MaxConnections is 0: ten per available CPU, as go-redis sizes its pools.
func DefaultMaxConnections() int { return 10 * runtime.GOMAXPROCS(0) }

// Config describes a guarded client. The zero value of every field is a
// documented default, so Config{Addrs: []string{"localhost:6379"}} is a
// complete configuration. NewClient copies the Config; changing it afterwards
// has no effect.
type Config struct {
	// Mode selects standalone, Sentinel or Cluster.
	// default: ModeAuto (see ModeAuto for the rule)
	Mode Mode

	// Addrs are the server (Standalone), sentinel (Sentinel) or seed node
	// (Cluster) addresses, as host:port. Required.
	Addrs []string

	// MasterName is the Sentinel master name. Required for ModeSentinel;
	// invalid with ModeCluster.
	MasterName string

	// Username and Password authenticate to Redis (ACL or requirepass).
	// The password never appears in errors, logs, events or reports.
	// default: none
	Username, Password string

	// SentinelUsername and SentinelPassword authenticate to the sentinels.
	// default: none
	SentinelUsername, SentinelPassword string

	// DB is the database number. Must be 0 in Cluster mode.
	// default: 0
	DB int

	// ClientName is sent with CLIENT SETNAME on every connection.
	// default: none
	ClientName string

	// TLSConfig enables TLS when non-nil.
	// default: plain TCP
	TLSConfig *tls.Config

	// DialTimeout bounds establishing a connection.
	// default: DefaultDialTimeout (5s)
	DialTimeout time.Duration

	// ReadTimeout bounds waiting for a reply. Blocking commands get their own
	// timeout plus this, however they are sent (typed, Do, in a pipeline,
	// whose blocking commands' timeouts add up); a timeout of 0 waits
	// forever. A context deadline that comes sooner wins.
	// default: DefaultReadTimeout (3s)
	ReadTimeout time.Duration

	// WriteTimeout bounds writing a command.
	// default: ReadTimeout
	WriteTimeout time.Duration

	// MaxConnections is the ordinary connection budget per node, at most
	// 1<<20 (1048576).
	// default: DefaultMaxConnections() (10 per CPU)
	MaxConnections int

	// MaxLongConnections is the budget for long operations (blocking calls,
	// non-transactional batches with a blocking command, subscriptions and
	// MONITOR), shared by all nodes. Long operations run on connections of
	// their own, so they never take ordinary capacity. At most 1<<20
	// (1048576).
	// default: MaxConnections
	MaxLongConnections int

	// PoolTimeout is the longest wait for capacity, ordinary or long, before
	// the call fails with ErrPoolExhausted.
	// default: ReadTimeout + 1s (as go-redis)
	PoolTimeout time.Duration

	// NodeFailureThreshold is the number of consecutive connection failures
	// or timeouts that open a node's circuit breaker. A negative value turns
	// breakers off.
	// default: DefaultNodeFailureThreshold (5)
	NodeFailureThreshold int

	// NodeRecoveryTime is the longest interval between two recovery probes
	// of a node whose breaker is open. While a breaker is open the client
	// probes the node on a connection of its own (dial, handshake, PING),
	// never with a caller's request: first about 100ms after the opening,
	// then a quarter of the outage so far apart, growing to at most
	// NodeRecoveryTime. The first answered probe lets traffic through
	// again. A node that opens again soon after recovering starts from a
	// longer first delay, doubled each time, until it has stayed healthy
	// for NodeRecoveryTime.
	// default: DefaultNodeRecoveryTime (10s)
	NodeRecoveryTime time.Duration

	// HungNodeAfter is how long a node may leave every command sent to it
	// unanswered before it is taken as hung and its breaker opens, without
	// waiting for ReadTimeout or for NodeFailureThreshold timeouts: a node
	// whose latency is high gets eight times its latency (or its peers',
	// the larger) instead, when that is more. Silence is what counts, not
	// the callers' deadlines: a node that keeps answering others is never
	// hung, however many callers give up on it. When several nodes with
	// commands outstanding are silent together, the client takes itself
	// (a stalled process, its own network) to be the one not hearing, and
	// opens nothing. The opening answers every command waiting on the node
	// at once (see ErrNodeUnavailable and ErrOutcomeUnknown). Breakers off
	// (a negative NodeFailureThreshold) turn this off too.
	// default: DefaultHungNodeAfter (400ms)
	HungNodeAfter time.Duration

	// SlowNodeFactor and SlowNodeFloor say when a node that still answers
	// is slow: its recent latency (a moving average with a 500ms time
	// constant, sampled from ordinary commands) is above SlowNodeFactor
	// times the median of the other nodes' (at least two, measured within
	// the last second) and above SlowNodeFloor. A node
	// that stays slow for SlowNodeMarkAfter, and whose latest samples still
	// are, is marked slow, at most one node
	// per shard and always fewer than half of the nodes; when every node is
	// slow, none is. Standalone has no peers and never marks.
	//
	// While a node is marked, at most a few callers wait on it at once (a
	// quarter of MaxConnections at the most, fewer the slower it is), and a
	// command whose deadline would pass before the node answers at its
	// current latency is refused at once; either refusal is ErrNodeSlow.
	// A mark ends when the node has been fast again for 2s, or after
	// SlowNodeEjection; a node marked again within six SlowNodeEjection of its
	// last mark keeps its mark twice as long, up to six SlowNodeEjection.
	// A negative SlowNodeFactor turns marking off.
	// default: DefaultSlowNodeFactor (4), DefaultSlowNodeFloor (5ms),
	// DefaultSlowNodeMarkAfter (1s), DefaultSlowNodeEjection (5s)
	SlowNodeFactor    float64
	SlowNodeFloor     time.Duration
	SlowNodeMarkAfter time.Duration
	SlowNodeEjection  time.Duration

	// MaxRedirects is the number of MOVED/ASK redirects (and retries) per
	// command in Cluster mode. NoRedirects follows none (go-redis's -1): a
	// MOVED or ASK reply reaches the caller as the command's error.
	// default: DefaultMaxRedirects (3, as go-redis)
	MaxRedirects int

	// ClusterNodeTimeout is the cluster's cluster-node-timeout. It bounds how
	// long a command waits for contested slot ownership to converge.
	// default: DefaultClusterNodeTimeout (15s)
	ClusterNodeTimeout time.Duration

	// HealthWriteTTL is the expiry of the key that Healthy and Check write
	// when given a write key, so a probe never leaves data behind.
	// default: DefaultHealthWriteTTL (5s)
	HealthWriteTTL time.Duration

	// Logger receives breaker transitions, refreshes and other decisions.
	// default: nil, no logging
	Logger *slog.Logger

	// ReadFrom says which node of a shard serves read-only commands (see
	// ReadFrom and docs/replicas.md). Anything but ReadFromMaster is invalid
	// in Standalone mode.
	// default: ReadFromMaster
	ReadFrom ReadFrom

	// MaxReplicaStaleness, when positive, keeps a replica from serving
	// reads once its last contact with its master (INFO replication) is
	// older than this; the replica is asked at most once a second, and only
	// while reads want it. A read with no usable node then fails with
	// ErrNodeUnavailable naming the master.
	// default: 0, no bound
	MaxReplicaStaleness time.Duration

	// OnEvent, if set, receives every Event: breaker transitions, topology
	// refreshes, pool exhaustion and divergence decisions, as typed values
	// for metrics and alerts. The same events go to Logger.
	//
	// It is called synchronously, on the goroutine that caused the event:
	// usually a caller's command, sometimes a go-redis background reload.
	// It must return quickly and never block (count, or send on a buffered
	// channel with select/default), because the command waits for it. It
	// may be called from many goroutines at once, and events that happen at
	// nearly the same time may arrive out of order (Event.Time orders them).
	// It must not call the Client. A panic in it is recovered and logged
	// at error level; the command goes on unaffected.
	// default: nil, no callback
	OnEvent func(Event)

	// The fields below are go-redis's (redis.UniversalOptions), with its
	// names, types, meanings and defaults, so that options written for
	// go-redis carry over. docs/options.md says how each reaches the
	// connections redisguard opens.

	// Protocol is the RESP version to speak, 2 or 3.
	// default: 3 (as go-redis)
	Protocol int

	// Dialer opens every connection, to Redis and to the sentinels.
	// default: a TCP dial (TLS with TLSConfig) bounded by DialTimeout
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

	// OnConnect runs on each new connection that carries the caller's
	// commands (ordinary, long and dedicated ones), after the handshake; an
	// error fails that connection. It does not run on the connections that
	// recovery probes, mode detection and redisguard's own sentinel
	// questions open: those carry no command of the caller's, and an
	// OnConnect that failed for its own reasons would keep a healthy node's
	// breaker open. (go-redis's failover client runs it on its sentinel
	// connections, as it does without redisguard.)
	// default: none
	OnConnect func(ctx context.Context, cn *redis.Conn) error

	// CredentialsProvider, CredentialsProviderContext (which wins when both
	// are set) and StreamingCredentialsProvider supply the Redis user name
	// and password for each new connection, recovery probes included, in
	// place of Username and Password: rotating tokens, cloud IAM.
	// The sentinels keep SentinelUsername and SentinelPassword.
	// default: none
	CredentialsProvider          func() (username string, password string)
	CredentialsProviderContext   func(ctx context.Context) (username string, password string, err error)
	StreamingCredentialsProvider auth.StreamingCredentialsProvider

	// PoolSize is go-redis's name for MaxConnections. Set either; setting
	// both to different values is an error.
	// default: MaxConnections
	PoolSize int

	// PoolFIFO takes pooled connections oldest first instead of newest
	// first, which closes idle ones sooner.
	// default: false (LIFO)
	PoolFIFO bool

	// MinIdleConns is the number of idle ordinary connections each node's
	// pool keeps open, at most MaxConnections. The long client and one-off
	// connections keep none.
	// default: 0
	MinIdleConns int

	// MaxIdleConns caps the idle connections each pool keeps.
	// default: 0, no cap
	MaxIdleConns int

	// MaxActiveConns caps the connections each node's ordinary pool opens,
	// subscriptions included. It must be 0 or at least MaxConnections: below
	// it, go-redis fails the extra commands at once instead of waiting
	// PoolTimeout for a turn.
	// default: 0, no cap beyond MaxConnections
	MaxActiveConns int

	// MaxConcurrentDials caps the dials each pool runs at once.
	// default: 0, the pool's size
	MaxConcurrentDials int

	// ConnMaxIdleTime closes a connection idle for longer; negative never
	// does (as go-redis's -1).
	// default: 30 minutes (as go-redis)
	ConnMaxIdleTime time.Duration

	// ConnMaxLifetime closes a connection older than this; zero or negative
	// never does.
	// default: 0
	ConnMaxLifetime time.Duration

	// ConnMaxLifetimeJitter spreads ConnMaxLifetime by up to this much either
	// way, so that connections do not all expire at once.
	// default: 0
	ConnMaxLifetimeJitter time.Duration

	// ReadBufferSize and WriteBufferSize size each connection's buffers,
	// pipelines' included (redisguard runs them on the ordinary pool).
	// default: 32 KiB each (as go-redis)
	ReadBufferSize, WriteBufferSize int

	// DisableIdentity skips CLIENT SETINFO on connect; IdentitySuffix is
	// appended to the library name it sends.
	// default: false, none
	DisableIdentity bool
	IdentitySuffix  string

	// Deprecated: use DisableIdentity (go-redis keeps the misspelling too).
	// default: false
	DisableIndentity bool

	// Deprecated: a no-op in go-redis v9.23, kept so options compile.
	// default: false
	UnstableResp3 bool

	// FailingTimeoutSeconds is how long go-redis's cluster client avoids a
	// node it marked as failing. Cluster only.
	// default: 15
	FailingTimeoutSeconds int

	// PushNotificationProcessor handles RESP3 push notifications. Not
	// allowed with client-side caching, which needs go-redis's own.
	// default: go-redis's processor
	PushNotificationProcessor push.NotificationProcessor

	// AutoPipelineOptions is the default configuration of AutoPipeline and
	// AsyncAutoPipeline. FullDuplex is refused: go-redis writes a
	// full-duplex command before any hook runs, so an open breaker could
	// not refuse it.
	// default: go-redis's defaults
	AutoPipelineOptions *redis.AutoPipelineOptions

	// RouteByLatencyTolerance, with ReadFromNearest in Cluster mode, takes
	// every node whose latency is within this of the fastest node's as
	// equally near, and spreads the reads among them (go-redis's, with
	// its RouteByLatency).
	// default: 0, the single fastest node
	RouteByLatencyTolerance time.Duration

	// The fields below are go-redis's redis.ClusterOptions, for Cluster
	// mode only; anything but their zero value in another mode is an
	// ErrInvalidConfig.

	// ClusterSlots, when set, is the slot map in place of CLUSTER SLOTS:
	// for a cluster behind proxies, or shards made by hand of servers
	// that are not cluster nodes. It is called as CLUSTER SLOTS would be
	// sent, through the same cache: one call at a time for every go-redis
	// client the Client runs, and a map younger than half a second is
	// reused. It makes ModeAuto Cluster, and Addrs may then be empty.
	// default: nil, ask the nodes
	ClusterSlots func(context.Context) ([]redis.ClusterSlot, error)

	// ClusterStateReloadInterval is how often go-redis reloads the slot
	// map without being asked to (redirects and failures still reload it
	// at once, within the cache's limits).
	// default: 60s (as go-redis)
	ClusterStateReloadInterval time.Duration

	// DisableRoutingPolicies turns off go-redis's command routing by the
	// servers' request and response policies (COMMAND DOCS), so that
	// keyless commands are routed as before go-redis v9.17.
	// default: false
	DisableRoutingPolicies bool

	// ShardPicker picks the node of a keyless command whose request policy
	// leaves the choice to the client: Next(n) returns an index below n.
	// go-redis's routing.ShardPicker, whose package cannot be imported.
	// default: go-redis's round robin
	ShardPicker interface{ Next(total int) int }

	// ClientSideCacheConfig or ClientSideCache turns on go-redis's
	// client-side cache (RESP3 server-assisted invalidation); the other
	// ClientSideCache fields tune it, as in redis.Options. go-redis v9.23
	// caches only on a single-server client, so these need Standalone mode
	// (or ModeAuto finding a standalone server), Protocol 3, DB 0, no
	// credentials provider and no PushNotificationProcessor; anything else
	// is an ErrInvalidConfig, as go-redis would quietly run uncached.
	// Only ordinary commands use the cache; long ones bypass it.
	// default: nil, no cache
	ClientSideCacheConfig                  *redis.ClientSideCacheConfig
	ClientSideCache                        redis.Cache
	ClientSideCacheStrategy                redis.CSCStrategy
	ClientSideCacheRefreshOnInvalidate     bool
	ClientSideCacheCoalesceMisses          bool
	ClientSideCacheInvalidationBatchWindow time.Duration

	// The go-redis fields below are redisguard's own to set; each accepts
	// only its zero value and values that mean what redisguard does, and any
	// other value is an ErrInvalidConfig that says why (docs/options.md).

	// MaxRetries: 0 or -1. redisguard makes no go-redis retries: they would
	// resend commands after read timeouts and retry pool timeouts. It
	// retries a reset connection once itself.
	// default: 0, no go-redis retries
	MaxRetries int

	// MinRetryBackoff, MaxRetryBackoff: 0 or negative; with no go-redis
	// retries there is nothing to back off.
	// default: 0, none
	MinRetryBackoff, MaxRetryBackoff time.Duration

	// ContextTimeoutEnabled: context deadlines are always honoured, so
	// true and false (unset) mean the same.
	// default: false, deadlines honoured
	ContextTimeoutEnabled bool

	// DialerRetries: 0 or 1. Each dial is one attempt, so that a node that
	// does not answer reaches its breaker after one DialTimeout, not five.
	// default: 0, one attempt
	DialerRetries int

	// DialerRetryTimeout: 0; with one attempt there is no wait between.
	// default: 0
	DialerRetryTimeout time.Duration

	// PipelinePoolSize: 0 or negative (go-redis's opt-out). Pipelines run on
	// the node's ordinary pool, so MaxConnections is the whole per-node
	// budget; PipelineReadBufferSize and PipelineWriteBufferSize must be 0
	// (ReadBufferSize and WriteBufferSize size pipelines' buffers).
	// default: 0, no pipeline pool
	PipelinePoolSize                                int
	PipelineReadBufferSize, PipelineWriteBufferSize int

	// MaintNotificationsConfig passes to go-redis, whose default (nil) is
	// maintnotifications.ModeAuto: on a server that sends maintenance
	// notifications (Redis Cloud, Redis Software) a connection's timeouts
	// relax while its endpoint announces a migration or failover, and
	// connections are handed over to the endpoint a MOVING names; a server
	// that refuses CLIENT MAINT_NOTIFICATIONS turns them off quietly.
	// ModeEnabled is refused in Sentinel mode and with Protocol 2, where
	// go-redis would run without notifications. The connections redisguard
	// opens for itself (probes, sentinel questions) run with notifications
	// off. Blocking calls and subscriptions follow a MOVING to the new
	// endpoint (docs/options.md).
	// default: nil, go-redis's ModeAuto
	MaintNotificationsConfig *maintnotifications.Config
}

// invalid builds a configuration error that names the offending field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// resolve validates cfg and returns a copy with every default filled in and
// ModeAuto replaced by the concrete mode. It never panics and never echoes a
// password.
func (cfg Config) resolve() (Config, error) {
	cfg.Addrs = append([]string(nil), cfg.Addrs...)
	if m := cfg.MaintNotificationsConfig; m != nil {
		m := *m
		cfg.MaintNotificationsConfig = &m
	}
	if err := cfg.validate(); err != nil {
		return cfg, err
	}
	return cfg.withDefaults(), nil
}

// validate reports the first thing wrong with cfg, as an ErrInvalidConfig
// naming the field, and resolves ModeAuto to the concrete mode.
func (cfg *Config) validate() error {
	if len(cfg.Addrs) == 0 && (cfg.ClusterSlots == nil || (cfg.Mode != ModeAuto && cfg.Mode != ModeCluster)) {
		return invalid("Addrs", "is empty: need at least one host:port (or, in Cluster mode, ClusterSlots)")
	}
	for i, a := range cfg.Addrs {
		if strings.TrimSpace(a) == "" {
			return invalid("Addrs", "[%d] is empty", i)
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return invalid("Addrs", "[%d] %q is not host:port (the port is required, e.g. %q)", i, a, exampleAddr(a))
		}
	}

	switch cfg.Mode {
	case ModeAuto:
		switch {
		case cfg.MasterName != "":
			cfg.Mode = ModeSentinel
		case len(cfg.Addrs) > 1, cfg.ClusterSlots != nil:
			cfg.Mode = ModeCluster
		}
		// One address stays ModeAuto: NewClient asks the server.
	case ModeStandalone:
		if len(cfg.Addrs) > 1 {
			return invalid("Addrs", "has %d addresses; ModeStandalone takes exactly one", len(cfg.Addrs))
		}
	case ModeSentinel:
		if cfg.MasterName == "" {
			return invalid("MasterName", "is required with ModeSentinel")
		}
	case ModeCluster:
		if cfg.MasterName != "" {
			return invalid("MasterName", "is set but ModeCluster has no master name; use ModeSentinel")
		}
	default:
		return invalid("Mode", "%d is not a known mode", int(cfg.Mode))
	}
	if cfg.Mode == ModeCluster && cfg.DB != 0 {
		return invalid("DB", "is %d; Redis Cluster only has database 0", cfg.DB)
	}

	nonNegative := []struct {
		name string
		v    int64
	}{
		{"DB", int64(cfg.DB)},
		{"DialTimeout", int64(cfg.DialTimeout)},
		{"ReadTimeout", int64(cfg.ReadTimeout)},
		{"WriteTimeout", int64(cfg.WriteTimeout)},
		{"MaxConnections", int64(cfg.MaxConnections)},
		{"MaxLongConnections", int64(cfg.MaxLongConnections)},
		{"PoolTimeout", int64(cfg.PoolTimeout)},
		{"NodeRecoveryTime", int64(cfg.NodeRecoveryTime)},
		{"HungNodeAfter", int64(cfg.HungNodeAfter)},
		{"ClusterNodeTimeout", int64(cfg.ClusterNodeTimeout)},
		{"HealthWriteTTL", int64(cfg.HealthWriteTTL)},
		{"SlowNodeFloor", int64(cfg.SlowNodeFloor)},
		{"SlowNodeMarkAfter", int64(cfg.SlowNodeMarkAfter)},
		{"SlowNodeEjection", int64(cfg.SlowNodeEjection)},
		{"MaxReplicaStaleness", int64(cfg.MaxReplicaStaleness)},
	}
	for _, f := range nonNegative {
		if f.v < 0 && strings.HasSuffix(f.name, "Timeout") && f.name != "ClusterNodeTimeout" {
			return invalid(f.name, "is negative (%d); go-redis reads that as no timeout, which redisguard does not have: it always bounds the wait", f.v)
		}
		if f.v < 0 {
			return invalid(f.name, "is negative (%d)", f.v)
		}
	}
	if cfg.MaxRedirects < 0 && cfg.MaxRedirects != NoRedirects {
		return invalid("MaxRedirects", "is %d; NoRedirects (-1) follows no redirect, 0 means %d", cfg.MaxRedirects, DefaultMaxRedirects)
	}
	if err := cfg.validateReadFrom(); err != nil {
		return err
	}
	if f := cfg.SlowNodeFactor; f != f || (f > 0 && f <= 1) {
		return invalid("SlowNodeFactor", "is %v; a node is slow beside its peers only more than once their latency (negative turns marking off)", f)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxConnections", cfg.MaxConnections}, {"MaxLongConnections", cfg.MaxLongConnections}} {
		if f.v > maxConnections {
			return invalid(f.name, "is %d, more than %d: go-redis sets up each pool in proportion to its size", f.v, maxConnections)
		}
	}

	return cfg.validateGoRedis()
}

// withDefaults returns cfg with every zero field that has a default set to it.
func (cfg Config) withDefaults() Config {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = cfg.ReadTimeout
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = cfg.poolSize()
	}
	if cfg.MaxLongConnections == 0 {
		cfg.MaxLongConnections = cfg.MaxConnections
	}
	if cfg.PoolTimeout == 0 {
		cfg.PoolTimeout = cfg.ReadTimeout + time.Second
	}
	if cfg.NodeFailureThreshold == 0 {
		cfg.NodeFailureThreshold = DefaultNodeFailureThreshold
	}
	if cfg.NodeRecoveryTime == 0 {
		cfg.NodeRecoveryTime = DefaultNodeRecoveryTime
	}
	if cfg.HungNodeAfter == 0 {
		cfg.HungNodeAfter = DefaultHungNodeAfter
	}
	if cfg.MaxRedirects == 0 {
		cfg.MaxRedirects = DefaultMaxRedirects
	}
	if cfg.ClusterNodeTimeout == 0 {
		cfg.ClusterNodeTimeout = DefaultClusterNodeTimeout
	}
	if cfg.HealthWriteTTL == 0 {
		cfg.HealthWriteTTL = DefaultHealthWriteTTL
	}
	if cfg.SlowNodeFactor == 0 {
		cfg.SlowNodeFactor = DefaultSlowNodeFactor
	}
	if cfg.SlowNodeFloor == 0 {
		cfg.SlowNodeFloor = DefaultSlowNodeFloor
	}
	if cfg.SlowNodeMarkAfter == 0 {
		cfg.SlowNodeMarkAfter = DefaultSlowNodeMarkAfter
	}
	if cfg.SlowNodeEjection == 0 {
		cfg.SlowNodeEjection = DefaultSlowNodeEjection
	}
	return cfg
}

// exampleAddr suggests addr with the default port, for the error message.
func exampleAddr(addr string) string {
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	return net.JoinHostPort(host, "6379")
}

// validateReadFrom checks ReadFrom against the mode: there are no replicas
// to read in Standalone mode, and no latency to go by in Sentinel mode.
// ModeAuto is checked again once the mode is known.
func (cfg *Config) validateReadFrom() error {
	if cfg.ReadFrom < ReadFromMaster || int(cfg.ReadFrom) >= len(readFromNames) {
		return invalid("ReadFrom", "%d is not a known ReadFrom", int(cfg.ReadFrom))
	}
	if cfg.ReadFrom == ReadFromMaster {
		return nil
	}
	if cfg.Mode == ModeStandalone {
		return invalid("ReadFrom", "is %s, but a standalone server has no replicas to read from", cfg.ReadFrom)
	}
	return nil
}
