package redisguard

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// A cluster GET through redisguard allocates no more than through go-redis
// with its defaults, although redisguard turns ContextTimeoutEnabled on,
// which costs go-redis alone a context and a timer per command.
func TestClusterGetSkipsGoRedisCommandInfoTimer(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	g := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs()})
	opt := *g.UniversalClient.(*redis.ClusterClient).Options()
	opt.NewClient = nil // without redisguard's node hooks
	stock := redis.NewClusterClient(&opt)
	defaults := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = stock.Close(); _ = defaults.Close() })

	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, g.Set(ctx, "k", "v", 0).Err())
	for _, c := range []redis.UniversalClient{stock, defaults, g} {
		require.NoError(t, c.Get(ctx, "k").Err()) // warm the slot map, the command info and the pool
	}
	perGet := func(c redis.UniversalClient) float64 {
		const runs = 500
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			_ = c.Get(context.Background(), "k").Err()
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs-before.Mallocs) / runs
	}
	s, d, r := perGet(stock), perGet(defaults), perGet(g)
	t.Logf("allocations per cluster GET: go-redis (same options) %.2f, go-redis (defaults) %.2f, redisguard %.2f", s, d, r)
	assert.LessOrEqual(t, r, d+0.5, "redisguard allocates more than go-redis with its defaults")
	assert.Less(t, r, s-2, "the command-info timer is still paid")
}

// A command that go-redis splits across shards by its COMMAND tips keeps
// the step count go-redis looks up: MSET's key-value pairs stay paired.
func TestClusterMultiShardCommandKeepsItsStepCount(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	g := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs()})
	cc := g.ClusterClient()
	dynamic := cc.NewDynamicResolver()
	dynamic.SetFallbackResolver(redis.NewDefaultCommandPolicyResolver())
	cc.SetCommandInfoResolver(dynamic)

	ctx := testCtx(t, 30*time.Second)
	keys := []string{"a", "b", "c", "d", "e", "f"} // spread over the three masters
	args := make([]interface{}, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, k, "v-"+k)
	}
	require.NoError(t, g.MSet(ctx, args...).Err())
	for _, k := range keys {
		got, err := g.Get(ctx, k).Result()
		require.NoError(t, err, k)
		assert.Equal(t, "v-"+k, got, k)
	}
}
