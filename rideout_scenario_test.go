package redisguard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The cluster refuses keyed commands with CLUSTERDOWN for 1.5s: one master's
// view loses a slot, as between a master's FAIL mark and its replica's
// promotion. A GET, an INCR and a BLPOP, alone and in a pipeline, whose
// callers wait 5s are answered once it serves again, the INCR run once and
// each element popped once; a GET whose caller waits 300ms ends typed.
// No breaker opens: the nodes answered all along.
func TestScenarioClusterDownIsRiddenOut(t *testing.T) {
	if testing.Short() {
		t.Skip("scenario")
	}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
	ctx := testCtx(t, time.Minute)
	owner := cl.MasterForSlot(t, 0)
	var other *redistest.Server
	for _, m := range cl.Masters {
		if m != owner {
			other = m
			break
		}
	}

	type result struct {
		name              string
		get, incr, short  error
		getTook, incrTook time.Duration
		count             int64
		pop, pipePop      error         // a BLPOP, alone and in a pipeline, each of an element already there
		popTook           time.Duration // the BLPOP alone
		left              int64         // elements left in their lists: each popped once, none is
	}
	run := func(name string, c redis.UniversalClient) result {
		r := result{name: name}
		// Keys of the master that refuses, and of a slot it still owns.
		key, counter := cl.KeyOn(t, owner, "down:"+name+":k"), cl.KeyOn(t, owner, "down:"+name+":n")
		queue, pipeQueue := cl.KeyOn(t, owner, "down:"+name+":q"), cl.KeyOn(t, owner, "down:"+name+":p")
		require.NoError(t, c.Set(ctx, key, "v", 0).Err())
		require.NoError(t, c.Del(ctx, counter).Err())
		require.NoError(t, c.RPush(ctx, queue, "x").Err())
		require.NoError(t, c.RPush(ctx, pipeQueue, "y").Err())
		// A master whose own view lacks a slot (it gave it up; its peers
		// still name it the owner) takes the cluster for down and refuses
		// every keyed command; the other masters serve.
		require.NoError(t, owner.Admin().Do(ctx, "cluster", "delslots", 0).Err())
		redistest.WaitFor(t, 10*time.Second, "the master to refuse", func() error {
			if err := owner.Admin().Get(ctx, key).Err(); !redis.IsClusterDownError(err) {
				return fmt.Errorf("a GET answered %v", err)
			}
			return nil
		})
		down := time.Now()
		back := make(chan struct{})
		time.AfterFunc(1500*time.Millisecond, func() {
			defer close(back)
			_ = owner.Admin().Do(context.Background(), "cluster", "addslots", 0).Err()
		})
		done := make(chan struct{}, 5)
		go func() {
			call, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			r.pop = c.BLPop(call, 3*time.Second, queue).Err()
			r.popTook = time.Since(down)
			done <- struct{}{}
		}()
		go func() {
			call, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			pipe := c.Pipeline()
			pop := pipe.BLPop(call, 3*time.Second, pipeQueue)
			_, _ = pipe.Exec(call)
			r.pipePop = pop.Err()
			done <- struct{}{}
		}()
		go func() {
			call, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			r.get = c.Get(call, key).Err()
			r.getTook = time.Since(down)
			done <- struct{}{}
		}()
		go func() {
			call, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			r.incr = c.Incr(call, counter).Err()
			r.incrTook = time.Since(down)
			done <- struct{}{}
		}()
		go func() {
			call, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			r.short = c.Get(call, key).Err()
			done <- struct{}{}
		}()
		for range 5 {
			<-done
		}
		<-back
		cl.WaitHealthy(t)
		if n, err := owner.Admin().Get(ctx, counter).Int64(); err == nil {
			r.count = n
		}
		r.left = owner.Admin().LLen(ctx, queue).Val() + owner.Admin().LLen(ctx, pipeQueue).Val()
		assert.NoError(t, c.Set(ctx, cl.KeyOn(t, other, "down:"+name+":o"), "v", 0).Err(), "another master's key")
		return r
	}
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	rs := run("go-redis", stock)
	require.NoError(t, stock.Close())

	events := &eventLog{}
	guard := newTestClient(t, Config{Addrs: cl.Addrs(), OnEvent: events.onEvent})
	rg := run("redisguard", guard)

	show := func(err error) string {
		if err == nil {
			return "ok"
		}
		return err.Error()
	}
	row := func(r result) []string {
		return []string{r.name, show(r.get), fmtDur(r.getTook), show(r.incr), fmtDur(r.incrTook), strconv.FormatInt(r.count, 10), show(r.short),
			show(r.pop), fmtDur(r.popTook), show(r.pipePop), strconv.FormatInt(r.left, 10)}
	}
	table(t, "the cluster answers CLUSTERDOWN for 1.5s",
		[]string{"client", "GET (5s)", "answered after", "INCR (5s)", "answered after", "counter", "GET (300ms)",
			"BLPOP 3s (5s)", "answered after", "BLPOP 3s in a pipeline", "elements left"}, row(rs), row(rg))

	require.NoError(t, rg.get, "a GET with time to wait was not ridden out")
	require.NoError(t, rg.incr, "an INCR with time to wait was not ridden out")
	assert.Equal(t, int64(1), rg.count, "the INCR ran other than once")
	assert.GreaterOrEqual(t, rg.getTook, 1400*time.Millisecond, "answered before the cluster served again?")
	assert.Less(t, rg.getTook, 1500*time.Millisecond+pick(1200*time.Millisecond, 2*time.Second), "answered long after the cluster served again")
	require.NoError(t, rg.pop, "a BLPOP with time to wait was not ridden out")
	require.NoError(t, rg.pipePop, "a BLPOP in a pipeline with time to wait was not ridden out")
	assert.Zero(t, rg.left, "an element was not popped")
	assert.Less(t, rg.popTook, 1500*time.Millisecond+pick(1200*time.Millisecond, 2*time.Second), "the BLPOP answered long after the cluster served again")
	require.ErrorIs(t, rg.short, ErrNotServing, "the 300ms GET")
	assert.False(t, isRedisReply(rg.short), "the raw reply reached the caller")
	assert.Empty(t, events.find(EventBreakerOpened, func(Event) bool { return true }), "a breaker opened on replies")
}

