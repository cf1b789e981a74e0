package redisguard

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
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

// A pod that starts while its only seed does not answer (a cluster given by
// one address, the seed paused): NewClient returns within its bounded first
// contact, Standalone for now, and the seed's first answer decides. Once it
// answers, writes over every slot succeed and the Client runs Cluster, and
// so do the methods that depend on the mode.
func TestModeAutoDecidesOnTheFirstAnswer(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	node := cl.Masters[0]
	node.Pause(t)
	start := time.Now()
	c := newTestClient(t, Config{Addrs: []string{node.Addr}})
	took := time.Since(start)
	t.Logf("NewClient returned %v after the seed was paused", took)
	assert.Less(t, took, 2*maxDetectWait+time.Second, "NewClient waited for the seed")
	assert.Equal(t, ModeStandalone, c.Mode(), "the mode before any answer")
	node.Resume(t)

	ctx := testCtx(t, 20*time.Second)
	for i := range 30 {
		require.NoError(t, c.Set(ctx, fmt.Sprintf("late-seed:%d", i*547), i, 0).Err(), "write %d", i)
	}
	assert.Equal(t, ModeCluster, c.Mode())
	assert.NotNil(t, c.ClusterClient())
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 30 {
			p.Incr(ctx, fmt.Sprintf("late-seed:pipe:%d", i*547))
		}
		return nil
	})
	require.NoError(t, err)
	for _, cmd := range cmds {
		assert.Equal(t, int64(1), cmd.(*redis.IntCmd).Val(), "each pipelined INCR ran once: %v", cmd.Args())
	}
	var masters atomic.Int32 // ForEachMaster runs fn on every master at once
	require.NoError(t, c.ForEachMaster(ctx, func(context.Context, *redis.Client) error { masters.Add(1); return nil }))
	assert.Equal(t, int32(3), masters.Load())
	assert.True(t, c.Healthy(ctx, "late-seed:probe"))
	assert.Len(t, c.Stats().Nodes, 3, "Stats reports the cluster's nodes")
	require.NoError(t, c.Close())
	assert.ErrorIs(t, c.Set(ctx, "late-seed:closed", 1, 0).Err(), ErrClosed)
}

// A standalone server that is down while the client starts: NewClient
// returns at once (the connection is refused), runs Standalone, and serves
// the server's database as soon as the server is back.
func TestModeAutoWithTheServerDownAtStart(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Kill(t)
	start := time.Now()
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, DB: 2})
	assert.Less(t, time.Since(start), 2*maxDetectWait+time.Second)
	assert.Equal(t, ModeStandalone, c.Mode())
	ctx := testCtx(t, 20*time.Second)
	assert.Error(t, c.Set(ctx, "k", "v", 0).Err(), "the server is down")
	srv.Restart(t)
	redistest.WaitFor(t, 10*time.Second, "a write after the restart", func() error { return c.Set(ctx, "k", "v", 0).Err() })
	assert.Equal(t, ModeStandalone, c.Mode())
	keyspace, err := srv.Admin().Info(ctx, "keyspace").Result()
	require.NoError(t, err)
	assert.Contains(t, keyspace, "db2:keys=1", "the write went to database 2")
}

// A user without INFO (an application's user) is asked with HELLO, which
// every user may send: the mode is settled at NewClient, with nothing to
// warn about, and the password is in no log line.
func TestModeAutoWithAnApplicationUser(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := testCtx(t, 10*time.Second)
	require.NoError(t, srv.Admin().Do(ctx, "acl", "setuser", "bob", "on", ">bobpw", "~*", "-@all", "+get", "+set").Err())
	logs := &eventLog{}
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, Username: "bob", Password: "bobpw", Logger: logs.logger()})
	assert.Equal(t, ModeStandalone, c.Mode())
	assert.Nil(t, c.pending, "the mode was left to the first answer")
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, "v", c.Get(ctx, "k").Val())
	_, lines := logs.all()
	for _, l := range lines {
		assert.Less(t, l.level, slog.LevelWarn, "logged: %s %v", l.msg, l.attrs)
		assert.NotContains(t, fmt.Sprint(l.msg, l.attrs), "bobpw")
	}
}
