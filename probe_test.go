package redisguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// goroutinesIn counts the goroutines whose stack holds fn. A goroutine that
// a background.Group has started but that has not run yet shows only the
// group's frame, which does not say what it will run: the count is taken
// once no goroutine is in that state.
func goroutinesIn(fn string) int {
	var gs [][]byte
	for range 1000 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		gs = bytes.Split(buf, []byte("\n\n"))
		if !slices.ContainsFunc(gs, notRunYet) {
			break
		}
		runtime.Gosched()
	}
	n := 0
	for _, g := range gs {
		if bytes.Contains(g, []byte(fn)) {
			n++
		}
	}
	return n
}

// notRunYet reports whether g, one goroutine's stack, is that of a
// goroutine a background.Group started, before it ran its function.
func notRunYet(g []byte) bool {
	lines := bytes.Split(g, []byte("\n"))
	return len(lines) >= 4 && bytes.HasSuffix(lines[1], []byte("internal/background.(*Group).Go.func1()")) &&
		bytes.HasPrefix(lines[3], []byte("created by "))
}

// A closed node has no prober; an open one has exactly one, however many
// commands its breaker refuses; it stops once the node answers, and the
// breaker closes (at the node's first answered command, or at the prober's
// second answered probe).
func TestProberRunsOnlyWhileTheBreakerIsOpen(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, NodeFailureThreshold: 1, ReadTimeout: 300 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)
	const run = "github.com/redisguard/redisguard.(*prober).run("
	require.NoError(t, c.Ping(ctx).Err())
	assert.Zero(t, goroutinesIn(run), "a prober for a healthy node")

	srv.Kill(t)
	require.Error(t, c.Ping(ctx).Err())
	for range 100 {
		require.ErrorIs(t, c.Ping(ctx).Err(), ErrNodeUnavailable)
	}
	// The prober's goroutine may not have run yet on a loaded machine:
	// wait for it, then hold the count to one.
	redistest.WaitFor(t, 5*time.Second, "one prober for the open node", func() error {
		if n := goroutinesIn(run); n != 1 {
			return fmt.Errorf("%d probers", n)
		}
		return nil
	})

	srv.Restart(t)
	redistest.WaitFor(t, 10*time.Second, "the prober to find the node and stop", func() error {
		if s := c.nodes.get(srv.Addr).br.State(); s == breaker.Open {
			return fmt.Errorf("breaker %v", s)
		}
		if n := goroutinesIn(run); n != 0 {
			return fmt.Errorf("%d probers", n)
		}
		return nil
	})
	require.NoError(t, c.Ping(ctx).Err())
	assert.Equal(t, breaker.Closed, c.nodes.get(srv.Addr).br.State())
}

// Close stops the probers and whatever probes they have in flight, even on
// a node that accepts connections and never answers.
func TestCloseStopsProbers(t *testing.T) {
	srv := redistest.StartServer(t)
	before := goleak.IgnoreCurrent()
	c, err := NewClient(Config{Addrs: []string{srv.Addr}, NodeFailureThreshold: 1, ReadTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	srv.Pause(t)
	require.Error(t, c.Ping(ctx).Err())
	redistest.WaitFor(t, 5*time.Second, "a probe in flight", func() error {
		if goroutinesIn("(*prober).probeUntilRecovered.func") == 0 {
			return fmt.Errorf("no probe in flight")
		}
		return nil
	})
	closed := time.Now()
	require.NoError(t, c.Close())
	assert.Less(t, time.Since(closed), time.Second, "Close waited for a probe to time out")
	goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// A node that fails again soon after recovering starts its next round of
// probes later; the client passes NodeRecoveryTime on as the schedule's
// longest delay.
func TestProbeScheduleFollowsNodeRecoveryTime(t *testing.T) {
	c := newTestClient(t, Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}, NodeRecoveryTime: 3 * time.Second})
	n := c.nodes.get("127.0.0.1:1")
	now := time.Now()
	assert.LessOrEqual(t, n.sched.Next(now.Add(time.Hour), false), time.Duration(float64(3*time.Second)*1.2))
	assert.GreaterOrEqual(t, n.sched.Next(now.Add(time.Hour), false), time.Duration(float64(3*time.Second)*0.8))
}

// A probe waiting on a server that does not answer ends when its context is
// cancelled, long before its wait is up: go-redis only turns a deadline into
// the socket's, so Close's cancellation must close the probe's client.
func TestProbeEndsWhenCancelled(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Pause(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := probeAddr(ctx, &redis.Options{DialTimeout: 10 * time.Second}, srv.Addr, 10*time.Second, "ping")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.Error(t, err)
		assert.Less(t, time.Since(start), 2*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled probe kept waiting for its answer")
	}
	srv.Resume(t)
}

// A node nobody sends to: its breaker opened, the server came back, and no
// command follows. The answered probes close the breaker by themselves, and
// the closed event tells how long the node was really out.
func TestIdleBreakerClosesOnItsProbes(t *testing.T) {
	srv := redistest.StartServer(t)
	events := &eventLog{}
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, OnEvent: events.onEvent})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	srv.Kill(t)
	for i := 0; i < 100 && c.Stats().Nodes[0].State != "open"; i++ {
		require.Error(t, c.Ping(ctx).Err())
	}
	opened := events.waitEvent(t, 5*time.Second, EventBreakerOpened, func(Event) bool { return true })
	time.Sleep(time.Second) // the outage
	srv.Restart(t)
	back := time.Now()
	closedAt := events.waitEvent(t, 5*time.Second, EventBreakerClosed, func(Event) bool { return true })
	closed := events.find(EventBreakerClosed, func(Event) bool { return true })[0]
	t.Logf("server back %v after the opening; breaker closed %v after that, reporting %v out",
		back.Sub(opened).Round(time.Millisecond), closedAt.Sub(back).Round(time.Millisecond), closed.Duration.Round(time.Millisecond))
	assert.Less(t, closedAt.Sub(back), time.Second, "the breaker stayed half-open without traffic")
	assert.InDelta(t, float64(back.Sub(opened)), float64(closed.Duration), float64(500*time.Millisecond),
		"the closed event's outage is not the node's")
	assert.Equal(t, "closed", c.Stats().Nodes[0].State)
}

