package redis_test

// This file is copied into a copy of go-redis v9.23.0 by
// internal/goredissuite/run.sh. It builds the clients under test as a user
// porting to redisguard would: the same options, field by field, in a
// redisguard.Config, and a *redisguard.Client where the spec had a go-redis
// client. A go-redis option that Config has no field for fails the spec
// that sets it, with the field's name.

import (
	"fmt"
	"reflect"

	. "github.com/bsm/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard"
)

// guardNewClient is redis.NewClient through redisguard.
func guardNewClient(opt *redis.Options) *redisguard.Client {
	cfg, err := guardConfig(opt)
	if err == nil {
		var c *redisguard.Client
		if c, err = redisguard.NewClient(cfg); err == nil {
			return c
		}
	}
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "redisguard.NewClient")
	return nil
}

// guardNewClusterClient is redis.NewClusterClient through redisguard.
func guardNewClusterClient(opt *redis.ClusterOptions) *redisguard.Client {
	cfg, err := guardClusterConfig(opt)
	if err == nil {
		var c *redisguard.Client
		if c, err = redisguard.NewClient(cfg); err == nil {
			return c
		}
	}
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "redisguard.NewClient")
	return nil
}

// goredisOf is the go-redis client a standalone Client runs, redisguard's
// hooks installed: what a port reaches for the methods of *redis.Client
// that a Client does not have (Conn, Options, ...).
func goredisOf(c *redisguard.Client) *redis.Client {
	return c.UniversalClient.(*redis.Client)
}

// unported fails when any of the named fields of opt is set: Config has no
// field for it.
func unported(opt any, fields ...string) error {
	v := reflect.ValueOf(opt).Elem()
	for _, f := range fields {
		if fv := v.FieldByName(f); fv.IsValid() && !fv.IsZero() {
			return fmt.Errorf("%s.%s is set, and redisguard.Config has no field for it", v.Type().Name(), f)
		}
	}
	return nil
}

func guardConfig(opt *redis.Options) (redisguard.Config, error) {
	if opt.Network != "" && opt.Network != "tcp" {
		return redisguard.Config{}, fmt.Errorf("Options.Network is %q; redisguard dials TCP only", opt.Network)
	}
	if err := unported(opt, "NodeAddress", "Limiter", "DialerRetryBackoff"); err != nil {
		return redisguard.Config{}, err
	}
	return redisguard.Config{
		Mode:  redisguard.ModeStandalone,
		Addrs: []string{opt.Addr},

		ClientName: opt.ClientName, Dialer: opt.Dialer, OnConnect: opt.OnConnect, Protocol: opt.Protocol,
		Username: opt.Username, Password: opt.Password,
		CredentialsProvider: opt.CredentialsProvider, CredentialsProviderContext: opt.CredentialsProviderContext,
		StreamingCredentialsProvider: opt.StreamingCredentialsProvider,
		DB:                           opt.DB,
		MaxRetries:                   opt.MaxRetries, MinRetryBackoff: opt.MinRetryBackoff, MaxRetryBackoff: opt.MaxRetryBackoff,
		DialTimeout: opt.DialTimeout, DialerRetries: opt.DialerRetries, DialerRetryTimeout: opt.DialerRetryTimeout,
		ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout, ContextTimeoutEnabled: opt.ContextTimeoutEnabled,
		ReadBufferSize: opt.ReadBufferSize, WriteBufferSize: opt.WriteBufferSize,
		PipelineReadBufferSize: opt.PipelineReadBufferSize, PipelineWriteBufferSize: opt.PipelineWriteBufferSize,
		PipelinePoolSize: opt.PipelinePoolSize, AutoPipelineOptions: opt.AutoPipelineOptions,
		PoolFIFO: opt.PoolFIFO, PoolSize: opt.PoolSize, MaxConcurrentDials: opt.MaxConcurrentDials,
		PoolTimeout: opt.PoolTimeout, MinIdleConns: opt.MinIdleConns, MaxIdleConns: opt.MaxIdleConns,
		MaxActiveConns: opt.MaxActiveConns, ConnMaxIdleTime: opt.ConnMaxIdleTime, ConnMaxLifetime: opt.ConnMaxLifetime,
		ConnMaxLifetimeJitter: opt.ConnMaxLifetimeJitter, TLSConfig: opt.TLSConfig,
		DisableIndentity: opt.DisableIndentity, DisableIdentity: opt.DisableIdentity, IdentitySuffix: opt.IdentitySuffix,
		UnstableResp3: opt.UnstableResp3, PushNotificationProcessor: opt.PushNotificationProcessor,
		FailingTimeoutSeconds: opt.FailingTimeoutSeconds, MaintNotificationsConfig: opt.MaintNotificationsConfig,
		ClientSideCacheConfig: opt.ClientSideCacheConfig, ClientSideCache: opt.ClientSideCache,
		ClientSideCacheStrategy:                opt.ClientSideCacheStrategy,
		ClientSideCacheRefreshOnInvalidate:     opt.ClientSideCacheRefreshOnInvalidate,
		ClientSideCacheCoalesceMisses:          opt.ClientSideCacheCoalesceMisses,
		ClientSideCacheInvalidationBatchWindow: opt.ClientSideCacheInvalidationBatchWindow,
	}, nil
}

