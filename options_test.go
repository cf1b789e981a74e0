package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// An address without a port fails validation, not the first dial, and the
// error shows the fix.
func TestAddressWithoutPortSaysWhatToWrite(t *testing.T) {
	_, err := NewClient(Config{Addrs: []string{"redis-cluster"}})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), `"redis-cluster:6379"`)
}

func TestInvalidConfig(t *testing.T) {
	const secret = "s3cret-password"
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no addresses", Config{}, "Addrs"},
		{"empty address", Config{Addrs: []string{""}}, "Addrs"},
		{"blank address among others", Config{Addrs: []string{"a:1", "  "}}, "Addrs"},
		{"address without a port", Config{Addrs: []string{"redis-cluster"}}, "Addrs"},
		{"address with an empty port", Config{Addrs: []string{"a:1", "redis:"}}, "Addrs"},
		{"IPv6 address without a port", Config{Addrs: []string{"[::1]"}}, "Addrs"},
		{"negative MaxConnections", Config{Addrs: []string{"a:1"}, MaxConnections: -1}, "MaxConnections"},
		{"negative MaxLongConnections", Config{Addrs: []string{"a:1"}, MaxLongConnections: -3}, "MaxLongConnections"},
		{"MaxConnections beyond go-redis's pool", Config{Addrs: []string{"a:1"}, MaxConnections: 1e15}, "MaxConnections"},
		{"MaxConnections past the limit", Config{Addrs: []string{"a:1"}, MaxConnections: maxConnections + 1}, "MaxConnections"},
		{"MaxLongConnections that overflows the long pool", Config{Addrs: []string{"a:1"}, MaxLongConnections: 1 << 62}, "MaxLongConnections"},
		{"MaxLongConnections past the limit", Config{Addrs: []string{"a:1"}, MaxLongConnections: maxConnections + 1}, "MaxLongConnections"},
		{"MaxConnections past the limit, as the default of MaxLongConnections", Config{Addrs: []string{"a:1"}, MaxConnections: math.MaxInt32}, "MaxConnections"},
		{"negative DialTimeout", Config{Addrs: []string{"a:1"}, DialTimeout: -time.Second}, "DialTimeout"},
		{"negative ReadTimeout", Config{Addrs: []string{"a:1"}, ReadTimeout: -1}, "ReadTimeout"},
		{"negative WriteTimeout", Config{Addrs: []string{"a:1"}, WriteTimeout: -1}, "WriteTimeout"},
		{"negative PoolTimeout", Config{Addrs: []string{"a:1"}, PoolTimeout: -1}, "PoolTimeout"},
		{"negative NodeRecoveryTime", Config{Addrs: []string{"a:1"}, NodeRecoveryTime: -1}, "NodeRecoveryTime"},
		{"MaxRedirects below NoRedirects", Config{Addrs: []string{"a:1"}, MaxRedirects: -2}, "MaxRedirects"},
		{"ClusterSlots outside Cluster mode, with no addresses", Config{Mode: ModeStandalone, ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) { return nil, nil }}, "Addrs"},
		{"negative ClusterNodeTimeout", Config{Addrs: []string{"a:1"}, ClusterNodeTimeout: -1}, "ClusterNodeTimeout"},
		{"negative DB", Config{Addrs: []string{"a:1"}, DB: -1}, "DB"},
		{"sentinel without master name", Config{Mode: ModeSentinel, Addrs: []string{"a:1"}}, "MasterName"},
		{"master name with cluster", Config{Mode: ModeCluster, MasterName: "m", Addrs: []string{"a:1"}}, "MasterName"},
		{"standalone with several addresses", Config{Mode: ModeStandalone, Addrs: []string{"a:1", "b:2"}}, "Addrs"},
		{"cluster with a DB", Config{Mode: ModeCluster, Addrs: []string{"a:1"}, DB: 2}, "DB"},
		{"unknown mode", Config{Mode: Mode(42), Addrs: []string{"a:1"}}, "Mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Password = secret
			tt.cfg.SentinelPassword = secret
			c, err := NewClient(tt.cfg)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.True(t, errors.Is(err, ErrInvalidConfig), "error %q does not wrap ErrInvalidConfig", err)
			assert.Contains(t, err.Error(), tt.field)
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{Addrs: []string{"localhost:6379"}}.resolve()
	require.NoError(t, err)
	assert.Equal(t, ModeAuto, cfg.Mode, "one address: NewClient asks the server")
	assert.Equal(t, DefaultDialTimeout, cfg.DialTimeout)
	assert.Equal(t, DefaultReadTimeout, cfg.ReadTimeout)
	assert.Equal(t, cfg.ReadTimeout, cfg.WriteTimeout)
	assert.Equal(t, DefaultMaxConnections(), cfg.MaxConnections)
	assert.Equal(t, cfg.MaxConnections, cfg.MaxLongConnections)
	assert.Equal(t, cfg.ReadTimeout+time.Second, cfg.PoolTimeout)
	assert.Equal(t, DefaultNodeFailureThreshold, cfg.NodeFailureThreshold)
	assert.Equal(t, DefaultNodeRecoveryTime, cfg.NodeRecoveryTime)
	assert.Equal(t, DefaultMaxRedirects, cfg.MaxRedirects)
	assert.Equal(t, DefaultClusterNodeTimeout, cfg.ClusterNodeTimeout)
	assert.True(t, cfg.NodeFailureThreshold >= 0)

	off, err := Config{Addrs: []string{"a:1"}, NodeFailureThreshold: -1}.resolve()
	require.NoError(t, err, "a negative threshold is the documented way to turn breakers off")
	assert.False(t, off.NodeFailureThreshold >= 0)
}