// refusalBesideAnother starts a cluster of three masters and a client that
// knows its slot map, then makes refusing, slot 0's master, answer
// CLUSTERDOWN for counter, a key of slot 0. other is another master, with
// otherKey on it, for the caller to break.
func refusalBesideAnother(t *testing.T, ctx context.Context) (c *Client, refusing, other *redistest.Server, otherKey, counter string) {
	t.Helper()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
	refusing = cl.MasterForSlot(t, 0)
	for _, m := range cl.Masters {
		if m != refusing {
			other = m
		}
	}
	c = newTestClient(t, Config{Addrs: cl.Addrs(), ClusterNodeTimeout: 5 * time.Second})
	otherKey, counter = cl.KeyOn(t, other, "beside:other:"), cl.KeyOn(t, refusing, "beside:n:")
	require.NoError(t, c.Set(ctx, otherKey, "v", 0).Err(), "the client learns the slot map")
	require.NoError(t, refusing.Admin().Do(ctx, "cluster", "delslots", 0).Err())
	redistest.WaitFor(t, 10*time.Second, "the master to refuse", func() error {
		if err := refusing.Admin().Get(ctx, counter).Err(); !redis.IsClusterDownError(err) {
			return fmt.Errorf("a GET answered %v", err)
		}
		return nil
	})
	return c, refusing, other, otherKey, counter
}

// In a cluster pipeline whose first failure is a node's (a master that is
// down), a command another master refuses with CLUSTERDOWN is ridden out
// all the same: it is answered once the master serves again, run once, and
// never reaches the caller as the raw reply. Refused for good, it ends
// typed.
func TestClusterBatchRidesOutRefusalsBesideAFailedNode(t *testing.T) {
	if testing.Short() {
		t.Skip("scenario")
	}
	ctx := testCtx(t, time.Minute)
	c, refusing, dead, deadKey, counter := refusalBesideAnother(t, ctx)
	dead.Kill(t)

	pipeline := func(d time.Duration) (deadErr, incrErr error) {
		call, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		var get *redis.StringCmd
		var incr *redis.IntCmd
		_, _ = c.Pipelined(call, func(p redis.Pipeliner) error {
			get = p.Get(call, deadKey) // first: its node's error is the batch's
			incr = p.Incr(call, counter)
			return nil
		})
		return get.Err(), incr.Err()
	}

	deadErr, incrErr := pipeline(300 * time.Millisecond)
	require.ErrorAs(t, deadErr, new(*NodeError), "the down master's command")
	require.ErrorIs(t, incrErr, ErrNotServing, "refused until the caller's deadline")
	assert.False(t, isRedisReply(incrErr), "the raw reply reached the caller: %v", incrErr)

	back := time.AfterFunc(time.Second, func() {
		_ = refusing.Admin().Do(context.Background(), "cluster", "addslots", 0).Err()
	})
	defer back.Stop()
	deadErr, incrErr = pipeline(5 * time.Second)
	require.ErrorAs(t, deadErr, new(*NodeError), "the down master's command")
	require.NoError(t, incrErr, "the refused INCR was not ridden out")
	n, err := refusing.Admin().Get(ctx, counter).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the INCR ran other than once")
}

