package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
)

// ownedOptions are the redis.UniversalOptions fields whose value
// redisguard sets itself (docs/options.md says why); Config has them so that
// go-redis options compile, and accepts only values that agree.
var ownedOptions = []string{
	"MaxRetries", "MinRetryBackoff", "MaxRetryBackoff", "ContextTimeoutEnabled", "DialerRetries",
	"DialerRetryTimeout", "PipelinePoolSize", "PipelineReadBufferSize", "PipelineWriteBufferSize",
	"PoolSize",
}

// coveredOptions are the redis.UniversalOptions fields Config has under
// another name.
var coveredOptions = map[string]string{
	"IsClusterMode":  "Mode",
	"ReadOnly":       "read_from",
	"RouteByLatency": "read_from",
	"RouteRandomly":  "read_from",
}

// Config carries every redis.UniversalOptions field with go-redis's name
// and type, or covers it with one of its own; and core.options hands each
// field redisguard does not own to go-redis unchanged.
func TestConfigCarriesEveryUniversalOption(t *testing.T) {
	ct := reflect.TypeOf(Config{})
	ut := reflect.TypeOf(redis.UniversalOptions{})
	var cfg Config
	cv := reflect.ValueOf(&cfg).Elem()
	var passed []string
	for i := 0; i < ut.NumField(); i++ {
		uf := ut.Field(i)
		if by, ok := coveredOptions[uf.Name]; ok {
			t.Logf("%s is covered by %s", uf.Name, by)
			continue
		}
		cf, ok := ct.FieldByName(uf.Name)
		if !assert.True(t, ok, "Config has no %s", uf.Name) {
			continue
		}
		assert.Equal(t, uf.Type, cf.Type, "Config.%s has another type than go-redis's", uf.Name)
		if contains(ownedOptions, uf.Name) {
			continue
		}
		if v, ok := sampleValue(cf.Type); ok {
			cv.FieldByIndex(cf.Index).Set(v)
			passed = append(passed, uf.Name)
		}
	}
	uo := reflect.ValueOf(newCore(cfg, clock.Real()).options(4)).Elem()
	for _, name := range passed {
		want := cv.FieldByName(name)
		got := uo.FieldByName(name)
		if want.Kind() == reflect.Func {
			assert.False(t, got.IsNil(), "options() drops %s", name)
			continue
		}
		assert.Equal(t, want.Interface(), got.Interface(), "options() does not pass %s through", name)
	}
	assert.Greater(t, len(passed), 30, "fields checked for pass-through")
}

// sampleValue is a non-zero value of t, for the kinds Config's go-redis
// fields have; false for an interface, which has no value to make.
func sampleValue(t reflect.Type) (reflect.Value, bool) {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString("x")
	case reflect.Slice:
		v.Set(reflect.MakeSlice(t, 1, 1))
	case reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
	case reflect.Func:
		v.Set(reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value { return nil }))
	default:
		return v, false
	}
	return v, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type fakeCache struct{ redis.Cache }

