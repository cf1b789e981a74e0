package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// longBuilt reports whether the client has built its long client.
func longBuilt(c *Client) bool {
	c.adm.mu.Lock()
	defer c.adm.mu.Unlock()
	return c.adm.long != nil
}

// blockedClients is the server's count of clients parked in a blocking call.
func blockedClients(t *testing.T, s *redistest.Server) int {
	n, err := strconv.Atoi(s.Info(t, "clients")["blocked_clients"])
	require.NoError(t, err)
	return n
}

// waitBlocked waits until s has n clients parked in a blocking call.
func waitBlocked(t *testing.T, s *redistest.Server, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return blockedClients(t, s) == n }, 10*time.Second, 5*time.Millisecond,
		"waiting for %d blocked clients on %s", n, s.Addr)
}

// shortBLPop is a BLPOP with a 50ms timeout, which the typed BLPop would
// round up to a second.
func shortBLPop(ctx context.Context, c *Client, key string) error {
	return c.Do(ctx, "blpop", key, "0.05").Err()
}

// ordinaryConns is the number of connections the ordinary pool holds.
func ordinaryConns(c *Client) uint32 {
	return c.UniversalClient.(*redis.Client).PoolStats().TotalConns
}

// A blocking command, whichever way it is sent, runs on the long client and
// holds a long permit while it waits; an ordinary command never builds the
// long client.
func TestAdmissionRouting(t *testing.T) {
	srv := redistest.StartServer(t)
	blocking := []struct {
		name string
		call func(ctx context.Context, c *Client) error
	}{
		{"typed BLPOP", func(ctx context.Context, c *Client) error {
			return c.BLPop(ctx, time.Second, "route:list").Err()
		}},
		{"BLPOP through Do", func(ctx context.Context, c *Client) error {
			return c.Do(ctx, "blpop", "route:list", "1").Err()
		}},
		{"XREAD BLOCK", func(ctx context.Context, c *Client) error {
			return c.XRead(ctx, &redis.XReadArgs{Streams: []string{"route:stream", "$"}, Block: time.Second}).Err()
		}},
		{"BZPOPMIN", func(ctx context.Context, c *Client) error {
			return c.BZPopMin(ctx, time.Second, "route:zset").Err()
		}},
	}
	for _, tc := range blocking {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxConnections: 2, MaxLongConnections: 2})
			ctx := testCtx(t, 20*time.Second)
			require.False(t, longBuilt(c))

			done := make(chan error, 1)
			go func() { done <- tc.call(ctx, c) }()
			waitBlocked(t, srv, 1)
			assert.Equal(t, 1, c.Stats().LongInUse, "the blocking call holds no long permit")
			assert.Zero(t, ordinaryConns(c), "the blocking call took an ordinary connection")
			assert.True(t, longBuilt(c))
			assert.Equal(t, redis.Nil, <-done)
			assert.Zero(t, c.Stats().LongInUse)
		})
	}

	t.Run("ordinary commands", func(t *testing.T) {
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
		ctx := testCtx(t, 20*time.Second)
		require.NoError(t, c.Set(ctx, "route:k", "v", time.Minute).Err())
		require.NoError(t, c.Get(ctx, "route:k").Err())
		require.ErrorIs(t, c.Do(ctx, "lpop", "route:nothing").Err(), redis.Nil)
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Get(ctx, "route:k")
			p.XRead(ctx, &redis.XReadArgs{Streams: []string{"route:stream", "0"}, Count: 1, Block: -1}) // no BLOCK: ordinary
			return nil
		})
		require.ErrorIs(t, err, redis.Nil)
		_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.BLPop(ctx, time.Second, "route:list") // never blocks inside MULTI
			return nil
		})
		require.ErrorIs(t, err, redis.Nil)
		assert.False(t, longBuilt(c), "an ordinary command built the long client")
	})
}

