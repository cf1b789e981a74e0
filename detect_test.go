package redisguard

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// A cluster reached through one of its addresses (a Kubernetes Service in
// front of it) works with the default Config: the client asks the server and
// runs as a cluster client. go-redis alone, given the same one address,
// builds a standalone client that meets MOVED.
func TestOneAddressOfAClusterRunsAsCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	seed := cl.Masters[0].Addr
	c := newTestClient(t, Config{Addrs: []string{seed}})
	require.Equal(t, ModeCluster, c.Mode())
	stock := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{seed}})
	t.Cleanup(func() { _ = stock.Close() })
	ctx := testCtx(t, 30*time.Second)

	var guardFailed, stockFailed int
	for i := range 30 {
		key := fmt.Sprintf("detect:%d", i*547) // spread over the slots
		if c.Set(ctx, key, i, 0).Err() != nil {
			guardFailed++
		}
		if stock.Set(ctx, key, i, 0).Err() != nil {
			stockFailed++
		}
	}
	t.Logf("writes over all slots through one address: redisguard %d/30 failed, go-redis alone %d/30 failed", guardFailed, stockFailed)
	assert.Zero(t, guardFailed)
	assert.Positive(t, stockFailed, "go-redis alone wrote every slot through a standalone client")

	// URLs and the probe take the same path.
	cfg, err := ParseURL("redis://" + seed)
	require.NoError(t, err)
	viaURL := newTestClient(t, cfg)
	assert.Equal(t, ModeCluster, viaURL.Mode())
}

func TestOneAddressOfAStandaloneServerRunsStandalone(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, DB: 2})
	assert.Equal(t, ModeStandalone, c.Mode())
	ctx := testCtx(t, 10*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	keyspace, err := srv.Admin().Info(ctx, "keyspace").Result()
	require.NoError(t, err)
	assert.Contains(t, keyspace, "db2:keys=1", "the write went to database 2")
}

// A database other than 0 on a cluster node is a configuration error, found
// when the server says it is one.
func TestOneAddressOfAClusterWithADatabase(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	_, err := NewClient(Config{Addrs: []string{cl.Masters[0].Addr}, DB: 3})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "cluster node")
}

// When the server cannot be reached at NewClient, the client runs
// Standalone and says so; a MOVED reply later names the cause and the fix
// instead of reaching the caller raw.
func TestUndetectedModeExplainsMoved(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	node := cl.Masters[0]
	node.Pause(t)
	start := time.Now()
	c := newTestClient(t, Config{Addrs: []string{node.Addr}, DialTimeout: 300 * time.Millisecond})
	assert.Less(t, time.Since(start), 2*time.Second, "NewClient waited too long for an unanswering server")
	require.Equal(t, ModeStandalone, c.Mode())
	node.Resume(t)
	ctx := testCtx(t, 20*time.Second)
	var moved error
	for i := range 30 {
		if err := c.Set(ctx, fmt.Sprintf("undetected:%d", i*547), i, 0).Err(); err != nil {
			moved = err
			break
		}
	}
	require.Error(t, moved, "no write met MOVED")
	assert.Contains(t, moved.Error(), "set Config.Mode to ModeCluster")
	assert.Contains(t, moved.Error(), "is a cluster node")
	_, isMoved := redis.IsMovedError(moved)
	assert.True(t, isMoved, "the MOVED reply stays reachable with errors.As")
}
