package redisguard

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// newTestClient builds a client and closes it when the test ends.
func newTestClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exerciseBasics runs the everyday API through the facade; every topology
// must pass it unchanged, which is what "drop-in" means.
func exerciseBasics(t *testing.T, c *Client) {
	ctx := testCtx(t, 20*time.Second)

	t.Run("set and get", func(t *testing.T) {
		require.NoError(t, c.Set(ctx, "basics:k", "v1", time.Minute).Err())
		v, err := c.Get(ctx, "basics:k").Result()
		require.NoError(t, err)
		assert.Equal(t, "v1", v)
		_, err = c.Get(ctx, "basics:missing").Result()
		assert.Equal(t, redis.Nil, err)
	})

	t.Run("pipeline across slots", func(t *testing.T) {
		keys := make([]string, 20)
		for i := range keys {
			keys[i] = fmt.Sprintf("basics:pipe:%d", i) // different slots in a cluster
		}
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				p.Set(ctx, k, i, time.Minute)
			}
			return nil
		})
		require.NoError(t, err)
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Get(ctx, k)
			}
			return nil
		})
		require.NoError(t, err)
		for i, cmd := range cmds {
			assert.Equal(t, strconv.Itoa(i), cmd.(*redis.StringCmd).Val())
		}
	})

	t.Run("transaction", func(t *testing.T) {
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, "{basics:tx}a", "{basics:tx}b")
			p.Incr(ctx, "{basics:tx}a")
			p.IncrBy(ctx, "{basics:tx}b", 5)
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, "1", c.Get(ctx, "{basics:tx}a").Val())
		assert.Equal(t, "5", c.Get(ctx, "{basics:tx}b").Val())
	})

	t.Run("watch", func(t *testing.T) {
		const key = "basics:watch"
		require.NoError(t, c.Set(ctx, key, 10, time.Minute).Err())
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			n, err := tx.Get(ctx, key).Int()
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key, n+1, time.Minute)
				return nil
			})
			return err
		}, key)
		require.NoError(t, err)
		assert.Equal(t, "11", c.Get(ctx, key).Val())
	})

	t.Run("publish and subscribe", func(t *testing.T) {
		ps := c.Subscribe(ctx, "basics:chan")
		defer ps.Close()
		_, err := ps.Receive(ctx) // the subscription confirmation
		require.NoError(t, err)
		require.NoError(t, c.Publish(ctx, "basics:chan", "hello").Err())
		msg, err := ps.ReceiveMessage(ctx)
		require.NoError(t, err)
		assert.Equal(t, "hello", msg.Payload)
	})
}

func TestStandalone(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	assert.Equal(t, ModeStandalone, c.Mode())
	exerciseBasics(t, c)
}

func TestClusterFromOneSeed(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs()[:1]})
	assert.Equal(t, ModeCluster, c.Mode())
	exerciseBasics(t, c)

	// The one seed was enough to find every master.
	var mu sync.Mutex
	seen := map[string]bool{}
	err := c.UniversalClient.(*redis.ClusterClient).ForEachMaster(testCtx(t, 10*time.Second),
		func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			seen[m.Options().Addr] = true
			mu.Unlock()
			return nil
		})
	require.NoError(t, err)
	assert.Len(t, seen, 3)
}

func TestSentinelFollowsFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	c := newTestClient(t, Config{MasterName: s.MasterName, Addrs: s.Addrs(), ReadTimeout: time.Second})
	assert.Equal(t, ModeSentinel, c.Mode())
	exerciseBasics(t, c)

	ctx := testCtx(t, 60*time.Second)
	before := s.CurrentMaster(t)
	s.Failover(t)
	s.WaitMaster(t, s.Replica.Addr)
	require.NotEqual(t, before, s.CurrentMaster(t))

	// Writes find the new master: go-redis's failover client re-resolves it.
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = c.Set(ctx, "after:failover", "ok", time.Minute).Err(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "writes did not resume after SENTINEL FAILOVER")
	role, err := c.Do(ctx, "ROLE").Slice()
	require.NoError(t, err)
	assert.Equal(t, "master", role[0])
}

