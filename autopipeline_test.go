package redisguard

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// go-redis's AutoPipeline and AsyncAutoPipeline batch the commands of many
// callers into pipelines on the client they come from. Through redisguard
// that is the guarded client, so each batch passes the node guards and the
// facade like any pipeline: these tests pin that down on real servers.

// autopipeliners returns both faces of c's autopipeliner.
func autopipeliners(t *testing.T, c redis.UniversalClient) map[string]*redis.AutoPipeliner {
	t.Helper()
	blocking, err := c.AutoPipeline()
	require.NoError(t, err)
	async, err := c.AsyncAutoPipeline()
	require.NoError(t, err)
	return map[string]*redis.AutoPipeliner{"AutoPipeline": blocking, "AsyncAutoPipeline": async}
}

// A paused server opens its breaker under autopipelined traffic, after
// which each command fails at once with ErrNodeUnavailable; go-redis alone
// waits out its read timeout on every command.
func TestAutoPipelineBreakerFailsFast(t *testing.T) {
	srv := redistest.StartServer(t)
	const readTimeout = 300 * time.Millisecond
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: readTimeout, NodeFailureThreshold: 2, NodeRecoveryTime: time.Hour})
	stock := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: readTimeout})
	t.Cleanup(func() { _ = stock.Close() })
	ctx := testCtx(t, 30*time.Second)
	guarded, alone := autopipeliners(t, c), autopipeliners(t, stock)
	for _, ap := range guarded {
		require.NoError(t, ap.Set(ctx, "ap:k", "v", 0).Err())
	}
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })

	for name, ap := range guarded {
		var err error
		for i := 0; i < 10 && !errors.Is(err, ErrNodeUnavailable); i++ {
			err = ap.Get(ctx, "ap:k").Err()
		}
		require.ErrorIs(t, err, ErrNodeUnavailable, name)
		var nodeErr *NodeError
		require.ErrorAs(t, err, &nodeErr, name)
		assert.Equal(t, srv.Addr, nodeErr.Addr, name)

		start := time.Now()
		err = ap.Get(ctx, "ap:k").Err()
		guardedTook := time.Since(start)
		require.ErrorIs(t, err, ErrNodeUnavailable, name)

		start = time.Now()
		stockErr := alone[name].Get(ctx, "ap:k").Err()
		aloneTook := time.Since(start)
		t.Logf("%s on a paused server: redisguard %v (%v), go-redis alone %v (%v)", name, guardedTook, err, aloneTook, stockErr)
		assert.Less(t, guardedTook, readTimeout/2, "%s: an open breaker fails at once", name)
		assert.GreaterOrEqual(t, aloneTook, readTimeout, "%s: go-redis alone waits for its read timeout", name)
	}
}

// In Cluster mode a killed master fails the commands for its slots with
// ErrNodeUnavailable, and the other masters keep answering through the same
// autopipeliner.
func TestAutoPipelineClusterNodeDown(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Addrs: cl.Addrs(), Mode: ModeCluster, NodeFailureThreshold: 2, NodeRecoveryTime: time.Hour})
	ctx := testCtx(t, 30*time.Second)
	down, up := cl.KeyOn(t, cl.Masters[0], "ap:down"), cl.KeyOn(t, cl.Masters[1], "ap:up")
	for name, ap := range autopipeliners(t, c) {
		require.NoError(t, ap.Set(ctx, up, "v", 0).Err(), name)
		require.NoError(t, ap.Set(ctx, down, "v", 0).Err(), name)
	}
	cl.Masters[0].Kill(t)
	for name, ap := range autopipeliners(t, c) {
		var err error
		for i := 0; i < 10 && !errors.Is(err, ErrNodeUnavailable); i++ {
			err = ap.Get(ctx, down).Err()
		}
		require.ErrorIs(t, err, ErrNodeUnavailable, name)
		assert.Equal(t, "v", ap.Get(ctx, up).Val(), name)
	}
}

