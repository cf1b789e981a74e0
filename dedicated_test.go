package redisguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Twenty BLPOPs end on their context deadlines, and nothing of theirs
// reaches a later command: no element is taken by an abandoned call, and
// every later call gets its own reply. The cancelled calls' connections are
// closed; the twenty later calls, one after another, share one new one.
func TestCancelBlockingDeadlines(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 32})
	ctx := testCtx(t, 60*time.Second)
	const n = 20
	const list = "cancel:list"

	var wg sync.WaitGroup
	late := make([]time.Duration, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(300*time.Millisecond + time.Duration(i)*10*time.Millisecond)
			cctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			errs[i] = c.BLPop(cctx, 30*time.Second, list).Err()
			late[i] = time.Since(deadline)
		}()
	}
	wg.Wait()
	for i := range n {
		assert.ErrorIs(t, errs[i], context.DeadlineExceeded, "call %d", i)
		// Generous: the machine is noisy. The socket deadline alone would
		// end it at deadline+unblockGrace; CLIENT UNBLOCK ends it sooner.
		assert.Less(t, late[i], unblockGrace, "call %d returned %v after its deadline", i, late[i])
	}
	assert.Zero(t, blockedClients(t, srv), "the server still holds a cancelled BLPOP")
	assert.Zero(t, c.Stats().LongInUse)

	require.NoError(t, c.Ping(ctx).Err()) // the ordinary pool's connection, opened before counting
	connsBefore := srv.Info(t, "stats")["total_connections_received"]
	for i := range n {
		require.NoError(t, srv.Admin().RPush(ctx, list, strconv.Itoa(i)).Err())
	}
	assert.Equal(t, int64(n), srv.Admin().LLen(ctx, list).Val(), "a cancelled BLPOP took an element")
	for i := range n {
		v, err := c.BLPop(ctx, time.Second, list).Result()
		require.NoError(t, err)
		assert.Equal(t, []string{list, strconv.Itoa(i)}, v, "a later BLPOP got someone else's reply")
		key := "cancel:k" + strconv.Itoa(i)
		require.NoError(t, c.Set(ctx, key, i, time.Minute).Err())
		assert.Equal(t, strconv.Itoa(i), c.Get(ctx, key).Val())
	}
	before, err := strconv.Atoi(connsBefore)
	require.NoError(t, err)
	after, err := strconv.Atoi(srv.Info(t, "stats")["total_connections_received"])
	require.NoError(t, err)
	assert.Equal(t, before+1, after, "connections the twenty later calls opened")
}

// Cancellation without a deadline ends a BLPOP that would otherwise wait
// forever, and leaves the list alone.
func TestCancelBlockingWithoutDeadline(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"BLPOP", func(ctx context.Context) error { return c.BLPop(ctx, 0, "nodeadline:list").Err() }},
		{"pipeline", func(ctx context.Context) error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.BLPop(ctx, 0, "nodeadline:list")
				p.BLPop(ctx, 0, "nodeadline:list")
				return nil
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tc.call(cctx) }()
			waitBlocked(t, srv, 1)
			cancelled := time.Now()
			cancel()
			select {
			case err := <-done:
				assert.ErrorIs(t, err, context.Canceled)
				assert.Less(t, time.Since(cancelled), time.Second)
			case <-time.After(10 * time.Second):
				t.Fatal("cancelling did not end the blocking call")
			}
			assert.Zero(t, blockedClients(t, srv))
			require.NoError(t, c.RPush(ctx, "nodeadline:list", "x").Err())
			assert.Equal(t, int64(1), c.LLen(ctx, "nodeadline:list").Val(), "the cancelled call took the element")
			assert.Equal(t, []string{"nodeadline:list", "x"}, c.BLPop(ctx, time.Second, "nodeadline:list").Val())
		})
	}
}