// The same pipeline when the first command's master hangs: its error comes
// when the caller's deadline has passed, and the refused INCR beside it ends
// typed all the same, not as the raw reply, and has not run.
func TestClusterBatchTypesRefusalsBesideAHungNode(t *testing.T) {
	if testing.Short() {
		t.Skip("scenario")
	}
	ctx := testCtx(t, time.Minute)
	c, refusing, hung, hungKey, counter := refusalBesideAnother(t, ctx)
	hung.Pause(t)

	call, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var get *redis.StringCmd
	var incr *redis.IntCmd
	_, _ = c.Pipelined(call, func(p redis.Pipeliner) error {
		get = p.Get(call, hungKey) // first: its node's error is the batch's
		incr = p.Incr(call, counter)
		return nil
	})
	require.Error(t, get.Err(), "the hung master's command")
	require.ErrorIs(t, incr.Err(), ErrNotServing, "the refused INCR")
	assert.False(t, isRedisReply(incr.Err()), "the raw reply reached the caller: %v", incr.Err())

	hung.Resume(t)
	require.NoError(t, refusing.Admin().Do(ctx, "cluster", "addslots", 0).Err())
	n, err := refusing.Admin().Get(ctx, counter).Int64()
	if err != redis.Nil {
		require.NoError(t, err)
	}
	assert.Zero(t, n, "a refused INCR ran")
}

// A managed service's primary endpoint: one name, which leads new
// connections to the new primary after a failover, while the pooled ones
// stay with the old primary, now a replica. go-redis alone sends a write
// again after READONLY on a fresh connection; redisguard rides READONLY out
// the same way, dropping the idle connections so that new dials follow the
// name. No write fails, and none runs on the demoted node.
func TestScenarioReadOnlyBehindANameIsRiddenOut(t *testing.T) {
	sideBySide(t)
	const writers = 20
	type result struct {
		name             string
		writes, failed   int
		errs             string
		refusedByDemoted int // SETs the demoted primary answered READONLY
	}
	run := func(name string, build func(dial func(context.Context, string, string) (net.Conn, error)) redis.UniversalClient) result {
		primary := redistest.StartServer(t)
		replica := redistest.StartReplica(t, primary)
		var target atomic.Pointer[string]
		target.Store(&primary.Addr)
		// What DNS does for the name: each new connection goes wherever it
		// points now.
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *target.Load())
		}
		c := build(dial)
		defer c.Close()
		stop := make(chan struct{})
		rec := make(chan *opRecord, 1)
		go func() {
			rec <- runPacedUntil(writers, 5*time.Millisecond, stop, func(ctx context.Context, rng *rand.Rand, seq int) (int, error) {
				return 0, c.Set(ctx, "name:"+strconv.Itoa(seq>>32), strconv.Itoa(seq), 0).Err()
			})
		}()
		time.Sleep(time.Second)
		ctx := testCtx(t, 30*time.Second)
		// The failover, as a managed service runs it: the replica takes
		// over, the old primary follows it, and the name moves.
		require.NoError(t, replica.Admin().Do(ctx, "replicaof", "no", "one").Err())
		host, port, _ := net.SplitHostPort(replica.Addr)
		require.NoError(t, primary.Admin().Do(ctx, "replicaof", host, port).Err())
		refusedBefore := commandStatField(t, []*redistest.Server{primary}, "set", "rejected_calls")
		target.Store(&replica.Addr)
		time.Sleep(2 * time.Second)
		close(stop)
		r := <-rec
		errs := r.filter(-1, 0, time.Hour, errOps)
		return result{name: name, writes: len(r.filter(-1, 0, time.Hour, nil)), failed: len(errs), errs: errorKinds(errs),
			refusedByDemoted: commandStatField(t, []*redistest.Server{primary}, "set", "rejected_calls") - refusedBefore}
	}
	rs := run("go-redis", func(dial func(context.Context, string, string) (net.Conn, error)) redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: "primary.example:6379", Dialer: dial, PoolSize: writers})
	})
	rg := run("redisguard", func(dial func(context.Context, string, string) (net.Conn, error)) redis.UniversalClient {
		c, err := NewClient(Config{Mode: ModeStandalone, Addrs: []string{"primary.example:6379"}, Dialer: dial})
		require.NoError(t, err)
		return c
	})
	row := func(r result) []string {
		return []string{r.name, strconv.Itoa(r.writes), strconv.Itoa(r.failed), strconv.Itoa(r.refusedByDemoted)}
	}
	table(t, fmt.Sprintf("the primary's name moves to the promoted replica: %d writers", writers),
		[]string{"client", "writes", "failed", "SETs the demoted primary refused (READONLY)"}, row(rs), row(rg))
	t.Logf("go-redis errors: %s", rs.errs)
	t.Logf("redisguard errors: %s", rg.errs)
	assert.Zero(t, rg.failed, "writes failed: %s", rg.errs)
	// Each pooled connection meets the demoted primary once at most: the
	// first READONLY drops the idle ones, and each busy one is dropped once
	// its own READONLY has come back.
	assert.LessOrEqual(t, rg.refusedByDemoted, writers, "writes kept going to the demoted primary")
}

