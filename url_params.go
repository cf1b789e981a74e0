package redisguard

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// urlParam is one query parameter of ParseURL: where it applies, whether it
// may repeat, and how it sets its field. set returns an error that never
// quotes the value.
type urlParam struct {
	only     Mode // ModeAuto: every URL; ModeCluster: cluster and redis:// URLs; ModeSentinel: Sentinel URLs
	failover bool // only in go-redis's failover form, redis://…?master_name=…
	repeat   bool
	set      func(cfg *Config, v string) error
}

// allowed says why p does not apply to a URL of mode, or nil.
func (p urlParam) allowed(mode Mode, failover bool) error {
	switch {
	case p.failover && !failover:
		return errors.New("belongs to go-redis's failover form, redis://<sentinel>?master_name=<name>; redis+sentinel:// takes the master name as its path and the master's credentials as its user info")
	case p.only == ModeCluster && mode != ModeCluster && mode != ModeAuto:
		return errors.New("applies only to Cluster URLs (redis+cluster://, or redis:// reaching a cluster)")
	case p.only == ModeSentinel && mode != ModeSentinel:
		return errors.New("applies only to redis+sentinel:// and rediss+sentinel:// URLs")
	}
	return nil
}

// urlParams holds redisguard's parameters and every one of go-redis's
// ParseURL, ParseClusterURL and ParseFailoverURL, with go-redis's names and
// meanings; those redisguard owns accept only values that mean what it does.
var urlParams = map[string]urlParam{
	// redisguard's own.
	"max_connections":        connectionsParam(func(c *Config) *int { return &c.MaxConnections }),
	"max_long_connections":   connectionsParam(func(c *Config) *int { return &c.MaxLongConnections }),
	"node_failure_threshold": countParam(true, func(c *Config) *int { return &c.NodeFailureThreshold }),
	"node_recovery_time":     durationParam(func(c *Config) *time.Duration { return &c.NodeRecoveryTime }),
	"hung_node_after":        durationParam(func(c *Config) *time.Duration { return &c.HungNodeAfter }),
	"health_write_ttl":       durationParam(func(c *Config) *time.Duration { return &c.HealthWriteTTL }),
	"slow_node_factor":       {set: setSlowNodeFactor},
	"slow_node_floor":        durationParam(func(c *Config) *time.Duration { return &c.SlowNodeFloor }),
	"slow_node_mark_after":   durationParam(func(c *Config) *time.Duration { return &c.SlowNodeMarkAfter }),
	"slow_node_ejection":     durationParam(func(c *Config) *time.Duration { return &c.SlowNodeEjection }),
	"read_from":              {set: setReadFrom},
	"max_replica_staleness":  durationParam(func(c *Config) *time.Duration { return &c.MaxReplicaStaleness }),
	"cluster_node_timeout":   {only: ModeCluster, set: durationParam(func(c *Config) *time.Duration { return &c.ClusterNodeTimeout }).set},
	"sentinel_username":      {only: ModeSentinel, set: func(c *Config, v string) error { c.SentinelUsername = v; return nil }},
	"sentinel_password":      {only: ModeSentinel, set: func(c *Config, v string) error { c.SentinelPassword = v; return nil }},

	// go-redis's, passed through.
	"client_name":   {set: setClientName},
	"protocol":      {set: setProtocol},
	"db":            {set: setDB},
	"addr":          {repeat: true, set: addAddr},
	"dial_timeout":  timeoutParam(func(c *Config) *time.Duration { return &c.DialTimeout }),
	"read_timeout":  timeoutParam(func(c *Config) *time.Duration { return &c.ReadTimeout }),
	"write_timeout": timeoutParam(func(c *Config) *time.Duration { return &c.WriteTimeout }),
	"pool_timeout":  timeoutParam(func(c *Config) *time.Duration { return &c.PoolTimeout }),
	"pool_size":     connectionsParam(func(c *Config) *int { return &c.PoolSize }),
	"pool_fifo":     boolParam(func(c *Config) *bool { return &c.PoolFIFO }),

	"min_idle_conns":           countParam(false, func(c *Config) *int { return &c.MinIdleConns }),
	"max_idle_conns":           countParam(false, func(c *Config) *int { return &c.MaxIdleConns }),
	"max_active_conns":         countParam(false, func(c *Config) *int { return &c.MaxActiveConns }),
	"max_concurrent_dials":     countParam(false, func(c *Config) *int { return &c.MaxConcurrentDials }),
	"conn_max_idle_time":       lifetimeParam(func(c *Config) *time.Duration { return &c.ConnMaxIdleTime }),
	"idle_timeout":             lifetimeParam(func(c *Config) *time.Duration { return &c.ConnMaxIdleTime }),
	"conn_max_lifetime":        lifetimeParam(func(c *Config) *time.Duration { return &c.ConnMaxLifetime }),
	"max_conn_age":             lifetimeParam(func(c *Config) *time.Duration { return &c.ConnMaxLifetime }),
	"conn_max_lifetime_jitter": lifetimeParam(func(c *Config) *time.Duration { return &c.ConnMaxLifetimeJitter }),
	"skip_verify":              {set: setSkipVerify},
	"disableIdentity":          boolParam(func(c *Config) *bool { return &c.DisableIdentity }),
	"identitySuffix":           {set: func(c *Config, v string) error { c.IdentitySuffix = v; return nil }},
	"unstable_resp3":           boolParam(func(c *Config) *bool { return &c.UnstableResp3 }),
	"max_redirects":            {only: ModeCluster, set: countParam(true, func(c *Config) *int { return &c.MaxRedirects }).set},
	"failing_timeout_seconds":  {only: ModeCluster, set: countParam(false, func(c *Config) *int { return &c.FailingTimeoutSeconds }).set},
	"master_name":              {failover: true, set: func(c *Config, v string) error { c.MasterName = v; return nil }},
	"username":                 {failover: true, set: func(c *Config, v string) error { c.Username = v; return nil }},
	"password":                 {failover: true, set: func(c *Config, v string) error { c.Password = v; return nil }},

	// go-redis's, owned by redisguard.
	"max_retries": {set: func(c *Config, v string) error {
		if v != "-1" {
			return errors.New("may only be -1 (no go-redis retries): redisguard owns retries, since go-redis's would resend commands after read timeouts and retry pool timeouts, and retries a reset connection once itself")
		}
		c.MaxRetries = -1
		return nil
	}},
	"min_retry_backoff": noBackoffParam(func(c *Config) *time.Duration { return &c.MinRetryBackoff }),
	"max_retry_backoff": noBackoffParam(func(c *Config) *time.Duration { return &c.MaxRetryBackoff }),
	"dialer_retries": {set: func(c *Config, v string) error {
		if v != "1" {
			return errors.New("may only be 1: each dial is one attempt, so that a node that does not answer reaches its breaker after one dial timeout")
		}
		c.DialerRetries = 1
		return nil
	}},
	"dialer_retry_timeout":       refusedParam("each dial is one attempt, with no wait between attempts to set"),
	"pipeline_pool_size":         {set: setPipelinePoolSize},
	"pipeline_read_buffer_size":  refusedParam("there is no pipeline pool (pipelines share the node's pool); ReadBufferSize sizes their buffers"),
	"pipeline_write_buffer_size": refusedParam("there is no pipeline pool (pipelines share the node's pool); WriteBufferSize sizes their buffers"),
	"context_timeout_enabled": {set: func(c *Config, v string) error {
		on, err := parseBool(v)
		if err != nil {
			return err
		}
		if !on {
			return errors.New("cannot be false: redisguard always honours context deadlines")
		}
		c.ContextTimeoutEnabled = true
		return nil
	}},

	// Replica reads are redisguard's read_from.
	"read_only":                  replicaReadParam(),
	"route_by_latency":           replicaReadParam(),
	"route_randomly":             replicaReadParam(),
	"replica_only":               replicaReadParam(),
	"use_disconnected_replicas":  replicaReadParam(),
	"route_by_latency_tolerance": refusedParam("replica reads are chosen with read_from"),
}