func TestGoRedisOptionsValidation(t *testing.T) {
	const secret = "s3cret-password"
	creds := func() (string, string) { return "u", secret }
	csc := &redis.ClientSideCacheConfig{MaxEntries: 10}
	one, two := []string{"a:1"}, []string{"a:1", "b:2"}
	slots := func(context.Context) ([]redis.ClusterSlot, error) { return nil, nil }
	tests := []struct {
		name  string
		cfg   Config
		field string // "" when the Config is valid
	}{
		{"Protocol 2", Config{Addrs: one, Protocol: 2}, ""},
		{"Protocol 4", Config{Addrs: one, Protocol: 4}, "Protocol"},
		{"PoolSize alone is MaxConnections", Config{Addrs: one, PoolSize: 12}, ""},
		{"PoolSize equal to MaxConnections", Config{Addrs: one, PoolSize: 12, MaxConnections: 12}, ""},
		{"PoolSize against MaxConnections", Config{Addrs: one, PoolSize: 12, MaxConnections: 8}, "PoolSize"},
		{"PoolSize past the limit", Config{Addrs: one, PoolSize: maxConnections + 1}, "PoolSize"},
		{"negative PoolSize", Config{Addrs: one, PoolSize: -1}, "PoolSize"},
		{"MinIdleConns within the pool", Config{Addrs: one, MaxConnections: 4, MinIdleConns: 4}, ""},
		{"MinIdleConns beyond the pool", Config{Addrs: one, MaxConnections: 4, MinIdleConns: 5}, "MinIdleConns"},
		{"negative MaxIdleConns", Config{Addrs: one, MaxIdleConns: -1}, "MaxIdleConns"},
		{"MaxActiveConns at the pool", Config{Addrs: one, MaxConnections: 4, MaxActiveConns: 4}, ""},
		{"MaxActiveConns below the pool", Config{Addrs: one, MaxConnections: 4, MaxActiveConns: 3}, "MaxActiveConns"},
		{"negative MaxConcurrentDials", Config{Addrs: one, MaxConcurrentDials: -1}, "MaxConcurrentDials"},
		{"ConnMaxIdleTime never", Config{Addrs: one, ConnMaxIdleTime: -1}, ""},
		{"negative ConnMaxLifetimeJitter", Config{Addrs: one, ConnMaxLifetimeJitter: -time.Second}, "ConnMaxLifetimeJitter"},
		{"negative ReadBufferSize", Config{Addrs: one, ReadBufferSize: -1}, "ReadBufferSize"},
		{"negative WriteBufferSize", Config{Addrs: one, WriteBufferSize: -1}, "WriteBufferSize"},
		{"negative FailingTimeoutSeconds", Config{Addrs: one, FailingTimeoutSeconds: -1}, "FailingTimeoutSeconds"},

		{"MaxRetries -1", Config{Addrs: one, MaxRetries: -1}, ""},
		{"MaxRetries 3", Config{Addrs: one, MaxRetries: 3}, "MaxRetries"},
		{"MaxRetries -2", Config{Addrs: one, MaxRetries: -2}, "MaxRetries"},
		{"no retry back-off", Config{Addrs: one, MinRetryBackoff: -1, MaxRetryBackoff: -1}, ""},
		{"MinRetryBackoff", Config{Addrs: one, MinRetryBackoff: 8 * time.Millisecond}, "MinRetryBackoff"},
		{"MaxRetryBackoff", Config{Addrs: one, MaxRetryBackoff: time.Second}, "MaxRetryBackoff"},
		{"ContextTimeoutEnabled", Config{Addrs: one, ContextTimeoutEnabled: true}, ""},
		{"DialerRetries 1", Config{Addrs: one, DialerRetries: 1}, ""},
		{"DialerRetries 5", Config{Addrs: one, DialerRetries: 5}, "DialerRetries"},
		{"negative DialerRetries", Config{Addrs: one, DialerRetries: -1}, "DialerRetries"},
		{"DialerRetryTimeout", Config{Addrs: one, DialerRetryTimeout: 100 * time.Millisecond}, "DialerRetryTimeout"},
		{"PipelinePoolSize opt-out", Config{Addrs: one, PipelinePoolSize: -1}, ""},
		{"PipelinePoolSize", Config{Addrs: one, PipelinePoolSize: 10}, "PipelinePoolSize"},
		{"PipelineReadBufferSize", Config{Addrs: one, PipelineReadBufferSize: 1 << 17}, "PipelineReadBufferSize"},
		{"PipelineWriteBufferSize", Config{Addrs: one, PipelineWriteBufferSize: 1 << 17}, "PipelineWriteBufferSize"},
		{"maintenance notifications disabled", Config{Addrs: one, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}, ""},
		{"maintenance notifications auto", Config{Addrs: one, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeAuto}}, ""},
		{"maintenance notifications by default", Config{Addrs: one, MaintNotificationsConfig: &maintnotifications.Config{RelaxedTimeout: time.Second}}, ""},
		{"maintenance notifications enabled", Config{Addrs: one, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeEnabled}}, ""},
		{"maintenance notifications enabled in Cluster mode", Config{Addrs: []string{"a:1", "b:2"}, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeEnabled}}, ""},
		{"maintenance notifications enabled in Sentinel mode", Config{Addrs: one, MasterName: "m", MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeEnabled}}, "MaintNotificationsConfig"},
		{"maintenance notifications auto in Sentinel mode", Config{Addrs: one, MasterName: "m", MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeAuto}}, ""},
		{"maintenance notifications enabled on RESP2", Config{Addrs: one, Protocol: 2, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeEnabled}}, "MaintNotificationsConfig"},
		{"maintenance notifications unknown mode", Config{Addrs: one, MaintNotificationsConfig: &maintnotifications.Config{Mode: "sometimes"}}, "MaintNotificationsConfig"},
		{"maintenance notifications unknown endpoint type", Config{Addrs: one, MaintNotificationsConfig: &maintnotifications.Config{EndpointType: "carrier-pigeon"}}, "MaintNotificationsConfig"},

		{"cache on one server", Config{Addrs: one, ClientSideCacheConfig: csc, ClientSideCacheCoalesceMisses: true}, ""},
		{"explicit cache", Config{Addrs: one, ClientSideCache: fakeCache{}}, ""},
		{"cache with fixed credentials", Config{Addrs: one, ClientSideCacheConfig: csc, Username: "u", Password: secret}, ""},
		{"cache in Cluster mode", Config{Addrs: []string{"a:1", "b:2"}, ClientSideCacheConfig: csc}, "ClientSideCacheConfig"},
		{"cache in Sentinel mode", Config{Addrs: one, MasterName: "m", ClientSideCacheConfig: csc}, "ClientSideCacheConfig"},
		{"cache on RESP2", Config{Addrs: one, Protocol: 2, ClientSideCacheConfig: csc}, "ClientSideCacheConfig"},
		{"cache on another database", Config{Addrs: one, DB: 1, ClientSideCacheConfig: csc}, "ClientSideCacheConfig"},
		{"cache with a credentials provider", Config{Addrs: one, CredentialsProvider: creds, ClientSideCache: fakeCache{}}, "ClientSideCacheConfig"},
		{"cache with a push processor", Config{Addrs: one, ClientSideCacheConfig: csc, PushNotificationProcessor: push.NewVoidProcessor()}, "ClientSideCacheConfig"},
		{"unknown cache strategy", Config{Addrs: one, ClientSideCacheConfig: csc, ClientSideCacheStrategy: 3}, "ClientSideCacheStrategy"},
		{"cache knob without a cache", Config{Addrs: one, ClientSideCacheRefreshOnInvalidate: true}, "ClientSideCacheRefreshOnInvalidate"},
		{"cache window without a cache", Config{Addrs: one, ClientSideCacheInvalidationBatchWindow: time.Millisecond}, "ClientSideCacheInvalidationBatchWindow"},
		{"negative cache window", Config{Addrs: one, ClientSideCacheConfig: csc, ClientSideCacheInvalidationBatchWindow: -1}, "ClientSideCacheInvalidationBatchWindow"},

		{"NoRedirects", Config{Addrs: two, MaxRedirects: NoRedirects}, ""},
		{"MaxRedirects -2", Config{Addrs: two, MaxRedirects: -2}, "MaxRedirects"},
		{"ClusterSlots", Config{Addrs: two, ClusterSlots: slots}, ""},
		{"ClusterSlots on one server", Config{Addrs: one, ClusterSlots: slots}, "ClusterSlots"},
		{"ClusterSlots in Sentinel mode", Config{Addrs: one, MasterName: "m", ClusterSlots: slots}, "ClusterSlots"},
		{"ClusterStateReloadInterval", Config{Addrs: two, ClusterStateReloadInterval: time.Second}, ""},
		{"negative ClusterStateReloadInterval", Config{Addrs: two, ClusterStateReloadInterval: -1}, "ClusterStateReloadInterval"},
		{"ClusterStateReloadInterval on one server", Config{Addrs: one, ClusterStateReloadInterval: time.Second}, "ClusterStateReloadInterval"},
		{"DisableRoutingPolicies", Config{Addrs: two, DisableRoutingPolicies: true}, ""},
		{"DisableRoutingPolicies on one server", Config{Addrs: one, DisableRoutingPolicies: true}, "DisableRoutingPolicies"},
		{"ShardPicker", Config{Addrs: two, ShardPicker: firstShard{}}, ""},
		{"ShardPicker on one server", Config{Addrs: one, ShardPicker: firstShard{}}, "ShardPicker"},
		{"RouteByLatencyTolerance", Config{Addrs: two, ReadFrom: ReadFromNearest, RouteByLatencyTolerance: time.Millisecond}, ""},
		{"RouteByLatencyTolerance without ReadFromNearest", Config{Addrs: two, RouteByLatencyTolerance: time.Millisecond}, "RouteByLatencyTolerance"},
		{"negative RouteByLatencyTolerance", Config{Addrs: two, ReadFrom: ReadFromNearest, RouteByLatencyTolerance: -1}, "RouteByLatencyTolerance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Mode = ModeStandalone
			if len(tt.cfg.Addrs) > 1 {
				tt.cfg.Mode = ModeCluster
			}
			if tt.cfg.MasterName != "" {
				tt.cfg.Mode = ModeSentinel
			}
			_, err := tt.cfg.resolve()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalidConfig), "%q does not wrap ErrInvalidConfig", err)
			assert.Contains(t, err.Error(), tt.field)
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