func TestModeAuto(t *testing.T) {
	tests := []struct {
		cfg  Config
		want Mode
	}{
		{Config{Addrs: []string{"a:1"}}, ModeAuto}, // settled by NewClient (detect.go)
		{Config{Addrs: []string{"a:1", "b:2"}}, ModeCluster},
		{Config{Addrs: []string{"a:1"}, MasterName: "m"}, ModeSentinel},
		{Config{Addrs: []string{"a:1", "b:2", "c:3"}, MasterName: "m"}, ModeSentinel},
	}
	for _, tt := range tests {
		t.Run(tt.want.String()+"/"+strconv.Itoa(len(tt.cfg.Addrs)), func(t *testing.T) {
			cfg, err := tt.cfg.resolve()
			require.NoError(t, err)
			assert.Equal(t, tt.want, cfg.Mode)
		})
	}
}

func TestNewClientCopiesConfig(t *testing.T) {
	addrs := []string{"localhost:1"}
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeAuto}
	c, err := NewClient(Config{Mode: ModeStandalone, Addrs: addrs, MaintNotificationsConfig: maint})
	require.NoError(t, err)
	defer c.Close()
	addrs[0] = "changed:2"
	maint.Mode = maintnotifications.ModeEnabled
	assert.Equal(t, "localhost:1", c.cfg.Addrs[0])
	assert.Equal(t, maintnotifications.ModeAuto, c.cfg.MaintNotificationsConfig.Mode)
}

// NewClient must not dial with an explicit Mode: services build clients at
// init time, before the server may be up, and go-redis's constructors are
// lazy too. (ModeAuto with one address asks the server once; see detect.go.)
func TestNewClientOpensNoSocket(t *testing.T) {
	for _, mode := range []Mode{ModeStandalone, ModeCluster, ModeSentinel} {
		t.Run(mode.String(), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			cfg := Config{Mode: mode, Addrs: []string{ln.Addr().String()}}
			if mode == ModeSentinel {
				cfg.MasterName = "mymaster"
			}
			c, err := NewClient(cfg)
			require.NoError(t, err)
			require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(200*time.Millisecond)))
			conn, err := ln.Accept()
			if err == nil {
				conn.Close()
				t.Fatal("NewClient dialled the server")
			}
			require.NoError(t, c.Close())
		})
	}
}

func TestModeString(t *testing.T) {
	assert.Equal(t, "cluster", ModeCluster.String())
	assert.True(t, strings.HasPrefix(Mode(9).String(), "Mode("))
}

// A budget go-redis cannot build is a configuration error, in every mode:
// go-redis panics on a pool size beyond int32 (in NewClient, or at a Cluster
// node's first command), and the long client's pool is 2n+1 connections.
func TestConnectionLimitsNeverPanic(t *testing.T) {
	for _, mode := range []Mode{ModeStandalone, ModeSentinel, ModeCluster} {
		for _, cfg := range []Config{
			{MaxConnections: 1e15},
			{MaxConnections: math.MaxInt32 + 1},
			{MaxConnections: math.MaxInt},
			{MaxLongConnections: 1 << 62},
			{MaxLongConnections: math.MaxInt32/2 + 1},
			{MaxLongConnections: math.MaxInt},
		} {
			t.Run(fmt.Sprintf("%s/%d/%d", mode, cfg.MaxConnections, cfg.MaxLongConnections), func(t *testing.T) {
				cfg.Mode, cfg.Addrs, cfg.MasterName = mode, []string{"127.0.0.1:1"}, "m"
				if mode == ModeCluster {
					cfg.MasterName = ""
				}
				var c *Client
				var err error
				require.NotPanics(t, func() { c, err = NewClient(cfg) })
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.Nil(t, c)
			})
		}
	}
}

// The largest budgets are accepted and built: NewClient, and the long
// client a blocking call builds, work at the limit.
func TestConnectionLimitsAtTheLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := NewClient(Config{Addrs: []string{srv.Addr}, MaxConnections: maxConnections, MaxLongConnections: maxConnections})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, redis.Nil, c.BLPop(ctx, 10*time.Millisecond, "q").Err())
}
