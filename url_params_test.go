package redisguard

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goRedisURLCases are go-redis's own URLs: every parameter of its ParseURL,
// ParseClusterURL and ParseFailoverURL, read with go-redis's meaning.
var goRedisURLCases = []struct {
	name string
	url  string
	want Config
}{
	{"connection and pool parameters",
		"redis://h?protocol=2&client_name=api&dial_timeout=2s&read_timeout=3&write_timeout=4s&pool_timeout=5s" +
			"&pool_size=7&pool_fifo=true&min_idle_conns=2&max_idle_conns=5&max_active_conns=9&max_concurrent_dials=3" +
			"&conn_max_idle_time=10m&conn_max_lifetime=1h&conn_max_lifetime_jitter=5m",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, Protocol: 2, ClientName: "api",
			DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 4 * time.Second, PoolTimeout: 5 * time.Second,
			PoolSize: 7, PoolFIFO: true, MinIdleConns: 2, MaxIdleConns: 5, MaxActiveConns: 9, MaxConcurrentDials: 3,
			ConnMaxIdleTime: 10 * time.Minute, ConnMaxLifetime: time.Hour, ConnMaxLifetimeJitter: 5 * time.Minute}},
	{"old names of the connection ages", "redis://h?idle_timeout=60&max_conn_age=2h",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, ConnMaxIdleTime: time.Minute, ConnMaxLifetime: 2 * time.Hour}},
	{"zero connection ages mean never, as in go-redis", "redis://h?conn_max_idle_time=0&conn_max_lifetime=-1s",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, ConnMaxIdleTime: -1, ConnMaxLifetime: -1}},
	{"jitter is capped at the lifetime", "redis://h?conn_max_lifetime=1m&conn_max_lifetime_jitter=5m",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, ConnMaxLifetime: time.Minute, ConnMaxLifetimeJitter: time.Minute}},
	{"db as a parameter", "redis://h?db=4",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, DB: 4}},
	{"identity and RESP3 switches", "redis://h?disableIdentity=1&identitySuffix=-svc&unstable_resp3=false",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, DisableIdentity: true, IdentitySuffix: "-svc"}},
	{"skip_verify on TLS", "rediss://h?skip_verify=true",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "h", InsecureSkipVerify: true}}},
	{"owned parameters at the values redisguard uses",
		"redis://h?max_retries=-1&min_retry_backoff=-1&max_retry_backoff=0&dialer_retries=1&pipeline_pool_size=-1&context_timeout_enabled=true",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}, MaxRetries: -1, MinRetryBackoff: -1, MaxRetryBackoff: -1,
			DialerRetries: 1, PipelinePoolSize: -1, ContextTimeoutEnabled: true}},
	{"replica switches off", "redis://h?read_only=false&route_by_latency=0&route_randomly=false",
		Config{Mode: ModeAuto, Addrs: []string{"h:6379"}}},
	{"go-redis cluster URL: addr lists the other nodes", "redis://u:pw@n1:7000?addr=n2:7001&addr=[::1]:7002&max_redirects=2&failing_timeout_seconds=30",
		Config{Mode: ModeAuto, Addrs: []string{"n1:7000", "n2:7001", "[::1]:7002"}, Username: "u", Password: "pw",
			MaxRedirects: 2, FailingTimeoutSeconds: 30}},
	{"go-redis cluster URL over TLS verifies each node by its own name", "rediss://n1:7000?addr=n2:7001",
		Config{Mode: ModeAuto, Addrs: []string{"n1:7000", "n2:7001"}, TLSConfig: tls12("")}},
	{"redis+cluster with addr", "redis+cluster://n1:7000?addr=n2:7001",
		Config{Mode: ModeCluster, Addrs: []string{"n1:7000", "n2:7001"}}},
	{"go-redis failover URL: user info for the sentinels, parameters for the master",
		"redis://sent:spw@s1:26379/2?master_name=mymaster&addr=s2:26380&username=app&password=mpw&replica_only=false&use_disconnected_replicas=false",
		Config{Mode: ModeSentinel, Addrs: []string{"s1:26379", "s2:26380"}, MasterName: "mymaster", DB: 2,
			SentinelUsername: "sent", SentinelPassword: "spw", Username: "app", Password: "mpw"}},
	{"go-redis failover URL over TLS", "rediss://s1:26379?master_name=m",
		Config{Mode: ModeSentinel, Addrs: []string{"s1:26379"}, MasterName: "m", TLSConfig: tls12("")}},
}

