package redisguard

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// validateGoRedis checks the Config fields that go-redis defines: the ones
// passed through must be values go-redis accepts, and the ones redisguard
// owns only values that mean what redisguard does. Run by validate, after
// the mode is settled as far as the Config alone can settle it.
func (cfg *Config) validateGoRedis() error {
	if cfg.Protocol != 0 && cfg.Protocol != 2 && cfg.Protocol != 3 {
		return invalid("Protocol", "is %d; RESP versions are 2 and 3", cfg.Protocol)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"PoolSize", int64(cfg.PoolSize)},
		{"MinIdleConns", int64(cfg.MinIdleConns)},
		{"MaxIdleConns", int64(cfg.MaxIdleConns)},
		{"MaxActiveConns", int64(cfg.MaxActiveConns)},
		{"MaxConcurrentDials", int64(cfg.MaxConcurrentDials)},
		{"ConnMaxLifetimeJitter", int64(cfg.ConnMaxLifetimeJitter)},
		{"ReadBufferSize", int64(cfg.ReadBufferSize)},
		{"WriteBufferSize", int64(cfg.WriteBufferSize)},
		{"FailingTimeoutSeconds", int64(cfg.FailingTimeoutSeconds)},
		{"ClientSideCacheInvalidationBatchWindow", int64(cfg.ClientSideCacheInvalidationBatchWindow)},
		{"RouteByLatencyTolerance", int64(cfg.RouteByLatencyTolerance)},
		{"ClusterStateReloadInterval", int64(cfg.ClusterStateReloadInterval)},
	} {
		if f.v < 0 {
			return invalid(f.name, "is negative (%d)", f.v)
		}
	}
	if cfg.PoolSize > maxConnections {
		return invalid("PoolSize", "is %d, more than %d: go-redis sets up each pool in proportion to its size", cfg.PoolSize, maxConnections)
	}
	if cfg.PoolSize != 0 && cfg.MaxConnections != 0 && cfg.PoolSize != cfg.MaxConnections {
		return invalid("PoolSize", "is %d but MaxConnections is %d; PoolSize is go-redis's name for MaxConnections, set one", cfg.PoolSize, cfg.MaxConnections)
	}
	size := cfg.poolSize()
	if cfg.MinIdleConns > size {
		return invalid("MinIdleConns", "is %d, more than the %d connections a node's pool may hold (MaxConnections)", cfg.MinIdleConns, size)
	}
	if cfg.MaxActiveConns != 0 && cfg.MaxActiveConns < size {
		return invalid("MaxActiveConns", "is %d, less than MaxConnections (%d): go-redis would fail the extra commands at once instead of waiting PoolTimeout; lower MaxConnections instead", cfg.MaxActiveConns, size)
	}

	if cfg.RouteByLatencyTolerance != 0 && cfg.ReadFrom != ReadFromNearest {
		return invalid("RouteByLatencyTolerance", "is set, but ReadFrom is %s; it widens ReadFromNearest's choice of node", cfg.ReadFrom)
	}
	if err := cfg.validateClusterOnly(); err != nil {
		return err
	}
	if err := refuseFullDuplex("AutoPipelineOptions", cfg.AutoPipelineOptions); err != nil {
		return err
	}

	// The fields redisguard owns.
	if cfg.MaxRetries != 0 && cfg.MaxRetries != -1 {
		return invalid("MaxRetries", "is %d; redisguard owns retries (go-redis's would resend commands after read timeouts and retry pool timeouts) and retries a reset connection once itself: leave it 0 or -1", cfg.MaxRetries)
	}
	if cfg.MinRetryBackoff > 0 {
		return invalid("MinRetryBackoff", "is set, but redisguard makes no go-redis retries to back off between; leave it 0")
	}
	if cfg.MaxRetryBackoff > 0 {
		return invalid("MaxRetryBackoff", "is set, but redisguard makes no go-redis retries to back off between; leave it 0")
	}
	if cfg.DialerRetries != 0 && cfg.DialerRetries != dialAttempts {
		return invalid("DialerRetries", "is %d; each dial is one attempt, so that a node that does not answer reaches its breaker after one DialTimeout: leave it 0 or 1", cfg.DialerRetries)
	}
	if cfg.DialerRetryTimeout != 0 {
		return invalid("DialerRetryTimeout", "is set, but each dial is one attempt, with no wait to configure; leave it 0")
	}
	if cfg.PipelinePoolSize > 0 {
		return invalid("PipelinePoolSize", "is %d; pipelines run on the node's ordinary pool so that MaxConnections is the whole per-node budget: leave it 0 or negative", cfg.PipelinePoolSize)
	}
	if cfg.PipelineReadBufferSize != 0 {
		return invalid("PipelineReadBufferSize", "is set, but there is no pipeline pool (PipelinePoolSize); ReadBufferSize sizes pipelines' buffers")
	}
	if cfg.PipelineWriteBufferSize != 0 {
		return invalid("PipelineWriteBufferSize", "is set, but there is no pipeline pool (PipelinePoolSize); WriteBufferSize sizes pipelines' buffers")
	}
	if err := cfg.validateMaint(); err != nil {
		return err
	}
	return cfg.validateCache()
}