// A node that stays down longer than probeIdleAfter, with no command sent
// to it meanwhile, is still probed: the client knows no other node, so when
// the server comes back its breaker closes by itself, and the first command
// after that finds it closed (go-redis alone would simply dial). The fake
// clock moves the idle time; the probes themselves are real.
func TestIdleNodeIsProbedPastProbeIdleAfter(t *testing.T) {
	srv := redistest.StartServer(t)
	c, clk := newFakeClockClient(t, Config{Addrs: []string{srv.Addr}, NodeFailureThreshold: 1,
		ReadTimeout: 300 * time.Millisecond, NodeRecoveryTime: 200 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	srv.Kill(t)
	require.Error(t, c.Ping(ctx).Err())
	n := c.nodes.get(srv.Addr)
	require.Equal(t, breaker.Open, n.br.State())

	clk.Advance(2 * probeIdleAfter)
	require.True(t, n.idle(clk.Now()))
	before := n.probes.Load()
	redistest.WaitFor(t, 10*time.Second, "two probes after the node went idle", func() error {
		if got := n.probes.Load() - before; got < 2 {
			return fmt.Errorf("%d probes", got)
		}
		return nil
	})

	srv.Restart(t)
	redistest.WaitFor(t, 10*time.Second, "the breaker to close without a command", func() error {
		if s := n.br.State(); s != breaker.Closed {
			return fmt.Errorf("breaker %v", s)
		}
		return nil
	})
	require.NoError(t, c.Ping(ctx).Err())
}

// In Cluster mode a node the slot map no longer names, which nobody sends
// to, stops being probed after probeIdleAfter (a removed member is not
// probed for ever); a later map that names it again starts its prober.
func TestProbingFollowsTheSlotMap(t *testing.T) {
	resolved, err := Config{Mode: ModeCluster, Addrs: []string{"127.0.0.1:7000"}}.resolve()
	require.NoError(t, err)
	clk := clock.NewFake(healthEpoch)
	k := newCore(resolved, clk)
	topo := newTopology(k)
	probed := make(chan string, 100)
	s := newNodeSet(k, topo, func(_ context.Context, addr string, _ time.Duration) error {
		probed <- addr
		return errors.New("still down")
	})
	t.Cleanup(s.close)
	const member, gone = "127.0.0.1:7000", "127.0.0.1:7001"
	topo.view.Store(slotmap.New([]redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: member}}}}))
	m, g := s.get(member), s.get(gone)
	g.lastRefused.Store(clk.Now().UnixNano())
	assert.True(t, s.wanted(g, clk.Now()), "a node refused lately is not wanted")
	clk.Advance(2 * probeIdleAfter)
	assert.True(t, s.wanted(m, clk.Now()), "an idle node the map names is not wanted")
	assert.False(t, s.wanted(g, clk.Now()), "an idle node the map does not name is wanted")

	// g's breaker opens; nobody asks for it, and the map does not name it:
	// its prober stops without a probe. A map that names it starts the
	// prober again, at once.
	require.True(t, g.br.Trip())
	clk.Advance(2 * probeIdleAfter) // the opening counts as a command refused
	redistest.WaitFor(t, 10*time.Second, "the unnamed node's prober to stop", func() error {
		if g.probing.Load() {
			return errors.New("still probing")
		}
		return nil
	})
	require.Empty(t, probed, "the unnamed idle node was probed")
	again := slotmap.New([]redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: member}, {Addr: gone}}}})
	topo.view.Store(again)
	s.named(again)
	select {
	case addr := <-probed:
		assert.Equal(t, gone, addr)
	case <-time.After(5 * time.Second):
		t.Fatal("the map that names the node again started no probe")
	}
}