func TestParseURLGoRedisParameters(t *testing.T) {
	for _, tt := range goRedisURLCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseURL(tt.url)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			u := formatURL(got)
			again, err := ParseURL(u)
			require.NoError(t, err, "formatted as %s", u)
			assert.Equal(t, got, again, "formatted as %s", u)
		})
	}
}

// Every parameter go-redis's three parsers accept is known here: none is
// refused as unknown, whatever value it is given.
func TestParseURLKnowsEveryGoRedisParameter(t *testing.T) {
	goRedis := []string{
		// ParseURL
		"db", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
		"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
		"min_idle_conns", "max_idle_conns", "max_active_conns", "max_concurrent_dials",
		"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size",
		"conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age",
		"conn_max_lifetime_jitter", "skip_verify",
		// ParseClusterURL
		"max_redirects", "read_only", "route_by_latency", "route_by_latency_tolerance", "route_randomly",
		"dialer_retries", "dialer_retry_timeout", "failing_timeout_seconds", "addr",
		// ParseFailoverURL
		"master_name", "replica_only", "use_disconnected_replicas", "username", "password",
		"context_timeout_enabled", "disableIdentity", "identitySuffix", "unstable_resp3",
	}
	for _, name := range goRedis {
		_, ok := urlParams[name]
		assert.True(t, ok, "go-redis URL parameter %s is unknown", name)
	}
}