func guardClusterConfig(opt *redis.ClusterOptions) (redisguard.Config, error) {
	if err := unported(opt, "NewClient", "DialerRetryBackoff"); err != nil {
		return redisguard.Config{}, err
	}
	readFrom := redisguard.ReadFromMaster
	switch {
	case opt.RouteByLatency:
		readFrom = redisguard.ReadFromNearest
	case opt.RouteRandomly:
		readFrom = redisguard.ReadFromAny
	case opt.ReadOnly:
		readFrom = redisguard.ReadFromReplicaPreferred
	}
	return redisguard.Config{
		Mode:         redisguard.ModeCluster,
		Addrs:        opt.Addrs,
		MaxRedirects: opt.MaxRedirects,
		ReadFrom:     readFrom,

		RouteByLatencyTolerance: opt.RouteByLatencyTolerance, ClusterSlots: opt.ClusterSlots,
		ClusterStateReloadInterval: opt.ClusterStateReloadInterval, DisableRoutingPolicies: opt.DisableRoutingPolicies,
		ShardPicker: opt.ShardPicker,

		ClientName: opt.ClientName, Dialer: opt.Dialer, OnConnect: opt.OnConnect, Protocol: opt.Protocol,
		Username: opt.Username, Password: opt.Password,
		CredentialsProvider: opt.CredentialsProvider, CredentialsProviderContext: opt.CredentialsProviderContext,
		StreamingCredentialsProvider: opt.StreamingCredentialsProvider,
		MaxRetries:                   opt.MaxRetries, MinRetryBackoff: opt.MinRetryBackoff, MaxRetryBackoff: opt.MaxRetryBackoff,
		DialTimeout: opt.DialTimeout, DialerRetries: opt.DialerRetries, DialerRetryTimeout: opt.DialerRetryTimeout,
		ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout, ContextTimeoutEnabled: opt.ContextTimeoutEnabled,
		ReadBufferSize: opt.ReadBufferSize, WriteBufferSize: opt.WriteBufferSize,
		PipelineReadBufferSize: opt.PipelineReadBufferSize, PipelineWriteBufferSize: opt.PipelineWriteBufferSize,
		PipelinePoolSize: opt.PipelinePoolSize, AutoPipelineOptions: opt.AutoPipelineOptions,
		PoolFIFO: opt.PoolFIFO, PoolSize: opt.PoolSize, MaxConcurrentDials: opt.MaxConcurrentDials,
		PoolTimeout: opt.PoolTimeout, MinIdleConns: opt.MinIdleConns, MaxIdleConns: opt.MaxIdleConns,
		MaxActiveConns: opt.MaxActiveConns, ConnMaxIdleTime: opt.ConnMaxIdleTime, ConnMaxLifetime: opt.ConnMaxLifetime,
		ConnMaxLifetimeJitter: opt.ConnMaxLifetimeJitter, TLSConfig: opt.TLSConfig,
		DisableIndentity: opt.DisableIndentity, DisableIdentity: opt.DisableIdentity, IdentitySuffix: opt.IdentitySuffix,
		UnstableResp3: opt.UnstableResp3, PushNotificationProcessor: opt.PushNotificationProcessor,
		FailingTimeoutSeconds: opt.FailingTimeoutSeconds, MaintNotificationsConfig: opt.MaintNotificationsConfig,
	}, nil
}