// In Cluster mode a blocking command runs on a dedicated connection to the
// master of its key's slot.
func TestAdmissionRoutingCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), MaxLongConnections: 4})
	ctx := testCtx(t, 30*time.Second)
	for i, m := range cl.Masters {
		key := cl.KeyOn(t, m, "route:cluster:")
		done := make(chan error, 2)
		go func() { done <- c.BLPop(ctx, time.Second, key).Err() }()
		go func() { done <- c.Do(ctx, "blmpop", "1", "1", key, "left").Err() }()
		waitBlocked(t, m, 2)
		for _, other := range cl.Masters {
			if other != m {
				assert.Zero(t, blockedClients(t, other), "master %d: the call went to %s", i, other.Addr)
			}
		}
		assert.Equal(t, 2, c.Stats().LongInUse)
		assert.Equal(t, redis.Nil, <-done)
		assert.Equal(t, redis.Nil, <-done)
	}
	assert.True(t, longBuilt(c))
}

// In Sentinel mode blocking calls follow the master like everything else,
// can be cancelled, and are refused inside Watch.
func TestAdmissionSentinel(t *testing.T) {
	g := redistest.StartSentinel(t)
	c := newTestClient(t, Config{Addrs: g.Addrs(), MasterName: g.MasterName})
	ctx := testCtx(t, 30*time.Second)

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.BLPop(cctx, 0, "sentinel:list").Err() }()
	waitBlocked(t, g.Master, 1)
	assert.Equal(t, 1, c.Stats().LongInUse)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	waitBlocked(t, g.Master, 0)

	err := c.Watch(ctx, func(tx *redis.Tx) error {
		return tx.BLPop(ctx, time.Second, "sentinel:list").Err()
	}, "sentinel:list")
	assert.ErrorIs(t, err, ErrBlockingInWatch)

	require.NoError(t, c.RPush(ctx, "sentinel:list", "x").Err())
	assert.Equal(t, []string{"sentinel:list", "x"}, c.BLPop(ctx, time.Second, "sentinel:list").Val())
}

// A blocking call is admitted and scored by the guard of its dedicated
// connection, on the node the ordinary commands use: in Sentinel mode the
// master's address, which that guard follows as the ordinary client's does.
// No node stands for go-redis's name of the failover client.
func TestBlockingCallIsChargedToTheMastersNode(t *testing.T) {
	g := redistest.StartSentinel(t)
	c := newTestClient(t, Config{Addrs: g.Addrs(), MasterName: g.MasterName})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	master, ok := c.nodes.lookup(g.Master.Addr)
	require.True(t, ok, "no node for the master's address")

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.BLPop(cctx, 0, "charged:list").Err() }()
	waitBlocked(t, g.Master, 1)
	assert.Equal(t, int64(1), master.long.Load(), "the blocking call is not counted on the master's node")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	waitBlocked(t, g.Master, 0)
	for _, n := range c.Stats().Nodes {
		assert.NotEqual(t, c.adm.long.(*redis.Client).Options().Addr, n.Addr, "a node for the failover client's name")
	}
}

// In Standalone mode too the long count is the one node's.
func TestBlockingCallIsChargedToTheNode(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.BLPop(cctx, 0, "charged:list").Err() }()
	waitBlocked(t, srv, 1)
	n, ok := c.nodes.lookup(srv.Addr)
	require.True(t, ok)
	assert.Equal(t, int64(1), n.long.Load(), "the blocking call is not counted on the node")
	assert.Len(t, c.nodes.all(), 1, "the long client's guards have nodes of their own")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// A blocking call to a node whose breaker is open is refused at once, not