// firstShard is a ShardPicker that always picks the first node.
type firstShard struct{}

func (firstShard) Next(int) int { return 0 }

// The go-redis ClusterOptions fields reach every cluster client a Client
// runs: the ordinary one and the long one.
func TestClusterOptionsReachTheClusterClients(t *testing.T) {
	srv := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2})
	var calls atomic.Int32
	slots := func(ctx context.Context) ([]redis.ClusterSlot, error) {
		calls.Add(1)
		return srv.Masters[0].Admin().ClusterSlots(ctx).Result()
	}
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: srv.ClientAddrs(), ClusterSlots: slots,
		ClusterStateReloadInterval: 7 * time.Second, DisableRoutingPolicies: true, ShardPicker: firstShard{}})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Positive(t, calls.Load(), "the slot map comes from ClusterSlots")
	long, _ := longClient(c.core, c.nodes, c.hooks)()
	t.Cleanup(func() { _ = long.Close() })
	for name, cc := range map[string]*redis.ClusterClient{"ordinary": c.ClusterClient(), "long": long.(*redis.ClusterClient)} {
		opt := cc.Options()
		assert.Equal(t, 7*time.Second, opt.ClusterStateReloadInterval, name)
		assert.True(t, opt.DisableRoutingPolicies, name)
		assert.Equal(t, firstShard{}, opt.ShardPicker, name)
		assert.NotNil(t, opt.ClusterSlots, name)
	}
}