// When the server hangs, a cancelled call cannot be unblocked; it ends by
// the socket deadline, unblockGrace after its own, and its connection is
// thrown away rather than reused.
func TestCancelBlockingOnHungServer(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)

	deadline := time.Now().Add(time.Second)
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.BLPop(cctx, 30*time.Second, "hung:list").Err() }()
	waitBlocked(t, srv, 1)
	srv.Pause(t)
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		late := time.Since(deadline)
		t.Logf("returned %v after its deadline", late)
		assert.Less(t, late, unblockGrace+2*time.Second, "the call outlived its socket deadline")
	case <-time.After(20 * time.Second):
		srv.Resume(t)
		t.Fatal("a cancelled call on a hung server never returned")
	}
	assert.Zero(t, c.Stats().LongInUse)
	srv.Resume(t)

	waitBlocked(t, srv, 0)
	require.NoError(t, c.RPush(ctx, "hung:list", "x").Err())
	assert.Equal(t, []string{"hung:list", "x"}, c.BLPop(ctx, time.Second, "hung:list").Val())
}

// A cancelled blocking call with no deadline returns promptly, gives its
// permit back and takes nothing afterwards, even where CLIENT UNBLOCK
// cannot end it: for a user without the permission to send it (asked
// once, not once per cancellation or per retry), and on a server that has
// stopped answering. Its connection is closed instead.
func TestCancelledBlockingCallEndsWithoutUnblock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limited bool // as a user denied CLIENT UNBLOCK
		hang    bool // the server hangs while the call waits
	}{
		{name: "no permission", limited: true},
		{name: "hung server", hang: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			cfg := Config{Addrs: []string{srv.Addr}, MaxLongConnections: 4}
			if tc.limited {
				cfg.Username, cfg.Password = limitedUser(t, srv)
			}
			c := newTestClient(t, cfg)
			ctx := testCtx(t, 60*time.Second)
			list := "nounblock:" + strings.ReplaceAll(tc.name, " ", "-")
			calls := []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"BLPOP", func(ctx context.Context) error { return c.BLPop(ctx, 0, list).Err() }},
				{"Do", func(ctx context.Context) error { return c.Do(ctx, "blpop", list, 0).Err() }},
				{"pipeline", func(ctx context.Context) error {
					_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
						p.BLPop(ctx, 0, list)
						return nil
					})
					return err
				}},
			}
			for _, call := range calls {
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- call.call(cctx) }()
				waitBlocked(t, srv, 1)
				if tc.hang {
					srv.Pause(t)
				}
				cancelled := time.Now()
				cancel()
				select {
				case err := <-done:
					assert.ErrorIs(t, err, context.Canceled, call.name)
					took := time.Since(cancelled)
					t.Logf("%s: returned %v after its cancellation", call.name, took)
					assert.Less(t, took, unblockGrace+time.Second, "%s: the cancelled call was slow to return", call.name)
				case <-time.After(20 * time.Second):
					if tc.hang {
						srv.Resume(t)
					}
					t.Fatalf("%s: the cancelled call never returned", call.name)
				}
				assert.Zero(t, c.Stats().LongInUse, "%s: the permit was kept", call.name)
				if tc.hang {
					srv.Resume(t)
				}
				waitBlocked(t, srv, 0) // the server has dropped the cancelled call's connection
				require.NoError(t, srv.Admin().RPush(ctx, list, "x").Err())
				assert.Equal(t, int64(1), srv.Admin().LLen(ctx, list).Val(), "%s: the cancelled call took the element", call.name)
				require.NoError(t, srv.Admin().Del(ctx, list).Err())
			}
			if tc.limited {
				assert.LessOrEqual(t, unblockDenials(t, srv), int64(1), "CLIENT UNBLOCK was tried again after its denial")
			}
		})
	}
}