// after waiting for a long permit: with the whole long budget held, the
// call, a blocking batch, and in Cluster mode a call to the open node's
// slots end with ErrNodeUnavailable, not ErrPoolExhausted after
// PoolTimeout; a call to a closed node of the cluster still waits its turn.
func TestOpenNodeRefusesBlockingCallsBeforeTheBudget(t *testing.T) {
	held := func(t *testing.T, c *Client, ctx context.Context) {
		t.Helper()
		require.NoError(t, c.adm.acquire(ctx)) // the one permit
		t.Cleanup(c.adm.release)
	}
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 1, PoolTimeout: 20 * time.Second})
		ctx := testCtx(t, 10*time.Second)
		require.Equal(t, redis.Nil, shortBLPop(ctx, c, "open:list")) // the node is known
		held(t, c, ctx)
		n, ok := c.nodes.lookup(srv.Addr)
		require.True(t, ok)
		require.True(t, n.br.Trip())
		assert.ErrorIs(t, c.BLPop(ctx, time.Second, "open:list").Err(), ErrNodeUnavailable)
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Get(ctx, "open:k")
			p.BLPop(ctx, time.Second, "open:list")
			return nil
		})
		assert.ErrorIs(t, err, ErrNodeUnavailable)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), MaxLongConnections: 1, PoolTimeout: 20 * time.Second})
		ctx := testCtx(t, 10*time.Second)
		open, closed := cl.KeyOn(t, cl.Masters[0], "open:"), cl.KeyOn(t, cl.Masters[1], "closed:")
		require.Equal(t, redis.Nil, shortBLPop(ctx, c, open))
		held(t, c, ctx)
		n, ok := c.nodes.lookup(cl.Masters[0].Addr)
		require.True(t, ok)
		require.True(t, n.br.Trip())
		assert.ErrorIs(t, c.BLPop(ctx, time.Second, open).Err(), ErrNodeUnavailable)
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, c.BLPop(short, time.Second, closed).Err(), context.DeadlineExceeded,
			"a call to a closed node did not wait for the budget")
	})
}

// A transaction uses ordinary capacity even with BLPOP inside, so it runs
// while the whole long budget is held elsewhere.
func TestLongBudgetTransactionIsOrdinary(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 1, PoolTimeout: 300 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)
	ps := c.Subscribe(ctx, "tx:ch")
	defer ps.Close()
	_, err := ps.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, c.Stats().LongInUse)

	require.NoError(t, c.RPush(ctx, "tx:list", "a").Err())
	start := time.Now()
	cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.BLPop(ctx, 5*time.Second, "tx:list")
		p.BLPop(ctx, 5*time.Second, "tx:list") // empty by now: nil at once, inside EXEC
		p.Set(ctx, "tx:k", "v", time.Minute)
		return nil
	})
	assert.ErrorIs(t, err, redis.Nil)
	assert.Less(t, time.Since(start), 2*time.Second, "the transaction waited")
	assert.Equal(t, []string{"tx:list", "a"}, cmds[0].(*redis.StringSliceCmd).Val())
	assert.Equal(t, "v", c.Get(ctx, "tx:k").Val())
	assert.Zero(t, c.Stats().LongExhaustions)
	assert.False(t, longBuilt(c))
}

// A non-transactional pipeline with blocking commands takes exactly one
// permit and runs them in order on one long connection.
func TestLongBudgetBlockingPipeline(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 2, PoolTimeout: 300 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)

	type result struct {
		cmds []redis.Cmder
		err  error
	}
	done := make(chan result, 1)
	go func() {
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.BLPop(ctx, 5*time.Second, "pipe:a")
			p.Get(ctx, "pipe:k")
			p.BLPop(ctx, 5*time.Second, "pipe:b")
			return nil
		})
		done <- result{cmds, err}
	}()
	waitBlocked(t, srv, 1)
	assert.Equal(t, 1, c.Stats().LongInUse, "a blocking pipeline holds exactly one permit")
	assert.Zero(t, ordinaryConns(c))

	// A second long call still fits; a third would not.
	require.Equal(t, redis.Nil, shortBLPop(ctx, c, "pipe:other"))

	require.NoError(t, srv.Admin().Set(ctx, "pipe:k", "v", time.Minute).Err())
	require.NoError(t, srv.Admin().RPush(ctx, "pipe:a", "1").Err())
	waitBlocked(t, srv, 1) // now on pipe:b: the commands run in order
	require.NoError(t, srv.Admin().RPush(ctx, "pipe:b", "2").Err())
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, []string{"pipe:a", "1"}, r.cmds[0].(*redis.StringSliceCmd).Val())
	assert.Equal(t, "v", r.cmds[1].(*redis.StringCmd).Val())
	assert.Equal(t, []string{"pipe:b", "2"}, r.cmds[2].(*redis.StringSliceCmd).Val())
	assert.Zero(t, c.Stats().LongInUse)
}