// A server that ModeAuto finds to be a single server refuses the
// Cluster-mode options.
func TestDetectedStandaloneRefusesClusterOptions(t *testing.T) {
	cfg := Config{Addrs: []string{"a:1"}, ShardPicker: firstShard{}}
	err := applyDetected(&cfg, ModeStandalone)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "ShardPicker")
}

// PoolSize, go-redis's name for MaxConnections, sizes the pools when
// MaxConnections is not set.
func TestPoolSizeIsMaxConnections(t *testing.T) {
	cfg, err := Config{Addrs: []string{"a:1"}, PoolSize: 12}.resolve()
	require.NoError(t, err)
	assert.Equal(t, 12, cfg.MaxConnections)
	assert.Equal(t, 12, cfg.MaxLongConnections)
}

// A server that ModeAuto finds to be a cluster node cannot take a
// client-side cache, which go-redis v9.23 keeps only on single servers.
func TestDetectedClusterRefusesTheCache(t *testing.T) {
	cfg := Config{Addrs: []string{"a:1"}, ClientSideCacheConfig: &redis.ClientSideCacheConfig{}}
	err := applyDetected(&cfg, ModeCluster)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "ClientSideCacheConfig")
	require.NoError(t, applyDetected(&Config{Addrs: []string{"a:1"}, ClientSideCacheConfig: &redis.ClientSideCacheConfig{}}, ModeStandalone))
}