// Consumers cancelled at random instants while a producer pushes: every
// element is either delivered to exactly one consumer or still in the list.
// Stock go-redis, whose socket deadline fires even as the server pops, is
// run the same way for comparison; its losses are reported, not asserted.
func TestCancelBlockingIsLossless(t *testing.T) {
	srv := redistest.StartServer(t)
	total := pick(5000, 1000)

	stock := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16, ContextTimeoutEnabled: true})
	defer stock.Close()
	s := consumeWithCancels(t, stock, srv, "lossless:stock", total, nil)

	guard := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 16})
	g := consumeWithCancels(t, guard, srv, "lossless:guard", total, func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded)
	})

	table(t, fmt.Sprintf("BLPOP cancelled by 1-15ms deadlines while %d elements are pushed", total),
		[]string{"client", "delivered", "left in list", "lost", "calls cancelled"},
		[]string{"go-redis", fmtCount(s.delivered), fmtCount(s.left), fmtCount(total - s.delivered - s.left), fmtCount(s.cancels)},
		[]string{"redisguard", fmtCount(g.delivered), fmtCount(g.left), fmtCount(total - g.delivered - g.left), fmtCount(g.cancels)})
	assert.Equal(t, total, g.delivered+g.left, "elements were lost")
	assert.Positive(t, g.cancels, "no call was cancelled: the test proves nothing")
}

// An idle dedicated connection that the server has dropped is replaced once,
// as go-redis replaces a pooled one, and the caller never sees the reset.
func TestLongConnectionResetIsRetried(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)
	require.Equal(t, redis.Nil, shortBLPop(ctx, c, "reset:list"))
	require.NoError(t, srv.Admin().ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err())
	require.NoError(t, srv.Admin().RPush(ctx, "reset:list", "v").Err())
	assert.Equal(t, []string{"reset:list", "v"}, c.BLPop(ctx, time.Second, "reset:list").Val())
}

// A blocking call whose context ends while the server holds it postponed
// (CLIENT PAUSE WRITE, or the old master's write pause during CLUSTER
// FAILOVER) is ended with CLIENT UNBLOCK ... ERROR, never ... TIMEOUT, which
// crashes Redis before redis/redis#14164 (Valkey before valkey-io/valkey#2117):
// "Guru Meditation: Unknown btype in replyToBlockedClientTimedOut()".
func TestBlockingCancelDuringWritePauseKeepsServerUp(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: time.Second})
	require.NoError(t, c.Ping(testCtx(t, 5*time.Second)).Err())
	require.NoError(t, srv.Admin().Do(testCtx(t, 5*time.Second), "client", "pause", 3000, "write").Err())

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := c.BLPop(ctx, 10*time.Second, "unblock:paused").Err()
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "BLPOP: %v", err)

	time.Sleep(200 * time.Millisecond)
	assert.True(t, srv.Running(), "redis-server exited: CLIENT UNBLOCK crashed it")
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	assert.NoError(t, srv.Admin().Ping(pctx).Err(), "redis-server no longer answers")
}

// CLIENT UNBLOCK ... ERROR on a call the server has postponed (a write
// pause) answers -UNBLOCKED, but Redis 7.0 keeps the command and runs it when
// the pause ends: a second reply for one command. A connection on which
// CLIENT UNBLOCK was sent is closed, never reused, so no later call reads
// that reply ("can't parse int reply") and the server drops the postponed
// command before it runs, losing no element.
func TestCancelledPostponedBlockingCallLeavesNoReplyBehind(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: time.Second, MaxLongConnections: 1,
		ClientName: "unblock-postponed"})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, srv.Admin().RPush(ctx, "unblock:queue", "a").Err())
	// One dedicated connection, warmed up: every blocking call below uses it.
	require.ErrorIs(t, c.BLPop(ctx, 100*time.Millisecond, "unblock:warm").Err(), redis.Nil)

	require.NoError(t, srv.Admin().Do(ctx, "client", "pause", 1500, "write").Err())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.BLPop(short, 10*time.Second, "unblock:queue").Err()
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the postponed BLPOP, cancelled")
	// The kill normally lands before BLPop returns; on a loaded machine it
	// may finish in the background. Either way the connection that carried
	// the BLPOP must be gone, and its held command with it, before the
	// pause ends.
	redistest.WaitFor(t, 5*time.Second, "the cancelled call's connection to be killed", func() error {
		list, err := srv.Admin().ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name=unblock-postponed ") && strings.Contains(line, " cmd=blpop ") {
				return errors.New("the BLPOP's connection is still open: " + line)
			}
		}
		return nil
	})

	// The pause ends; a postponed command still held by the server would
	// now pop "a" and send its reply down the connection.
	require.NoError(t, srv.Admin().Do(ctx, "client", "unpause").Err())
	time.Sleep(200 * time.Millisecond)
	got, err := c.BLPop(ctx, 100*time.Millisecond, "unblock:other").Result()
	assert.ErrorIs(t, err, redis.Nil, "the next blocking call read someone else's reply: %v", got)
	n, err := srv.Admin().LLen(ctx, "unblock:queue").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the cancelled BLPOP popped the element after all, and its reply was lost")
}