// passHook is a hook that changes nothing; adding it rebuilds a hook chain.
type passHook struct{}

func (passHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (passHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (passHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// SUBSCRIBE as a plain command, and MONITOR, are refused with a clear error.
func TestHoldingCommandsRejected(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 10*time.Second)
	assert.ErrorIs(t, c.Do(ctx, "subscribe", "hold:ch").Err(), ErrHoldingCommand)
	assert.ErrorIs(t, c.Do(ctx, "PSUBSCRIBE", "hold:*").Err(), ErrHoldingCommand)
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "hold:k")
		p.Do(ctx, "ssubscribe", "hold:ch")
		return nil
	})
	assert.ErrorIs(t, err, ErrHoldingCommand)
	// Monitor is not part of UniversalClient; reach it on the embedded client.
	err = c.UniversalClient.(*redis.Client).Monitor(ctx, make(chan string, 1)).Err()
	assert.ErrorIs(t, err, ErrHoldingCommand)
	assert.Contains(t, err.Error(), "MONITOR")
	assert.Zero(t, c.Stats().LongInUse)
	subs, err := srv.Admin().Do(ctx, "client", "list", "type", "pubsub").Text()
	require.NoError(t, err)
	assert.Empty(t, subs, "a connection was left subscribed")
}

// limitedUser creates, on each server, a user who may run every command
// but the dangerous ones: no CLIENT UNBLOCK, no CLIENT KILL.
func limitedUser(t *testing.T, servers ...*redistest.Server) (user, password string) {
	t.Helper()
	for _, s := range servers {
		require.NoError(t, s.Admin().Do(testCtx(t, 5*time.Second),
			"acl", "setuser", "limited", "reset", "on", ">limited-pw", "~*", "&*", "+@all", "-@dangerous").Err())
	}
	return "limited", "limited-pw"
}

// unblockDenials counts the CLIENT UNBLOCKs the server refused for lack of
// permission, from its ACL log.
func unblockDenials(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	entries, err := s.Admin().ACLLog(testCtx(t, 5*time.Second), 100).Result()
	require.NoError(t, err)
	var n int64
	for _, e := range entries {
		if strings.Contains(strings.ToLower(e.Object), "unblock") {
			n += e.Count
		}
	}
	return n
}

// Waiting is not failing. A blocking command that waits out its own
// timeout on a healthy server, however it is sent (Do, a pipeline, WAIT),
// is read with its own timeout plus ReadTimeout rather than ReadTimeout
// alone, succeeds, and costs its node's breaker nothing.
func TestBlockingWaitIsNotScoredAsFailure(t *testing.T) {
	alone(t)
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	for _, tc := range []struct {
		name string
		cfg  Config
		key  string
	}{
		{"standalone", Config{Addrs: []string{srv.Addr}}, "waiting:q"},
		{"cluster", Config{Mode: ModeCluster, Addrs: cl.Addrs()}, "{waiting}q"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ReadTimeout = 300 * time.Millisecond
			tc.cfg.NodeFailureThreshold = 2
			tc.cfg.NodeRecoveryTime = time.Hour
			c := newTestClient(t, tc.cfg)
			ctx := testCtx(t, 60*time.Second)
			calls := []struct {
				name string
				call func() error
				want error
			}{
				{"Do BLPOP", func() error { return c.Do(ctx, "BLPOP", tc.key, 1).Err() }, redis.Nil},
				{"pipelined BLPop", func() error {
					_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
						p.BLPop(ctx, time.Second, tc.key)
						return nil
					})
					return err
				}, redis.Nil},
				{"pipelined GET and Do BLPOP", func() error {
					cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
						p.Get(ctx, tc.key+":k")
						p.Do(ctx, "blpop", tc.key, "0.5")
						p.Do(ctx, "blpop", tc.key, "0.5")
						return nil
					})
					for _, cmd := range cmds {
						if err := cmd.Err(); err != redis.Nil {
							return fmt.Errorf("%v: %w", cmd.Args(), err)
						}
					}
					return redis.Nil
				}, redis.Nil},
				{"Do WAIT", func() error { return c.Do(ctx, "WAIT", 1, 1000).Err() }, nil}, // no replica answers: 0 after 1s
			}
			for range 2 {
				for _, call := range calls {
					start := time.Now()
					err := call.call()
					took := time.Since(start)
					assert.Equal(t, call.want, err, call.name)
					assert.GreaterOrEqual(t, took, 900*time.Millisecond, "%s: returned before its own timeout", call.name)
				}
			}
			assert.Equal(t, redis.Nil, c.Get(ctx, tc.key+":k").Err(), "a GET after the waits")
			for _, n := range c.Stats().Nodes {
				assert.Equal(t, "closed", n.State, n.Addr)
				assert.Zero(t, n.ConsecutiveFailures, n.Addr)
			}
		})
	}
}