// The long client and the one-off clients keep no idle connections and no
// cache; probes keep the credentials but not OnConnect, and dedicated
// connections keep OnConnect.
func TestOneOffClientsDropPoolWarming(t *testing.T) {
	onConnect := func(context.Context, *redis.Conn) error { return nil }
	creds := func() (string, string) { return "u", "p" }
	cfg := Config{Addrs: []string{"a:1"}, MinIdleConns: 3, MaxActiveConns: 100, OnConnect: onConnect, CredentialsProvider: creds,
		ClientSideCacheConfig: &redis.ClientSideCacheConfig{}, ClientSideCacheCoalesceMisses: true}
	uo := newCore(cfg, clock.Real()).options(10)
	assert.Equal(t, 3, uo.MinIdleConns)
	longOnly(uo)
	assert.Zero(t, uo.MinIdleConns)
	assert.Zero(t, uo.MaxActiveConns)
	assert.Nil(t, uo.ClientSideCacheConfig)
	assert.False(t, uo.ClientSideCacheCoalesceMisses)
	assert.NotNil(t, uo.OnConnect, "long calls carry the caller's commands")
	assert.NotNil(t, uo.CredentialsProvider)
}

// clientLines returns the CLIENT LIST lines of srv's connections but the
// one asking.
func clientLines(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	list, err := srv.Admin().ClientList(testCtx(t, 5*time.Second)).Result()
	require.NoError(t, err)
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if !strings.Contains(line, " cmd=client|list ") {
			lines = append(lines, line)
		}
	}
	return lines
}

// go-redis's connection options reach the server: CLIENT LIST shows the
// idle connections MinIdleConns keeps (and no others: the long client and
// probes keep none), and on the connections commands used, the name and
// the protocol. OnConnect runs on ordinary and dedicated connections but
// not on a probe's.
func TestGoRedisOptionsTakeEffect(t *testing.T) {
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			srv := redistest.StartServer(t)
			name := fmt.Sprintf("rg-options-%d", protocol)
			var connects, dials atomic.Int64
			c := newTestClient(t, Config{Addrs: []string{srv.Addr}, Protocol: protocol, ClientName: name, MinIdleConns: 3,
				OnConnect: func(ctx context.Context, cn *redis.Conn) error {
					connects.Add(1)
					return cn.Ping(ctx).Err()
				},
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				}})
			// go-redis dials the idle connections in the background and
			// hands them their handshake when first used.
			redistest.WaitFor(t, 5*time.Second, "three idle connections", func() error {
				if n := len(clientLines(t, srv)); n != 3 {
					return fmt.Errorf("%d connections", n)
				}
				return nil
			})

			ctx := testCtx(t, 5*time.Second)
			require.NoError(t, c.Set(ctx, "options:k", "v", 0).Err())
			require.NoError(t, c.Get(ctx, "options:k").Err())
			var named int
			for _, line := range clientLines(t, srv) {
				if strings.Contains(line, " name="+name+" ") {
					named++
					assert.Contains(t, line, fmt.Sprintf(" resp=%d", protocol))
				}
			}
			assert.Positive(t, named, "a connection named %s", name)
			assert.Equal(t, int64(named), connects.Load(), "OnConnect ran once per connection set up")

			// A blocking call runs on a dedicated connection, which carries
			// the caller's command: OnConnect runs there too.
			before := connects.Load()
			require.ErrorIs(t, c.BLPop(ctx, 50*time.Millisecond, "options:empty").Err(), redis.Nil)
			assert.Greater(t, connects.Load(), before, "OnConnect runs on the dedicated connection")

			// A probe dials as the node clients do, and carries no command
			// of the caller's.
			before, beforeDials := connects.Load(), dials.Load()
			_, err := probeAddr(ctx, c.probeOpt, srv.Addr, time.Second, "ping")
			require.NoError(t, err)
			assert.Equal(t, before, connects.Load(), "OnConnect does not run for probes")
			assert.Equal(t, beforeDials+1, dials.Load(), "the probe dials through Dialer")
		})
	}
}