// validateClusterOnly refuses go-redis's ClusterOptions fields outside
// Cluster mode, where go-redis has no use for them; ModeAuto is checked
// again once the server has said which mode it is.
func (cfg *Config) validateClusterOnly() error {
	if cfg.Mode == ModeAuto || cfg.Mode == ModeCluster {
		return nil
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"ClusterSlots", cfg.ClusterSlots != nil},
		{"ClusterStateReloadInterval", cfg.ClusterStateReloadInterval != 0},
		{"DisableRoutingPolicies", cfg.DisableRoutingPolicies},
		{"ShardPicker", cfg.ShardPicker != nil},
		{"RouteByLatencyTolerance", cfg.RouteByLatencyTolerance != 0},
	} {
		if f.set {
			return invalid(f.name, "is set, but it is a Cluster-mode option and the mode is %s", cfg.Mode)
		}
	}
	return nil
}

// validateMaint checks MaintNotificationsConfig as go-redis would once its
// defaults are applied, and refuses ModeEnabled where go-redis would
// quietly run without notifications: in Sentinel mode (its failover client
// has none) and on RESP2 (they arrive as RESP3 pushes). ModeAuto, nil
// included, is go-redis's own: it turns notifications off for a server that
// refuses them.
func (cfg *Config) validateMaint() error {
	const field = "MaintNotificationsConfig"
	m := cfg.MaintNotificationsConfig
	if m == nil {
		return nil
	}
	if err := m.ApplyDefaults().Validate(); err != nil {
		return invalid(field, "is not one go-redis accepts: %v", err)
	}
	if m.Mode != maintnotifications.ModeEnabled {
		return nil
	}
	switch {
	case cfg.Mode == ModeSentinel:
		return invalid(field, "has Mode %q, but go-redis v9.23's Sentinel-mode client has no maintenance notifications; leave it nil", m.Mode)
	case cfg.Protocol == 2:
		return invalid(field, "has Mode %q with Protocol 2; the notifications are RESP3 pushes", m.Mode)
	}
	return nil
}

// validateCache refuses client-side cache settings go-redis would quietly
// ignore, or run with undefined behaviour: a cache needs go-redis's
// single-server client on RESP3 and database 0, fixed credentials and the
// built-in push processor.
func (cfg *Config) validateCache() error {
	if !cfg.caching() {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"ClientSideCacheStrategy", cfg.ClientSideCacheStrategy != redis.CSCStrategySharedTracking},
			{"ClientSideCacheRefreshOnInvalidate", cfg.ClientSideCacheRefreshOnInvalidate},
			{"ClientSideCacheCoalesceMisses", cfg.ClientSideCacheCoalesceMisses},
			{"ClientSideCacheInvalidationBatchWindow", cfg.ClientSideCacheInvalidationBatchWindow != 0},
		} {
			if f.set {
				return invalid(f.name, "is set, but no client-side cache is (ClientSideCacheConfig or ClientSideCache)")
			}
		}
		return nil
	}
	const field = "ClientSideCacheConfig"
	switch {
	case cfg.ClientSideCacheStrategy != redis.CSCStrategySharedTracking:
		return invalid("ClientSideCacheStrategy", "is %d; go-redis v9.23 implements only CSCStrategySharedTracking", int(cfg.ClientSideCacheStrategy))
	case cfg.Mode == ModeCluster || cfg.Mode == ModeSentinel:
		return invalid(field, "is set, but go-redis v9.23 caches only on a single-server client, not in %s mode", cfg.Mode)
	case cfg.Protocol == 2:
		return invalid(field, "is set with Protocol 2; the cache needs RESP3's invalidation pushes")
	case cfg.DB != 0:
		return invalid(field, "is set with DB %d; go-redis caches database 0 only", cfg.DB)
	case cfg.CredentialsProvider != nil || cfg.CredentialsProviderContext != nil || cfg.StreamingCredentialsProvider != nil:
		return invalid(field, "is set with a credentials provider; go-redis turns the cache off then, since the identity could change under it")
	case cfg.PushNotificationProcessor != nil:
		return invalid(field, "is set with a PushNotificationProcessor; the cache needs go-redis's own to apply invalidations")
	}
	return nil
}

// caching reports whether cfg turns the client-side cache on.
func (cfg *Config) caching() bool {
	return cfg.ClientSideCacheConfig != nil || cfg.ClientSideCache != nil
}

// poolSize is the per-node ordinary pool size cfg asks for, default included.
func (cfg *Config) poolSize() int {
	switch {
	case cfg.MaxConnections != 0:
		return cfg.MaxConnections
	case cfg.PoolSize != 0:
		return cfg.PoolSize
	}
	return DefaultMaxConnections()
}