// A BLPOP waits on a master that a graceful CLUSTER FAILOVER turns into a
// replica: Redis ends it with "UNBLOCKED ... instance state changed", a
// reply that says it did not run. It is sent again, where its key is
// served now, and pops the element pushed there after the failover, once.
// go-redis alone, beside it, hands the caller the reply.
func TestScenarioBlockingCallOnADemotedMasterFollowsIt(t *testing.T) {
	sideBySide(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	owner := cl.Masters[1]
	partner := replicaOf(cl, owner)
	guardQ, stockQ := cl.KeyOn(t, owner, "demoted:guard:"), cl.KeyOn(t, owner, "demoted:stock:")
	c := newTestClient(t, Config{Addrs: cl.Addrs()})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = stock.Close() })
	ctx := testCtx(t, time.Minute)
	require.NoError(t, c.Ping(ctx).Err())
	require.NoError(t, stock.Ping(ctx).Err())

	type popped struct {
		val  []string
		err  error
		took time.Duration
	}
	start := time.Now()
	pop := func(cl redis.UniversalClient, q string) <-chan popped {
		ch := make(chan popped, 1)
		go func() {
			call, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			v, err := cl.BLPop(call, 10*time.Second, q).Result()
			ch <- popped{v, err, time.Since(start)}
		}()
		return ch
	}
	guard, alone := pop(c, guardQ), pop(stock, stockQ)
	redistest.WaitFor(t, 5*time.Second, "both BLPOPs to wait on the master", func() error {
		if n := blockedClients(t, owner); n < 2 {
			return fmt.Errorf("%d blocked", n)
		}
		return nil
	})
	require.NoError(t, partner.Admin().Do(ctx, "cluster", "failover").Err())
	redistest.WaitFor(t, 10*time.Second, "the replica to be promoted", func() error {
		if r := role(partner); r != "master" {
			return fmt.Errorf("role %q", r)
		}
		return nil
	})
	promoted := time.Since(start)
	require.NoError(t, partner.Admin().RPush(ctx, guardQ, "x").Err())
	require.NoError(t, partner.Admin().RPush(ctx, stockQ, "x").Err())
	g, s := <-guard, <-alone
	show := func(p popped) string {
		if p.err != nil {
			return p.err.Error()
		}
		return fmt.Sprint(p.val)
	}
	t.Logf("promoted %v after the BLPOPs were sent; go-redis alone: %s after %v; redisguard: %s after %v",
		promoted.Round(time.Millisecond), show(s), s.took.Round(time.Millisecond), show(g), g.took.Round(time.Millisecond))
	require.NoError(t, g.err, "the BLPOP on the demoted master was not sent again")
	assert.Equal(t, []string{guardQ, "x"}, g.val)
	assert.Zero(t, partner.Admin().LLen(ctx, guardQ).Val(), "the element was not popped")
	assert.Less(t, g.took, 10*time.Second, "the BLPOP waited its whole timeout again")
}