func TestParseURLGoRedisParameterErrors(t *testing.T) {
	tests := []struct {
		name, url, mention string
	}{
		{"protocol 1", "redis://h?protocol=1", "URL parameter protocol"},
		{"protocol not a number", "redis://h?protocol=resp3", "URL parameter protocol"},
		{"go-redis 'no timeout'", "redis://h?dial_timeout=-1", "URL parameter dial_timeout is zero or negative"},
		{"zero timeout with a unit", "redis://h?write_timeout=0s", "URL parameter write_timeout is zero or negative"},
		{"duration that is neither", "redis://h?conn_max_idle_time=soon", "URL parameter conn_max_idle_time is not a duration"},
		{"seconds that overflow", "redis://h?read_timeout=99999999999999", "URL parameter read_timeout is out of range"},
		{"negative pool_size", "redis://h?pool_size=-1", "URL parameter pool_size"},
		{"pool_size past the limit", "redis://h?pool_size=1048577", "URL parameter pool_size is more than"},
		{"pool_size with max_connections", "redis://h?pool_size=5&max_connections=5", "URL parameter pool_size is go-redis's name for max_connections"},
		{"old and new name together", "redis://h?idle_timeout=1m&conn_max_idle_time=2m", "URL parameter idle_timeout"},
		{"bool that is neither", "redis://h?pool_fifo=yes", "URL parameter pool_fifo is not true, false, 1 or 0"},
		{"negative min_idle_conns", "redis://h?min_idle_conns=-2", "URL parameter min_idle_conns"},
		{"more idle than the pool", "redis://h?min_idle_conns=8&pool_size=4", "MinIdleConns"},
		{"max_active_conns below the pool", "redis://h?max_active_conns=2&max_connections=4", "MaxActiveConns"},
		{"db on a cluster", "redis+cluster://h?db=1", "URL parameter db"},
		{"db in path and parameter", "redis://h/1?db=2", "URL parameter db is given in the path"},
		{"db not a number", "redis://h?db=x", "URL parameter db"},
		{"addr without port", "redis://h?addr=n2", "URL parameter addr has no port"},
		{"addr that is no host", "redis://h?addr=a%20b:1", "URL parameter addr"},
		{"skip_verify without TLS", "redis://h?skip_verify=true", "URL parameter skip_verify applies only to TLS"},
		{"go-redis retries", "redis://h?max_retries=3", "URL parameter max_retries may only be -1"},
		{"go-redis default retries", "redis://h?max_retries=0", "URL parameter max_retries may only be -1"},
		{"retry back-off", "redis://h?max_retry_backoff=512ms", "URL parameter max_retry_backoff may only be 0"},
		{"dial retries", "redis+cluster://h?dialer_retries=5", "URL parameter dialer_retries may only be 1"},
		{"dial retry wait", "redis://h?dialer_retry_timeout=100ms", "URL parameter dialer_retry_timeout is not supported"},
		{"pipeline pool", "redis://h?pipeline_pool_size=10", "URL parameter pipeline_pool_size may only be negative"},
		{"go-redis default pipeline pool", "redis://h?pipeline_pool_size=0", "URL parameter pipeline_pool_size may only be negative"},
		{"pipeline buffers", "redis://h?pipeline_read_buffer_size=65536", "URL parameter pipeline_read_buffer_size is not supported"},
		{"pipeline write buffers", "redis://h?pipeline_write_buffer_size=65536", "URL parameter pipeline_write_buffer_size is not supported"},
		{"context deadlines off", "redis://h?context_timeout_enabled=false", "URL parameter context_timeout_enabled cannot be false"},
		{"cluster replica reads", "redis+cluster://h?read_only=true", "URL parameter read_only is not supported: use read_from"},
		{"latency routing", "redis://h?route_by_latency=1", "URL parameter route_by_latency is not supported: use read_from"},
		{"random routing", "redis://h?route_randomly=true", "use read_from"},
		{"latency tolerance", "redis://h?route_by_latency_tolerance=5ms", "URL parameter route_by_latency_tolerance is not supported"},
		{"sentinel replicas", "redis://h?master_name=m&replica_only=true", "URL parameter replica_only is not supported: use read_from"},
		{"disconnected replicas", "redis://h?master_name=m&use_disconnected_replicas=1", "use read_from"},
		{"master_name on redis+sentinel", "redis+sentinel://h/m?master_name=n", "URL parameter master_name belongs to go-redis's failover form"},
		{"master_name on a cluster", "redis+cluster://h?master_name=m", "URL parameter master_name"},
		{"password parameter without master_name", "redis://h?password=x", "URL parameter password belongs to go-redis's failover form"},
		{"failing timeout on sentinel", "redis+sentinel://h/m?failing_timeout_seconds=3", "URL parameter failing_timeout_seconds applies only to Cluster"},
		{"db not a number in the failover form", "redis://h?master_name=m&db=x", "URL parameter db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkURLError(t, tt.url, tt.mention) })
	}
}

// The failover form's password parameter is a secret like the user info's:
// no error quotes it, wherever the parser chokes.
func TestParseURLGoRedisPasswordsStaySecret(t *testing.T) {
	const pw = "Tr0ub4dor"
	for _, u := range []string{
		"redis://s1?master_name=m&password=" + pw + "&" + pw + "=1",
		"redis://s1?master_name=m&password=" + pw + "&dial_timeout=" + pw,
		"redis://s1?master_name=m&password=" + pw + "&password=" + pw,
		"redis://:" + pw + "@s1?master_name=m&addr=" + pw,
		"redis://s1?password=" + pw,
	} {
		_, err := ParseURL(u)
		require.Error(t, err, u)
		assert.True(t, errors.Is(err, ErrInvalidConfig))
		assert.NotContains(t, err.Error(), pw)
		assert.NotContains(t, err.Error(), "Tr0u")
	}
}