// A blocking call behind an open breaker fails at once, typed; one already
// waiting when its node hangs returns by its deadline, as go-redis's does
// with ContextTimeoutEnabled, once the node's other traffic has opened the
// breaker: an UNBLOCK would wait for a server that does not answer.
func TestBlockingCallOnHungNodeKeepsItsDeadline(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
	sick := cl.Masters[1]
	key := cl.KeyOn(t, sick, "hung:q:")
	c := newTestClient(t, Config{Addrs: cl.Addrs(), ReadTimeout: 300 * time.Millisecond})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = stock.Close() })
	ctx := testCtx(t, 60*time.Second)
	require.Equal(t, redis.Nil, c.BLPop(ctx, 100*time.Millisecond, key).Err()) // a dedicated connection, idle

	// The service's other traffic to the node, as a real one has.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.Get(ctx, key).Err()
			time.Sleep(10 * time.Millisecond)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	waits := map[string]time.Duration{}
	errs := map[string]error{}
	var mu sync.Mutex
	var calls sync.WaitGroup
	for name, cl := range map[string]redis.UniversalClient{"go-redis": stock, "redisguard": c} {
		calls.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			start := time.Now()
			err := cl.BLPop(dctx, 10*time.Second, key).Err()
			mu.Lock()
			waits[name], errs[name] = time.Since(start), err
			mu.Unlock()
		})
	}
	time.Sleep(200 * time.Millisecond)
	sick.Pause(t)
	calls.Wait()
	t.Logf("BLPOP with a 2s deadline, node hung 200ms in: go-redis %v (%v), redisguard %v (%v)",
		waits["go-redis"].Round(time.Millisecond), errs["go-redis"], waits["redisguard"].Round(time.Millisecond), errs["redisguard"])
	assert.ErrorIs(t, errs["redisguard"], context.DeadlineExceeded)
	assert.LessOrEqual(t, waits["redisguard"], 2100*time.Millisecond, "the waiting BLPOP missed its deadline")

	// Behind the open breaker: at once, typed.
	require.Eventually(t, func() bool { return breakerState(c, sick.Addr) == "open" }, 5*time.Second, 10*time.Millisecond)
	start := time.Now()
	err := c.BLPop(ctx, 10*time.Second, key).Err()
	took := time.Since(start)
	assert.ErrorIs(t, err, ErrNodeUnavailable)
	assert.Less(t, took, 10*time.Millisecond, "BLPOP behind an open breaker")
	sick.Resume(t)
}

// Cancelling blocking calls asks after the node's breaker without adding a
// node of its own: Stats lists the one server a Standalone client talks to.
func TestCancelledBlockingCallsAddNoNode(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 10*time.Second)
	for range 5 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		_ = c.BLPop(cctx, 10*time.Second, "nonode:q").Err()
		cancel()
	}
	var addrs []string
	for _, n := range c.Stats().Nodes {
		addrs = append(addrs, n.Addr)
	}
	assert.Equal(t, []string{srv.Addr}, addrs)
}