// A requirepass server accepts a CredentialsProvider, on ordinary
// connections and on the recovery probe: a node whose breaker opened
// recovers through probes that take their credentials from the provider.
func TestCredentialsProviderAuthenticatesClientsAndProbes(t *testing.T) {
	const pw = "rotating-token-1"
	srv := redistest.StartServer(t)
	require.NoError(t, srv.Admin().ConfigSet(testCtx(t, 5*time.Second), "requirepass", pw).Err())

	providers := map[string]func(calls *atomic.Int64) Config{
		"CredentialsProvider": func(calls *atomic.Int64) Config {
			return Config{CredentialsProvider: func() (string, string) { calls.Add(1); return "default", pw }}
		},
		"CredentialsProviderContext": func(calls *atomic.Int64) Config {
			return Config{CredentialsProviderContext: func(context.Context) (string, string, error) { calls.Add(1); return "default", pw, nil }}
		},
	}
	for name, base := range providers {
		t.Run(name, func(t *testing.T) {
			var calls, atOpen, atHalfOpen atomic.Int64
			cfg := base(&calls)
			cfg.Addrs = []string{srv.Addr}
			cfg.ReadTimeout = 200 * time.Millisecond
			cfg.NodeFailureThreshold = 2
			cfg.OnEvent = func(e Event) {
				switch e.Kind {
				case EventBreakerOpened:
					atOpen.Store(calls.Load())
				case EventBreakerHalfOpen:
					atHalfOpen.Store(calls.Load())
				}
			}
			c := newTestClient(t, cfg)
			ctx := testCtx(t, 30*time.Second)
			require.NoError(t, c.Set(ctx, "cred:k", "v", 0).Err())
			assert.Positive(t, calls.Load(), "the provider gave the connection its credentials")

			// The probe's handshake is the node clients': with the provider's
			// password a PING is answered with PONG, not NOAUTH.
			_, err := probeAddr(ctx, c.probeOpt, srv.Addr, time.Second, "ping")
			require.NoError(t, err)

			srv.Pause(t)
			redistest.WaitFor(t, 10*time.Second, "the breaker to open", func() error {
				err := c.Get(ctx, "cred:k").Err()
				if !errors.Is(err, ErrNodeUnavailable) {
					return fmt.Errorf("GET: %v", err)
				}
				return nil
			})
			srv.Resume(t)
			redistest.WaitFor(t, 15*time.Second, "recovery", func() error { return c.Get(ctx, "cred:k").Err() })
			// Between the opening and the half-open state only probes dial.
			assert.Greater(t, atHalfOpen.Load(), atOpen.Load(), "the probes asked the provider for credentials")
		})
	}
}

// go-redis's client-side cache works through redisguard: repeated reads are
// served locally; a value another client changes is served stale only until
// its invalidation arrives (go-redis drains them every 5ms), never after; and
// a restarted server leaves no stale entry behind. go-redis alone, with the
// same cache, runs beside it for comparison.
func TestClientSideCacheStaysFresh(t *testing.T) {
	srv := redistest.StartServer(t)
	cache := func() *redis.ClientSideCacheConfig { return &redis.ClientSideCacheConfig{MaxEntries: 1000} }
	guard := newTestClient(t, Config{Addrs: []string{srv.Addr}, ClientSideCacheConfig: cache()})
	require.Equal(t, ModeStandalone, guard.Mode())
	stock := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientSideCacheConfig: cache()})
	t.Cleanup(func() { _ = stock.Close() })
	clients := []struct {
		name string
		c    redis.UniversalClient
	}{{"redisguard", guard}, {"go-redis", stock}}
	other := srv.Admin()
	ctx := testCtx(t, 30*time.Second)
	const key = "csc:k"

	// fresh reads key through both clients, in turn, until each returns
	// want or 5s pass, and reports for each the first answer it got and
	// how long until it held want.
	type reading struct {
		first string
		took  time.Duration // -1 if want never came
	}
	fresh := func(want string) []reading {
		out := make([]reading, len(clients))
		start := time.Now()
		for i := range out {
			out[i].took = -1
		}
		for time.Since(start) < 5*time.Second {
			done := true
			for i, cl := range clients {
				if out[i].took >= 0 {
					continue
				}
				done = false
				got, err := cl.c.Get(ctx, key).Result()
				if err != nil {
					continue
				}
				if out[i].first == "" {
					out[i].first = got
				}
				if got == want {
					out[i].took = time.Since(start)
				}
			}
			if done {
				break
			}
			time.Sleep(time.Millisecond)
		}
		for i, cl := range clients {
			t.Logf("%s: first answer %q, %q after %v", cl.name, out[i].first, want, out[i].took)
		}
		return out
	}

	require.NoError(t, guard.Set(ctx, key, "v1", 0).Err())
	for _, cl := range clients {
		require.Equal(t, "v1", cl.c.Get(ctx, key).Val())
	}
	before := commandStat(t, srv, "get")
	for i := 0; i < 20; i++ {
		require.Equal(t, "v1", guard.Get(ctx, key).Val())
	}
	assert.Less(t, commandStat(t, srv, "get")-before, 5, "repeated reads are served by the cache")

	require.NoError(t, other.Set(ctx, key, "v2", 0).Err())
	got := fresh("v2")
	require.GreaterOrEqual(t, got[0].took, time.Duration(0), "redisguard never read another client's write")
	assert.Less(t, got[0].took, 2*time.Second, "the invalidation arrives within the drain interval, not a timeout")
	// Once fresh, it stays fresh: the old value never comes back.
	for i := 0; i < 20; i++ {
		require.Equal(t, "v2", guard.Get(ctx, key).Val())
	}

	// A restart loses the data and the tracking; the cached v2 must not
	// outlive it.
	srv.Restart(t)
	require.NoError(t, other.Set(ctx, key, "v3", 0).Err())
	got = fresh("v3")
	assert.Equal(t, "v3", got[0].first, "the first answer after the restart is the server's, not the cache's")
	for i := 0; i < 20; i++ {
		require.Equal(t, "v3", guard.Get(ctx, key).Val())
	}
}