func setClientName(c *Config, v string) error {
	// Redis refuses CLIENT SETNAME with spaces or non-printable bytes, and
	// go-redis sends it on every new connection: a bad name would fail
	// every dial, far from the URL that caused it.
	for i := 0; i < len(v); i++ {
		if v[i] < '!' || v[i] > '~' {
			return errors.New("may only hold printable ASCII without spaces (Redis refuses others)")
		}
	}
	c.ClientName = v
	return nil
}

func setProtocol(c *Config, v string) error {
	if v != "2" && v != "3" {
		return errors.New("is not 2 or 3 (the RESP version)")
	}
	c.Protocol = int(v[0] - '0')
	return nil
}

func setDB(c *Config, v string) error {
	switch {
	case c.Mode == ModeCluster:
		return errors.New("is not allowed: Redis Cluster has only database 0")
	case c.DB != 0:
		return errors.New("is given in the path as well")
	}
	n, err := strconv.Atoi(v)
	if err != nil || !isDigits(v) {
		return errors.New("is not a whole number >= 0")
	}
	c.DB = n
	return nil
}

// addAddr adds a host, as go-redis's cluster and failover URLs list their
// other nodes or sentinels. A redis:// URL with more than one host is a
// Cluster URL, as with go-redis's ParseClusterURL.
func addAddr(c *Config, v string) error {
	host, port, reason := splitURLHost(v, "")
	switch {
	case reason != "":
		return errors.New(reason)
	case port == "":
		return errors.New("has no port; write host:port")
	}
	c.Addrs = append(c.Addrs, net.JoinHostPort(host, port))
	if c.TLSConfig != nil {
		c.TLSConfig.ServerName = "" // several hosts: each dial verifies its own name
	}
	return nil
}