// A context deadline cuts a blocking call short: stock go-redis would wait
// out the BLPOP's own 20s timeout.
func TestBlockingCallHonoursContextDeadline(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.BLPop(ctx, 20*time.Second, "ctx:empty-list").Err()
	elapsed := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, elapsed, 2*time.Second, "BLPOP outlived its context deadline")

	// The abandoned connection must not hand its late reply to the next caller.
	ctx2 := testCtx(t, 5*time.Second)
	require.Eventually(t, func() bool { return srv.Info(t, "clients")["blocked_clients"] == "0" },
		5*time.Second, 10*time.Millisecond, "the server still holds the abandoned BLPOP")
	require.NoError(t, c.RPush(ctx2, "ctx:empty-list", "late").Err())
	require.NoError(t, c.Set(ctx2, "ctx:k", "fresh", time.Minute).Err())
	assert.Equal(t, "fresh", c.Get(ctx2, "ctx:k").Val())
	assert.Equal(t, []string{"late"}, c.LRange(ctx2, "ctx:empty-list", 0, -1).Val(),
		"the cancelled BLPOP must not have popped the element")
}

func TestCloseIsTerminal(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := NewClient(Config{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	ctx := testCtx(t, 30*time.Second)

	require.NoError(t, c.Set(ctx, "close:k", "v", time.Minute).Err())
	retainedPipe := c.Pipeline()
	retainedPipe.Get(ctx, "close:k")
	ps := c.Subscribe(ctx, "close:chan")
	_, err = ps.Receive(ctx)
	require.NoError(t, err)

	// A BLPOP that would wait 20s is in flight when Close arrives.
	blpopDone := make(chan error, 1)
	go func() { blpopDone <- c.BLPop(ctx, 20*time.Second, "close:list").Err() }()
	require.Eventually(t, func() bool {
		return srv.Info(t, "clients")["blocked_clients"] == "1"
	}, 5*time.Second, 10*time.Millisecond)

	// Close from many goroutines at once: idempotent and race-free.
	var wg sync.WaitGroup
	closeStart := time.Now()
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Close()
		}()
	}
	wg.Wait()

	select {
	case err := <-blpopDone:
		assert.ErrorIs(t, err, ErrClosed)
		assert.Less(t, time.Since(closeStart), 2*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock the BLPOP in flight")
	}

	connsBefore := srv.Info(t, "stats")["total_connections_received"]

	assert.ErrorIs(t, c.Get(ctx, "close:k").Err(), ErrClosed)
	assert.ErrorIs(t, c.Do(ctx, "PING").Err(), ErrClosed)
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "close:k"); return nil })
	assert.ErrorIs(t, err, ErrClosed)
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "close:k"); return nil })
	assert.ErrorIs(t, err, ErrClosed)
	_, err = retainedPipe.Exec(ctx)
	assert.ErrorIs(t, err, ErrClosed)
	err = c.Watch(ctx, func(tx *redis.Tx) error { return tx.Get(ctx, "close:k").Err() }, "close:k")
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, c.BLPop(ctx, time.Second, "close:list").Err(), ErrClosed)

	// Code written for go-redis's closed client matches every one of them.
	assert.ErrorIs(t, c.Get(ctx, "close:k").Err(), redis.ErrClosed)
	assert.ErrorIs(t, c.BLPop(ctx, time.Second, "close:list").Err(), redis.ErrClosed)

	_, err = ps.Receive(ctx)
	assert.Error(t, err, "a retained PubSub must fail after Close") // its closed connection's, as in go-redis
	_, err = c.Subscribe(ctx, "close:chan2").Receive(ctx)
	assert.ErrorIs(t, err, redis.ErrClosed, "a new PubSub must fail after Close")

	assert.NoError(t, c.Close(), "a second Close is a no-op")
	assert.Equal(t, connsBefore, srv.Info(t, "stats")["total_connections_received"],
		"operations after Close opened a socket")
}