// go-redis runs autopipelined batches on a background context, bounded by
// ReadTimeout rather than the caller's deadline; a blocking command sent
// through an autopipeliner runs outside the batches with the caller's
// context, and its deadline ends it with ctx.Err() itself. After Close the
// autopipeliner, closed with the go-redis client, refuses every command
// with go-redis's closed error and opens no connection.
func TestAutoPipelineTranslatesErrors(t *testing.T) {
	srv := redistest.StartServer(t)
	const readTimeout = 300 * time.Millisecond
	// The paused server's silence would open its breaker (HungNodeAfter)
	// before the timeouts this test is about.
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: readTimeout, NodeFailureThreshold: 100, HungNodeAfter: time.Minute})
	ctx := testCtx(t, 30*time.Second)
	aps := autopipeliners(t, c)
	for name, ap := range aps {
		require.NoError(t, ap.Set(ctx, "ap:k", "v", 0).Err())
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := ap.BLPop(short, 0, "ap:q").Err()
		cancel()
		assert.Equal(t, context.DeadlineExceeded, err, "%s: BLPOP", name)
	}
	srv.Pause(t)
	for name, ap := range aps {
		start := time.Now()
		err := ap.Get(ctx, "ap:k").Err()
		var netErr net.Error
		require.ErrorAs(t, err, &netErr, name)
		assert.True(t, netErr.Timeout(), "%s: %v", name, err)
		assert.Less(t, time.Since(start), 10*readTimeout, "%s: bounded by ReadTimeout", name)
	}
	srv.Resume(t)

	require.NoError(t, c.Close())
	before := srv.Info(t, "stats")["total_connections_received"]
	for name, ap := range aps {
		assert.ErrorIs(t, ap.Get(ctx, "ap:k").Err(), redis.ErrClosed, name)
		assert.ErrorIs(t, ap.BLPop(ctx, time.Second, "ap:q").Err(), redis.ErrClosed, name)
	}
	assert.Equal(t, before, srv.Info(t, "stats")["total_connections_received"], "no connection after Close")
}

// A reply lost after the server ran an RPUSH: the autopipelined batch is not
// sent again, the caller learns the outcome is unknown, and the item is in
// the list once. go-redis alone resends the batch and pushes it twice.
func TestAutoPipelineDoesNotRepeatUnsafeCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	ctx := testCtx(t, 20*time.Second)
	c := newTestClient(t, Config{Addrs: []string{proxy.Addr()}})
	stock := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = stock.Close() })
	length := func(key string) int64 {
		n, err := srv.Admin().LLen(ctx, key).Result()
		require.NoError(t, err)
		return n
	}
	for _, x := range []struct {
		name   string
		client redis.UniversalClient
	}{{"redisguard", c}, {"go-redis", stock}} {
		for face, ap := range autopipeliners(t, x.client) {
			key := "ap:queue:" + x.name + ":" + face
			require.NoError(t, ap.Ping(ctx).Err())
			require.NoError(t, proxy.SetMode(faultproxy.LoseOneReply))
			err := ap.RPush(ctx, key, "item").Err()
			n := length(key)
			t.Logf("%s %s after a lost reply: %d item(s), err %v", x.name, face, n, err)
			if x.name == "redisguard" {
				assert.ErrorIs(t, err, ErrOutcomeUnknown, face)
				assert.Equal(t, int64(1), n, "%s: pushed once", face)
			}
		}
	}
}

// A blocking command sent through an autopipeliner runs on a connection of
// its own: the batches of the other callers go on while it waits.
func TestAutoPipelineBlockingCommandDoesNotStallBatches(t *testing.T) {
	alone(t)
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		checkBlockingBesideBatches(t, newTestClient(t, Config{Addrs: []string{srv.Addr}}))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		checkBlockingBesideBatches(t, newTestClient(t, Config{Addrs: cl.Addrs(), Mode: ModeCluster}))
	})
}

