package redisguard

import (
	"testing"
	"time"

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