// A healthy client left idle runs nothing of redisguard's and holds no
// connection go-redis alone would not: after a burst of traffic (which
// wakes the hang watch) and a second of quiet, the watch has stopped, no
// prober runs, and the server lists as many connections for it as for
// go-redis alone after the same burst.
func TestHealthyIdleClientAddsNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := testCtx(t, 30*time.Second)
	stock := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: "idle-stock"})
	t.Cleanup(func() { _ = stock.Close() })
	base := goleak.IgnoreCurrent()
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ClientName: "idle-guard"})
	for _, cl := range []redis.UniversalClient{stock, c} {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for j := range 50 {
					assert.NoError(t, cl.Set(ctx, fmt.Sprintf("idle:%d:%d", i, j), j, 0).Err())
				}
			})
		}
		wg.Wait()
	}
	// The watch stops after hangIdleStop of quiet, on its own ticker.
	require.Eventually(t, func() bool { return !c.nodes.watch.running.Load() }, 10*time.Second, 10*time.Millisecond,
		"the hang watch kept running on an idle client")
	assert.NoError(t, goleak.Find(base, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper")),
		"an idle client runs goroutines of redisguard's")
	list, err := srv.Admin().Do(ctx, "client", "list").Text()
	require.NoError(t, err)
	stockConns, guardConns := strings.Count(list, "name=idle-stock "), strings.Count(list, "name=idle-guard ")
	t.Logf("connections after the same burst: go-redis alone %d, redisguard %d", stockConns, guardConns)
	assert.Positive(t, stockConns)
	assert.LessOrEqual(t, guardConns, stockConns, "redisguard holds more connections than go-redis alone")
}

// The Cluster form of an idle breaker: a master killed, its replica
// promoted, traffic stopped, then the old master started again. It comes
// back as a replica nobody sends to, and its breaker still reads closed
// within a second of it answering, its closed event giving the outage the
// node had. Full length only (make scenarios): a failover takes seconds.
func TestScenarioIdleClusterBreakerClosesOnItsProbes(t *testing.T) {
	fullOnly(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	events := &eventLog{}
	c := newTestClient(t, Config{Addrs: cl.Addrs(), OnEvent: events.onEvent})
	dead := cl.Masters[0]
	key := cl.KeyOn(t, dead, "idle:")
	ctx := testCtx(t, 60*time.Second)
	require.NoError(t, c.Set(ctx, key, "before", 0).Err())

	dead.Kill(t)
	killed := time.Now()
	for c.Set(ctx, key, "during", 0).Err() != nil && time.Since(killed) < 30*time.Second {
		time.Sleep(20 * time.Millisecond) // until the replica is promoted and the map names it
	}
	require.NoError(t, c.Set(ctx, key, "after", 0).Err(), "writes never followed the promotion")
	opened := events.find(EventBreakerOpened, func(e Event) bool { return e.Addr == dead.Addr })
	require.NotEmpty(t, opened, "the killed master's breaker never opened")

	// No traffic from here on: only the client's own probes reach the node.
	dead.Restart(t) // returns once it answers PING
	back := time.Now()
	closedAt := events.waitEvent(t, 5*time.Second, EventBreakerClosed, func(e Event) bool { return e.Addr == dead.Addr })
	closed := events.find(EventBreakerClosed, func(e Event) bool { return e.Addr == dead.Addr })
	t.Logf("the old master answered %v after the opening; its breaker closed %v after that, reporting %v out",
		back.Sub(opened[0].Time).Round(time.Millisecond), closedAt.Sub(back).Round(time.Millisecond),
		closed[len(closed)-1].Duration.Round(time.Millisecond))
	assert.Less(t, closedAt.Sub(back), time.Second, "the breaker stayed half-open without traffic")
	assert.InDelta(t, float64(back.Sub(opened[0].Time)), float64(closed[len(closed)-1].Duration), float64(500*time.Millisecond),
		"the closed event's outage is not the node's")
	for _, n := range c.Stats().Nodes {
		if n.Addr == dead.Addr {
			assert.Equal(t, "closed", n.State)
		}
	}
}