func checkBlockingBesideBatches(t *testing.T, c *Client) {
	ctx := testCtx(t, 30*time.Second)
	const wait = 2 * time.Second
	for name, ap := range autopipeliners(t, c) {
		require.NoError(t, ap.Set(ctx, "ap:{k}", "v", 0).Err(), name)
		blocked := make(chan error, 1)
		go func() { blocked <- ap.BLPop(ctx, wait, "ap:{q}:"+name).Err() }()
		require.Eventually(t, func() bool { return c.Stats().LongInUse == 1 }, 5*time.Second, time.Millisecond, "%s: BLPOP under way", name)

		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 64*20)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					if err := ap.Get(ctx, "ap:{k}").Err(); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		close(errs)
		for err := range errs {
			t.Errorf("%s: GET beside the BLPOP: %v", name, err)
		}
		t.Logf("%s: 1280 GETs beside a BLPOP took %v", name, took)
		assert.Less(t, took, wait/2, "%s: the GETs did not wait for the BLPOP", name)
		select {
		case err := <-blocked:
			t.Fatalf("%s: BLPOP returned before its timeout: %v", name, err)
		default:
		}
		assert.Equal(t, redis.Nil, <-blocked, name)
	}
}

// TestScenarioAutoPipelinePausedServerDefaults is the paused-server case with
// the default Config and go-redis's AutoPipeline with its defaults beside
// it: 16 callers keep sending GETs; it reports how long until redisguard's
// breaker answers for the node, and each client's GET latency once it has.
// It waits out several default read timeouts, so it runs with
// REDISGUARD_SCENARIO=full (make scenarios).
func TestScenarioAutoPipelinePausedServerDefaults(t *testing.T) {
	if !scenarioFull() {
		t.Skip("REDISGUARD_SCENARIO=full: waits out the default read timeouts")
	}
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	stock := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = stock.Close() })
	ctx := testCtx(t, 2*time.Minute)
	guarded, err := c.AutoPipeline()
	require.NoError(t, err)
	alone, err := stock.AutoPipeline()
	require.NoError(t, err)
	require.NoError(t, guarded.Set(ctx, "ap:k", "v", 0).Err())
	require.NoError(t, alone.Get(ctx, "ap:k").Err())
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })

	start := time.Now()
	opened := make(chan time.Duration, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if errors.Is(guarded.Get(ctx, "ap:k").Err(), ErrNodeUnavailable) {
					opened <- time.Since(start)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(opened)
	first := <-opened
	begin := time.Now()
	err = guarded.Get(ctx, "ap:k").Err()
	guardedTook := time.Since(begin)
	require.ErrorIs(t, err, ErrNodeUnavailable)
	begin = time.Now()
	aloneErr := alone.Get(ctx, "ap:k").Err()
	aloneTook := time.Since(begin)
	t.Logf("default Config, paused server: breaker answered after %v; then a GET takes %v through redisguard, %v through go-redis alone (%v)",
		first, guardedTook, aloneTook, aloneErr)
	assert.Less(t, guardedTook, time.Second/10)
	assert.Less(t, first, 30*time.Second, "the breaker opens within a few default read timeouts")
}

// FullDuplex is refused, in Config and at the call, with ErrInvalidConfig:
// go-redis writes a full-duplex command before any hook runs, so no breaker
// could refuse it. The half-duplex options still work.
func TestFullDuplexIsRefused(t *testing.T) {
	srv := redistest.StartServer(t)
	fd := &redis.AutoPipelineOptions{FullDuplex: true}
	_, err := NewClient(Config{Addrs: []string{srv.Addr}, AutoPipelineOptions: fd})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "FullDuplex")

	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	for name, build := range map[string]func(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error){
		"AutoPipelineWithOptions":      c.AutoPipelineWithOptions,
		"AsyncAutoPipelineWithOptions": c.AsyncAutoPipelineWithOptions,
	} {
		ap, err := build(fd)
		assert.Nil(t, ap, name)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), name)

		ap, err = build(&redis.AutoPipelineOptions{MaxBatchSize: 10})
		require.NoError(t, err, name)
		ctx := testCtx(t, 5*time.Second)
		assert.NoError(t, ap.Set(ctx, "fd:k", "v", 0).Err(), name)
		assert.NoError(t, ap.Close(), name)
	}
}