func setSkipVerify(c *Config, v string) error {
	on, err := parseBool(v)
	if err != nil {
		return err
	}
	if c.TLSConfig == nil {
		return errors.New("applies only to TLS URLs (rediss://)")
	}
	c.TLSConfig.InsecureSkipVerify = on
	return nil
}

func setPipelinePoolSize(c *Config, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return errors.New("is not a whole number")
	}
	if n >= 0 {
		return errors.New("may only be negative (go-redis's opt-out): pipelines share the node's pool, so that max_connections is the whole per-node budget")
	}
	c.PipelinePoolSize = -1
	return nil
}

// parseURLDuration reads a duration as go-redis does: a Go duration such as
// 250ms, or a whole number of seconds.
func parseURLDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, errors.New("is out of range")
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("is not a duration such as 3s or 250ms, or a number of seconds")
	}
	return d, nil
}

// durationParam is one of redisguard's durations: zero means the default.
func durationParam(field func(*Config) *time.Duration) urlParam {
	return urlParam{set: func(c *Config, v string) error {
		d, err := parseURLDuration(v)
		if err != nil {
			return err
		}
		if d < 0 {
			return errors.New("is negative")
		}
		*field(c) = d
		return nil
	}}
}

// setSlowNodeFactor reads SlowNodeFactor: a number, negative to turn
// marking off; Config's validation judges its value.
func setSlowNodeFactor(c *Config, v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return errors.New("is not a number")
	}
	c.SlowNodeFactor = f
	return nil
}

// timeoutParam is one of go-redis's timeouts. go-redis reads zero or a
// negative value as "no timeout", which redisguard does not have.
func timeoutParam(field func(*Config) *time.Duration) urlParam {
	return urlParam{set: func(c *Config, v string) error {
		d, err := parseURLDuration(v)
		if err != nil {
			return err
		}
		if d <= 0 {
			return errors.New("is zero or negative, which go-redis reads as no timeout; redisguard always bounds it (leave the parameter out for the default)")
		}
		*field(c) = d
		return nil
	}}
}

// lifetimeParam is one of go-redis's connection ages, where zero or a
// negative value means "never", as go-redis reads it.
func lifetimeParam(field func(*Config) *time.Duration) urlParam {
	return urlParam{set: func(c *Config, v string) error {
		d, err := parseURLDuration(v)
		if err != nil {
			return err
		}
		if d <= 0 {
			d = -1
		}
		*field(c) = d
		return nil
	}}
}

// noBackoffParam is a retry back-off: with no go-redis retries only "none"
// (zero or negative, as go-redis reads it) means what redisguard does.
func noBackoffParam(field func(*Config) *time.Duration) urlParam {
	return urlParam{set: func(c *Config, v string) error {
		d, err := parseURLDuration(v)
		if err != nil {
			return err
		}
		if d > 0 {
			return errors.New("may only be 0 or negative: redisguard makes no go-redis retries to back off between")
		}
		*field(c) = -1
		return nil
	}}
}

func refusedParam(why string) urlParam {
	return urlParam{set: func(*Config, string) error { return errors.New("is not supported: " + why) }}
}

// replicaReadParam is one of go-redis's switches for reading from
// replicas: off is accepted, on points to redisguard's own option.
func replicaReadParam() urlParam {
	return urlParam{set: func(_ *Config, v string) error {
		on, err := parseBool(v)
		if err != nil {
			return err
		}
		if on {
			return errors.New("is not supported: use read_from to read from replicas")
		}
		return nil
	}}
}

func boolParam(field func(*Config) *bool) urlParam {
	return urlParam{set: func(c *Config, v string) error {
		on, err := parseBool(v)
		if err != nil {
			return err
		}
		*field(c) = on
		return nil
	}}
}

// parseBool accepts what go-redis's URL parser does.
func parseBool(v string) (bool, error) {
	switch v {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, errors.New("is not true, false, 1 or 0")
}

// connectionsParam is a count of connections, bounded as Config bounds it.
func connectionsParam(field func(*Config) *int) urlParam {
	count := countParam(false, field)
	return urlParam{set: func(c *Config, v string) error {
		if err := count.set(c, v); err != nil {
			return err
		}
		if *field(c) > maxConnections {
			return fmt.Errorf("is more than %d: go-redis sets up each pool in proportion to its size", maxConnections)
		}
		return nil
	}}
}

func countParam(negativeOK bool, field func(*Config) *int) urlParam {
	return urlParam{set: func(c *Config, v string) error {
		digits, want := v, "is not a whole number >= 0"
		if negativeOK {
			digits, want = strings.TrimPrefix(v, "-"), "is not a whole number"
		}
		n, err := strconv.Atoi(v)
		if !isDigits(digits) {
			return errors.New(want)
		}
		if err != nil {
			return errors.New("is out of range")
		}
		*field(c) = n
		return nil
	}}
}
