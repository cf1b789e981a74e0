package redisguard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Stats reports the resolved budgets and one entry per node the client has
// talked to, with its breaker's state, opens and recovery probes.
func TestStatsReportsBudgetsAndNodes(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxConnections: 7, MaxLongConnections: 3,
		NodeFailureThreshold: 1, ReadTimeout: 300 * time.Millisecond})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s := c.Stats()
	assert.Equal(t, 7, s.MaxConnections)
	assert.Equal(t, 3, s.MaxLongConnections)
	assert.Zero(t, s.LongInUse)
	require.Len(t, s.Nodes, 1)
	assert.Equal(t, srv.Addr, s.Nodes[0].Addr)
	assert.Equal(t, "closed", s.Nodes[0].State)
	assert.Zero(t, s.Nodes[0].Opens)

	srv.Kill(t)
	require.Error(t, c.Get(ctx, "k").Err())
	s = c.Stats()
	assert.Equal(t, "open", s.Nodes[0].State)
	assert.Equal(t, uint64(1), s.Nodes[0].Opens)
	srv.Restart(t)
	redistest.WaitFor(t, 10*time.Second, "a probe to find the server", func() error {
		if c.Stats().Nodes[0].Probes == 0 || c.Stats().Nodes[0].State == "open" {
			return assert.AnError
		}
		return nil
	})
	assert.GreaterOrEqual(t, c.Stats().Nodes[0].Probes, c.Stats().Nodes[0].ProbeFailures+1)
}

// A node's InFlight counts the operations holding or waiting for one of its
// ordinary client's connections, on that node alone: in Cluster mode each
// node client's, in Sentinel mode the failover client's, charged to the
// master it dials. A paused node holds a GET, a pipeline and a
// transaction, one each; the others show none.
func TestStatsCountsInFlightOnItsNode(t *testing.T) {
	// The hang watch would cut the held GET; it is not what this checks.
	const hung = time.Minute
	inFlight := func(c *Client) map[string]int64 {
		m := map[string]int64{}
		for _, n := range c.Stats().Nodes {
			m[n.Addr] = n.InFlight
		}
		return m
	}
	hold := func(t *testing.T, c *Client, paused *redistest.Server, key, addr string) {
		t.Helper()
		ctx := testCtx(t, 30*time.Second)
		require.NoError(t, c.Set(ctx, key, "v", 0).Err())
		for _, n := range c.Stats().Nodes {
			require.Zero(t, n.InFlight, "%s before", n.Addr)
		}
		paused.Pause(t)
		resumed := false
		defer func() {
			if !resumed {
				paused.Resume(t)
			}
		}()
		gets := func(p redis.Pipeliner) error {
			p.Get(ctx, key)
			p.Get(ctx, key)
			return nil
		}
		done := make(chan error, 3)
		go func() { done <- c.Get(ctx, key).Err() }()
		go func() { _, err := c.Pipelined(ctx, gets); done <- err }()
		go func() { _, err := c.TxPipelined(ctx, gets); done <- err }()
		require.Eventually(t, func() bool { return inFlight(c)[addr] == 3 }, 10*time.Second, time.Millisecond,
			"the held GET, pipeline and transaction on %s: %v", addr, inFlight(c))
		for a, n := range inFlight(c) {
			if a != addr {
				assert.Zero(t, n, "%s holds nothing", a)
			}
		}
		paused.Resume(t)
		resumed = true
		for range 3 {
			require.NoError(t, <-done)
		}
		assert.Zero(t, inFlight(c)[addr], "answered")
	}

	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), HungNodeAfter: hung, ReadTimeout: 20 * time.Second})
		ctx := testCtx(t, 20*time.Second)
		require.NoError(t, c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }))
		node := cl.Nodes()[1]
		hold(t, c, node, cl.KeyOn(t, node, "inflight:"), cl.ClientAddr(node))
	})
	t.Run("sentinel", func(t *testing.T) {
		g := redistest.StartSentinel(t)
		c := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs(),
			HungNodeAfter: hung, ReadTimeout: 20 * time.Second})
		hold(t, c, g.Master, "inflight", g.CurrentMaster(t))
	})
}