// Close outranks an open breaker: once the client is closed every call fails
// with ErrClosed, not with the ErrNodeUnavailable the breaker would give.
func TestCallAfterCloseWithOpenBreakerIsErrClosed(t *testing.T) {
	for _, mode := range []Mode{ModeStandalone, ModeSentinel} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := Config{NodeFailureThreshold: 1, NodeRecoveryTime: time.Hour,
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond}
			var srv *redistest.Server
			if mode == ModeSentinel {
				s := redistest.StartSentinel(t)
				cfg.MasterName, cfg.Addrs, srv = s.MasterName, s.Addrs(), s.Master
			} else {
				srv = redistest.StartServer(t)
				cfg.Addrs = []string{srv.Addr}
			}
			c, err := NewClient(cfg)
			require.NoError(t, err)
			ctx := testCtx(t, 30*time.Second)
			require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

			srv.Kill(t)
			require.Error(t, c.Get(ctx, "k").Err())
			require.ErrorIs(t, c.Get(ctx, "k").Err(), ErrNodeUnavailable, "the breaker did not open")
			require.NoError(t, c.Close())

			assert.ErrorIs(t, c.Get(ctx, "k").Err(), ErrClosed)
			assert.ErrorIs(t, c.Do(ctx, "PING").Err(), ErrClosed)
			_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "k"); return nil })
			assert.ErrorIs(t, err, ErrClosed)
			_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "k"); return nil })
			assert.ErrorIs(t, err, ErrClosed)
			assert.ErrorIs(t, c.BLPop(ctx, time.Second, "q").Err(), ErrClosed)
			assert.ErrorIs(t, c.Watch(ctx, func(*redis.Tx) error { return nil }, "k"), ErrClosed)
		})
	}
}

// gaveUp is a client whose Watch gives up the way go-redis's cluster Watch
// can: nil, without running fn, after calling during if set.
type gaveUp struct {
	redis.UniversalClient
	during func()
}

func (g gaveUp) Watch(context.Context, func(*redis.Tx) error, ...string) error {
	if g.during != nil {
		g.during()
	}
	return nil
}

// The cluster-wide helpers of *redis.ClusterClient work on *Client, through
// the node breakers; outside Cluster mode they visit the one master.
func TestForEachNode(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1})
		c := newTestClient(t, Config{Addrs: cl.Addrs(), NodeFailureThreshold: 1, ReadTimeout: 500 * time.Millisecond})
		ctx := testCtx(t, 30*time.Second)
		count := func(each func(context.Context, func(context.Context, *redis.Client) error) error) (int, error) {
			var mu sync.Mutex
			n := 0
			err := each(ctx, func(ctx context.Context, node *redis.Client) error {
				mu.Lock()
				n++
				mu.Unlock()
				return node.Ping(ctx).Err()
			})
			return n, err
		}
		masters, err := count(c.ForEachMaster)
		require.NoError(t, err)
		assert.Equal(t, 3, masters)
		replicas, err := count(c.ForEachSlave)
		require.NoError(t, err)
		assert.Equal(t, 3, replicas)
		shards, err := count(c.ForEachShard)
		require.NoError(t, err)
		assert.Equal(t, 6, shards)
		require.NotNil(t, c.ClusterClient())

		// A dead master's node client answers through its breaker.
		cl.Masters[0].Kill(t)
		require.Error(t, c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return node.Ping(ctx).Err() }))
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return node.Ping(ctx).Err() })
		assert.ErrorIs(t, err, ErrNodeUnavailable)
	})
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
		ctx := testCtx(t, 10*time.Second)
		var got []string
		require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			got = append(got, node.Options().Addr)
			return node.Set(ctx, "each", "v", 0).Err()
		}))
		assert.Equal(t, []string{srv.Addr}, got)
		require.NoError(t, c.ForEachSlave(ctx, func(context.Context, *redis.Client) error {
			t.Error("a replica visited in Standalone mode")
			return nil
		}))
		assert.Nil(t, c.ClusterClient())
		require.NoError(t, c.Close())
		assert.ErrorIs(t, c.ForEachShard(ctx, func(context.Context, *redis.Client) error { return nil }), ErrClosed)
	})
}