// The read deadline still bounds a server that stops answering: a blocking
// command sent through Do, or in a pipeline, fails with a timeout its own
// timeout plus ReadTimeout after it was sent (not a context error: the
// caller's context is fine), and the node's breaker counts it.
func TestBlockingCallOnHungServerFailsAfterItsBudget(t *testing.T) {
	sideBySide(t)
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	for _, tc := range []struct {
		name string
		cfg  Config
		node *redistest.Server
		key  string
	}{
		{"standalone", Config{Addrs: []string{srv.Addr}}, srv, "budget:q"},
		{"cluster", Config{Mode: ModeCluster, Addrs: cl.Addrs()}, cl.Masters[0], cl.KeyOn(t, cl.Masters[0], "budget:")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ReadTimeout = 300 * time.Millisecond
			tc.cfg.NodeFailureThreshold = 5
			tc.cfg.NodeRecoveryTime = time.Hour
			c := newTestClient(t, tc.cfg)
			ctx := testCtx(t, 30*time.Second)
			pipelined := func() error {
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.BLPop(ctx, time.Second, tc.key)
					return nil
				})
				return err
			}
			// Warm: two dedicated connections, since a timed-out one is
			// closed, and a pooled one for Cluster batches.
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					assert.Equal(t, redis.Nil, c.Do(ctx, "blpop", tc.key, "0.3").Err())
				}()
			}
			wg.Wait()
			require.Equal(t, redis.Nil, pipelined())

			tc.node.Pause(t)
			defer tc.node.Resume(t)
			for i, call := range []func() error{
				func() error { return c.Do(ctx, "blpop", tc.key, 1).Err() },
				pipelined,
			} {
				start := time.Now()
				err := call()
				took := time.Since(start)
				var netErr net.Error
				require.True(t, errors.As(err, &netErr) && netErr.Timeout(), "call %d: %v, want a timeout", i, err)
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "call %d", i)
				assert.False(t, isSetupFailure(err), "call %d: the set-up mark reached the caller", i)
				assert.GreaterOrEqual(t, took, 1250*time.Millisecond, "call %d: cut short of its own timeout plus ReadTimeout", i)
				assert.Less(t, took, 5*time.Second, "call %d", i)
			}
			for _, n := range c.Stats().Nodes {
				if n.Addr == tc.node.Addr {
					assert.Equal(t, 2, n.ConsecutiveFailures)
				}
			}
		})
	}
}

type consumed struct{ delivered, left, cancels int }