// In Cluster mode the options reach every node client go-redis builds:
// each master keeps MinIdleConns connections, and the ones commands used
// carry the name and the protocol, set up by OnConnect.
func TestGoRedisOptionsTakeEffectInCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	const name = "rg-options-cluster"
	var connects atomic.Int64
	c := newTestClient(t, Config{Addrs: cl.Addrs(), Protocol: 3, ClientName: name, MinIdleConns: 2,
		OnConnect: func(context.Context, *redis.Conn) error { connects.Add(1); return nil }})
	ctx := testCtx(t, 10*time.Second)
	for _, m := range cl.Masters {
		key := cl.KeyOn(t, m, "options")
		require.NoError(t, c.Set(ctx, key, "v", 0).Err())
		require.NoError(t, c.Get(ctx, key).Err())
	}
	var named int
	for _, m := range cl.Masters {
		redistest.WaitFor(t, 5*time.Second, "idle connections on "+m.Addr, func() error {
			if n := len(clientLines(t, m)); n < 2 {
				return fmt.Errorf("%d connections", n)
			}
			return nil
		})
		var here int
		for _, line := range clientLines(t, m) {
			if strings.Contains(line, " name="+name+" ") {
				here++
				assert.Contains(t, line, " resp=3")
			}
		}
		assert.Positive(t, here, "a connection named %s on %s", name, m.Addr)
		named += here
	}
	assert.GreaterOrEqual(t, connects.Load(), int64(named), "OnConnect ran on every connection set up")
}

// In Sentinel mode the dialer reaches the master and the sentinels, and
// the questions redisguard asks the sentinels itself dial through it too,
// without OnConnect, which is written for data nodes.
func TestGoRedisOptionsTakeEffectInSentinel(t *testing.T) {
	g := redistest.StartSentinel(t)
	var mu sync.Mutex
	dials := map[string]int{}
	var connects atomic.Int64
	c := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs(), ClientName: "rg-options-sentinel",
		OnConnect: func(context.Context, *redis.Conn) error { connects.Add(1); return nil },
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dials[addr]++
			mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	count := func(addr string) int {
		mu.Lock()
		defer mu.Unlock()
		return dials[addr]
	}
	ctx := testCtx(t, 10*time.Second)
	require.NoError(t, c.Set(ctx, "options:k", "v", 0).Err())
	assert.Positive(t, count(g.Master.Addr), "the master is dialled through Dialer")
	var named int
	for _, line := range clientLines(t, g.Master) {
		if strings.Contains(line, " name=rg-options-sentinel ") {
			named++
		}
	}
	assert.Positive(t, named, "the master's connections carry the client name")

	sentinel := g.Addrs()[0]
	before, beforeConnects := count(sentinel), connects.Load()
	addr, err := c.sentinel.ask(ctx, sentinel)
	require.NoError(t, err)
	assert.Equal(t, g.Master.Addr, addr)
	assert.Equal(t, before+1, count(sentinel), "redisguard's own sentinel question dials through Dialer")
	assert.Equal(t, beforeConnects, connects.Load(), "and runs no OnConnect")
}