// Cancelled blocking calls discard their connections, but not the go-redis
// clients under them: an extension that keeps state per client (a metrics
// callback) is given one client per concurrent dedicated connection, not
// one per call.
func TestInstrumentRunsOncePerDedicatedClient(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)
	var mu sync.Mutex
	given := 0
	require.NoError(t, c.Instrument(func(redis.UniversalClient) error {
		mu.Lock()
		given++
		mu.Unlock()
		return nil
	}))
	for range 10 {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		require.ErrorIs(t, c.BLPop(short, 0, "shell:q").Err(), context.DeadlineExceeded)
		cancel()
		list, err := srv.Admin().ClientList(ctx).Result()
		require.NoError(t, err)
		assert.NotContains(t, list, "cmd=blpop", "the cancelled call's connection is closed")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 4, given, "the ordinary and Watch clients, the long client and one dedicated client")
}

// A BLPOP parked on a master that hangs ends at its deadline with the
// caller's own error, and once the replica is promoted the next one is
// served by the new owner. go-redis alone is measured beside.
func TestBlockingCallFollowsPromotion(t *testing.T) {
	sideBySide(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	owner := cl.Masters[2]
	partner := replicaOf(cl, owner)
	key := cl.KeyOn(t, owner, "promoted:q:")
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), DialTimeout: time.Second, ReadTimeout: time.Second})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DialTimeout: time.Second,
		ReadTimeout: time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = stock.Close() })
	ctx := testCtx(t, time.Minute)
	require.Equal(t, redis.Nil, c.BLPop(ctx, 100*time.Millisecond, key).Err())

	// The service's other traffic to the node, which opens its breaker.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			wg.Go(func() {
				// Longer than ReadTimeout: a timeout of the read is the
				// node's failure, an end of the caller's context is not.
				gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = c.Get(gctx, key).Err()
				cancel()
			})
		}
	})
	defer func() { close(stop); wg.Wait() }()

	parked := make(chan error, 1)
	var parkedFor time.Duration
	go func() {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start := time.Now()
		err := c.BLPop(dctx, 10*time.Second, key).Err()
		parkedFor = time.Since(start)
		parked <- err
	}()
	time.Sleep(200 * time.Millisecond)
	paused := time.Now()
	owner.Pause(t)
	defer owner.Resume(t)
	assert.ErrorIs(t, <-parked, context.DeadlineExceeded, "the parked BLPOP")
	assert.LessOrEqual(t, parkedFor, 2100*time.Millisecond, "the parked BLPOP missed its deadline")

	promotedAfter := waitPromoted(partner, paused, 20*time.Second)
	require.Positive(t, promotedAfter, "the replica was not promoted")
	promoted := paused.Add(promotedAfter)
	// popAfter pushes and pops through cl until a pop returns an element,
	// and says how long after the promotion that was.
	popAfter := func(cl redis.UniversalClient, within time.Duration) time.Duration {
		for i := 0; time.Since(promoted) < within; i++ {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			v := "v" + strconv.Itoa(i)
			var got []string
			err := cl.RPush(cctx, key, v).Err()
			if err == nil {
				got, err = cl.BLPop(cctx, time.Second, key).Result()
			}
			cancel()
			if err == nil && len(got) == 2 {
				return time.Since(promoted)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return -1
	}
	var guardAfter, stockAfter time.Duration
	var both sync.WaitGroup
	both.Go(func() { guardAfter = popAfter(c, 6*time.Second) })
	both.Go(func() { stockAfter = popAfter(stock, 6*time.Second) })
	both.Wait()
	show := func(d time.Duration) string {
		if d < 0 {
			return "none within 6s"
		}
		return d.Round(time.Millisecond).String()
	}
	t.Logf("replica promoted %v after the pause; first BLPOP served after the promotion: go-redis %s, redisguard %s",
		promotedAfter.Round(time.Millisecond), show(stockAfter), show(guardAfter))
	require.Positive(t, guardAfter, "no BLPOP was served by the new owner")
	assert.LessOrEqual(t, guardAfter, 3*time.Second, "BLPOP followed the promotion too slowly")
}