// consumeWithCancels runs 8 consumers looping on BLPOP with short deadlines
// while total elements are pushed, and counts where the elements went.
// expected, if set, must accept every error a consumer sees.
func consumeWithCancels(t *testing.T, c redis.UniversalClient, srv *redistest.Server, list string, total int,
	expected func(error) bool) consumed {
	ctx := testCtx(t, 60*time.Second)
	var popped sync.Map
	var delivered, cancels atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, time.Duration(1+(w*7+i)%15)*time.Millisecond)
				v, err := c.BLPop(cctx, 10*time.Second, list).Result()
				cancel()
				if err != nil {
					cancels.Add(1)
					if expected != nil && !expected(err) {
						t.Errorf("BLPOP: %v", err)
						return
					}
					continue
				}
				if _, dup := popped.LoadOrStore(v[1], true); dup {
					t.Errorf("element %s delivered twice", v[1])
				}
				delivered.Add(1)
			}
		}()
	}
	for i := range total {
		require.NoError(t, srv.Admin().RPush(ctx, list, strconv.Itoa(i)).Err())
		if i%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	return consumed{delivered: int(delivered.Load()), left: int(srv.Admin().LLen(ctx, list).Val()), cancels: int(cancels.Load())}
}

// Close ends blocked calls, calls waiting for a permit and subscriptions
// promptly; goleak (TestMain) checks nothing is left running.
func TestCloseReleasesLongOperations(t *testing.T) {
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	for _, tc := range []struct {
		name string
		cfg  Config
		node *redistest.Server
		key  string
	}{
		{"standalone", Config{Addrs: []string{srv.Addr}}, srv, "close:list"},
		{"cluster", Config{Mode: ModeCluster, Addrs: cl.Addrs()}, cl.Masters[0], cl.KeyOn(t, cl.Masters[0], "close:")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.MaxLongConnections = 4
			tc.cfg.PoolTimeout = time.Minute
			c, err := NewClient(tc.cfg)
			require.NoError(t, err)
			ctx := testCtx(t, 30*time.Second)

			ps := c.Subscribe(ctx, "close:ch")
			_, err = ps.Receive(ctx)
			require.NoError(t, err)
			msgs := ps.Channel()

			results := make(chan error, 4)
			for range 3 {
				go func() { results <- c.BLPop(ctx, 0, tc.key).Err() }()
			}
			waitBlocked(t, tc.node, 3)
			go func() { results <- c.BLPop(ctx, 0, tc.key).Err() }() // waits for a permit
			require.Eventually(t, func() bool { return len(c.adm.permits) == 4 }, 5*time.Second, time.Millisecond)

			closed := time.Now()
			require.NoError(t, c.Close())
			for range 4 {
				select {
				case err := <-results:
					assert.ErrorIs(t, err, ErrClosed)
				case <-time.After(5 * time.Second):
					t.Fatal("Close did not end a long call")
				}
			}
			select {
			case _, ok := <-msgs:
				assert.False(t, ok, "the subscription delivered after Close")
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not end the subscription")
			}
			assert.Less(t, time.Since(closed), time.Second, "Close was not prompt")
			require.NoError(t, ps.Close())
			assert.Zero(t, len(c.adm.permits), "permits outlived Close")
			waitBlocked(t, tc.node, 0)
		})
	}
}

// In Standalone mode the node's guard sits outside the facade, so it scores
// a blocking call that the facade hands to the long client. A client that
// only blocks must be able to close a half-open breaker with its calls.
func TestBlockingCallClosesHalfOpenBreaker(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, NodeFailureThreshold: 2,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)
	require.Equal(t, redis.Nil, shortBLPop(ctx, c, "probe:list"))

	srv.Kill(t)
	for range 2 {
		require.Error(t, shortBLPop(ctx, c, "probe:list"))
	}
	require.ErrorIs(t, shortBLPop(ctx, c, "probe:list"), ErrNodeUnavailable)
	assert.Equal(t, "open", c.Stats().Nodes[0].State)

	srv.Restart(t)
	redistest.WaitFor(t, 10*time.Second, "a probe to reach the restarted server", func() error {
		if s := c.Stats().Nodes[0].State; s != "half-open" {
			return fmt.Errorf("breaker %s", s)
		}
		return nil
	})
	require.Equal(t, redis.Nil, shortBLPop(ctx, c, "probe:list"))
	assert.Equal(t, "closed", c.Stats().Nodes[0].State, "a blocking call did not close the breaker")
}

// facadeHookFor builds the facade's hooks around a next that does nothing,
// so only classification and admission are measured.
func facadeHookFor(tb testing.TB) (redis.ProcessHook, redis.ProcessPipelineHook) {
	tb.Helper()
	c, err := NewClient(Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Close() })
	h := facadeHook{c.fac}
	return h.ProcessHook(func(context.Context, redis.Cmder) error { return nil }),
		h.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
}

// Admitting an ordinary command or batch allocates nothing.
func TestAdmissionOrdinaryAllocatesNothing(t *testing.T) {
	process, pipeline := facadeHookFor(t)
	ctx := context.Background()
	get := redis.NewStringCmd(ctx, "get", "key")
	xread := redis.NewXStreamSliceCmd(ctx, "xread", "count", 1, "streams", "s", "0")
	batch := []redis.Cmder{get, redis.NewStatusCmd(ctx, "set", "k", "v"), xread}
	for name, f := range map[string]func(){
		"command": func() { _ = process(ctx, get) },
		"XREAD":   func() { _ = process(ctx, xread) },
		"batch":   func() { _ = pipeline(ctx, batch) },
	} {
		assert.Zero(t, testing.AllocsPerRun(1000, f), name)
	}
}

func BenchmarkAdmissionOrdinary(b *testing.B) {
	process, _ := facadeHookFor(b)
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "key")
	b.ReportAllocs()
	for b.Loop() {
		_ = process(ctx, cmd)
	}
}

// BenchmarkAdmissionBlocking is the in-memory cost the long path adds to a
// blocking command: classification, a permit, and a dedicated connection
// from the idle list and back. The connection is never used.
func BenchmarkAdmissionBlocking(b *testing.B) {
	c, err := NewClient(Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}})
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close() })
	long, err := c.adm.client()
	require.NoError(b, err)
	node := long.(*redis.Client)
	own := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	c.adm.put(&dedicated{control: node, sh: &shell{client: own}, conn: own.Conn(), id: 1}, true)
	ctx := context.Background()
	cmd := redis.NewStringSliceCmd(ctx, "blpop", "list", 1)
	b.ReportAllocs()
	for b.Loop() {
		if classifyCmd(cmd) != classBlocking {
			b.Fatal("not blocking")
		}
		if err := c.adm.acquire(ctx); err != nil {
			b.Fatal(err)
		}
		d, _, err := c.adm.take(ctx, node, "")
		if err != nil {
			b.Fatal(err)
		}
		c.adm.put(d, true)
		c.adm.release()
	}
}

// BenchmarkBlockingCall is a BLPOP that finds an element at once, end to
// end, on stock go-redis and on redisguard, without and with a context that
// can be cancelled: the dedicated connection costs no extra round trip.
func BenchmarkBlockingCall(b *testing.B) {
	srv := redistest.StartServer(b)
	stock := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = stock.Close() })
	guard, err := NewClient(Config{Addrs: []string{srv.Addr}})
	require.NoError(b, err)
	b.Cleanup(func() { _ = guard.Close() })
	for _, cl := range []struct {
		name string
		c    redis.UniversalClient
	}{{"go-redis", stock}, {"redisguard", guard}} {
		for _, cancellable := range []bool{false, true} {
			b.Run(cl.name+"/cancellable="+strconv.FormatBool(cancellable), func(b *testing.B) {
				ctx := context.Background()
				require.NoError(b, srv.Admin().Del(ctx, "bench:list").Err())
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					require.NoError(b, srv.Admin().RPush(ctx, "bench:list", "x").Err())
					cctx, cancel := ctx, context.CancelFunc(func() {})
					if cancellable {
						cctx, cancel = context.WithTimeout(ctx, time.Minute)
					}
					b.StartTimer()
					err := cl.c.BLPop(cctx, time.Second, "bench:list").Err()
					b.StopTimer()
					cancel()
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}
