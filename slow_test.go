package redisguard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
)

var slowEpoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// slowFixture is a node set of four nodes with a fake clock, fed latency
// samples as the hot path would.
type slowFixture struct {
	clk    *clock.Fake
	nodes  *nodeSet
	mu     sync.Mutex
	events []Event
}

func newSlowFixture(t *testing.T, cfg Config) *slowFixture {
	t.Helper()
	f := &slowFixture{clk: clock.NewFake(slowEpoch)}
	cfg.Addrs = []string{"a:1"}
	cfg.OnEvent = func(e Event) {
		f.mu.Lock()
		f.events = append(f.events, e)
		f.mu.Unlock()
	}
	resolved, err := cfg.resolve()
	require.NoError(t, err)
	k := newCore(resolved, f.clk)
	f.nodes = newNodeSet(k, nil, func(context.Context, string, time.Duration) error { return nil })
	t.Cleanup(f.nodes.close)
	for _, a := range []string{"a:1", "b:1", "c:1", "d:1"} {
		f.nodes.get(a)
	}
	return f
}

// run advances the clock by d in 10ms steps, each node answering one
// command in its latency per step.
func (f *slowFixture) run(d time.Duration, lat map[string]time.Duration) {
	cmd := redis.NewStringCmd(context.Background(), "get", "k")
	for end := f.clk.Now().Add(d); f.clk.Now().Before(end); {
		f.clk.Advance(10 * time.Millisecond)
		for _, n := range f.nodes.all() {
			l, ok := lat[n.addr]
			if !ok {
				l = time.Millisecond
			}
			f.nodes.slow.observe(f.nodes, n, cmd, f.clk.Now().Add(-l))
		}
	}
}

func (f *slowFixture) kinds() []EventKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []EventKind
	for _, e := range f.events {
		out = append(out, e.Kind)
	}
	return out
}

func TestSlowNodeIsMarkedShedAndUnmarked(t *testing.T) {
	f := newSlowFixture(t, Config{MaxConnections: 40, SlowNodeEjection: time.Minute}) // long: this test is about recovery
	a, _ := f.nodes.lookup("a:1")

	f.run(3*time.Second, nil)
	assert.Empty(t, f.kinds(), "nothing is slow")

	slowA := map[string]time.Duration{"a:1": 80 * time.Millisecond}
	f.run(DefaultSlowNodeMarkAfter/2, slowA)
	assert.False(t, a.slow.Load(), "not before SlowNodeMarkAfter")
	f.run(2*time.Second, slowA)
	require.True(t, a.slow.Load())
	require.Equal(t, []EventKind{EventNodeSlow}, f.kinds())
	e := f.events[0]
	assert.Equal(t, "a:1", e.Addr)
	assert.Greater(t, e.Duration, 40*time.Millisecond)
	assert.Equal(t, time.Millisecond, e.PeerLatency)
	// 40 connections × factor 4 × 1ms / 55-80ms: two or three callers
	// may wait.
	limit := a.slowLimit.Load()
	assert.Contains(t, []int64{2, 3}, limit)

	// Shedding: callers beyond the limit, and deadlines shorter than the
	// node's latency, are refused at once.
	ctx := context.Background()
	assert.NoError(t, f.nodes.slow.admit(ctx, a))
	assert.Equal(t, int64(1), a.slowWaiting.Load(), "an admitted caller is counted")
	a.slowWaiting.Add(limit - 1)
	err := f.nodes.slow.admit(ctx, a)
	assert.ErrorIs(t, err, ErrNodeSlow)
	assert.ErrorIs(t, err, ErrNodeUnavailable, "a fallback for a node that is down serves a slow one")
	var ne *NodeError
	require.True(t, errors.As(err, &ne))
	assert.Equal(t, "a:1", ne.Addr)
	assert.Equal(t, limit, a.slowWaiting.Load(), "a refused caller is not counted")
	a.slowWaiting.Add(-limit)
	short, cancel := context.WithDeadline(ctx, f.clk.Now().Add(10*time.Millisecond))
	defer cancel()
	assert.ErrorIs(t, f.nodes.slow.admit(short, a), ErrNodeSlow, "the deadline cannot be met")
	long, cancel2 := context.WithDeadline(ctx, f.clk.Now().Add(time.Second))
	defer cancel2()
	assert.NoError(t, f.nodes.slow.admit(long, a))
	a.slowWaiting.Add(-1)

	st := map[string]NodeStats{}
	for _, ns := range f.nodes.stats(nil) {
		st[ns.Addr] = ns
	}
	assert.True(t, st["a:1"].Slow)
	assert.Greater(t, st["a:1"].Latency, 40*time.Millisecond)
	assert.False(t, st["b:1"].Slow)

	// Fast again: the mark ends within seconds.
	f.run(5*time.Second, nil)
	assert.False(t, a.slow.Load())
	require.Equal(t, []EventKind{EventNodeSlow, EventNodeSlowEnded}, f.kinds())
	assert.Equal(t, "recovered", f.events[1].Decision)
}

// A node behind an open breaker serves nothing: with one of four out, a
// slow node is not marked too, which would leave half of them refusing.
func TestSlowNodeNotMarkedBesideAnOpenBreaker(t *testing.T) {
	f := newSlowFixture(t, Config{MaxConnections: 40})
	a, _ := f.nodes.lookup("a:1")
	d, _ := f.nodes.lookup("d:1")
	open(d)
	f.run(3*time.Second, map[string]time.Duration{"a:1": 80 * time.Millisecond})
	assert.False(t, a.slow.Load(), "marked beside a node that is out")
	assert.False(t, d.slow.Load())
	assert.NotContains(t, f.kinds(), EventNodeSlow)
}

// A node the hang watch finds silent serves nothing either, before its
// bound has run out and its breaker opens: a slow peer is not marked
// meanwhile.
func TestSlowNodeNotMarkedBesideASilentNode(t *testing.T) {
	f := newSlowFixture(t, Config{MaxConnections: 40})
	a, _ := f.nodes.lookup("a:1")
	d, _ := f.nodes.lookup("d:1")
	d.setSilent(true)
	f.run(3*time.Second, map[string]time.Duration{"a:1": 80 * time.Millisecond})
	assert.False(t, a.slow.Load(), "marked beside a node that is silent")
	assert.NotContains(t, f.kinds(), EventNodeSlow)

	d.setSilent(false) // it answers again: a is judged as before
	f.run(3*time.Second, map[string]time.Duration{"a:1": 80 * time.Millisecond})
	assert.True(t, a.slow.Load(), "not marked once its peer answers again")
}

// An announced maintenance makes a node's waits the maintenance's: a node
// that looked slow just before it is not marked on that old estimate while
// the window is open, nor after it until it is measured slow anew; and a
// node marked already refuses none of its callers while the window is open.
func TestSlowNodeUnderAnnouncedMaintenance(t *testing.T) {
	f := newSlowFixture(t, Config{MaxConnections: 40})
	a, _ := f.nodes.lookup("a:1")
	f.run(2*time.Second, nil)

	// Slow for part of SlowNodeMarkAfter, then the maintenance, in which a
	// answers 800ms late: those waits are not sampled.
	f.run(DefaultSlowNodeMarkAfter*6/10, map[string]time.Duration{"a:1": 80 * time.Millisecond})
	conn := new(int)
	a.maint.begin(conn, f.clk.Now(), 6*time.Second)
	f.run(3*time.Second, map[string]time.Duration{"a:1": 800 * time.Millisecond})
	assert.False(t, a.slow.Load(), "marked during a maintenance, on its estimate from before it")
	a.maint.end(conn, f.clk.Now())
	f.run(3*time.Second, nil)
	assert.False(t, a.slow.Load(), "marked after the maintenance, answering as fast as its peers")
	assert.NotContains(t, f.kinds(), EventNodeSlow)

	// Slow anew after it: a full SlowNodeMarkAfter of its own.
	slowA := map[string]time.Duration{"a:1": 80 * time.Millisecond}
	f.run(DefaultSlowNodeMarkAfter*6/10, slowA)
	assert.False(t, a.slow.Load(), "the slow streak before the maintenance counted toward a new mark")
	f.run(2*time.Second, slowA)
	require.True(t, a.slow.Load(), "slow for SlowNodeMarkAfter after the maintenance, and not marked")

	// Marked, at its limit, with a deadline shorter than its latency: the
	// maintenance lets the caller wait all the same, and only while it is
	// open.
	ctx, cancel := context.WithDeadline(context.Background(), f.clk.Now().Add(10*time.Millisecond))
	defer cancel()
	a.slowWaiting.Store(a.slowLimit.Load())
	require.ErrorIs(t, f.nodes.slow.admit(ctx, a), ErrNodeSlow)
	a.maint.begin(conn, f.clk.Now(), 6*time.Second)
	assert.NoError(t, f.nodes.slow.admit(ctx, a), "refused during an announced maintenance")
	assert.Equal(t, a.slowLimit.Load()+1, a.slowWaiting.Load(), "an admitted caller is counted")
	a.slowWaiting.Add(-1)
	a.maint.end(conn, f.clk.Now())
	assert.ErrorIs(t, f.nodes.slow.admit(ctx, a), ErrNodeSlow, "the limit is back once the maintenance ends")
	a.slowWaiting.Store(0)
}

func TestSlowNodeMarkingOff(t *testing.T) {
	f := newSlowFixture(t, Config{SlowNodeFactor: 4})
	assert.NotNil(t, f.nodes.slow)
	resolved, err := Config{Addrs: []string{"a:1"}, SlowNodeFactor: -1}.resolve()
	require.NoError(t, err)
	nodes := newNodeSet(newCore(resolved, clock.Real()), nil, nil)
	defer nodes.close()
	assert.Nil(t, nodes.slow)
	assert.False(t, nodes.slow.sample(nodes.get("a:1")), "no marking, no timing")
}

func TestSlowNodeLimit(t *testing.T) {
	s := &slowNodes{k: newCore(Config{MaxConnections: 20, SlowNodeFactor: 4}, clock.Real())}
	ms := time.Millisecond
	assert.Equal(t, 5, s.limit(0, ms), "no estimate: a quarter of MaxConnections")
	assert.Equal(t, 5, s.limit(10*ms, ms), "barely slow: capped at a quarter")
	assert.Equal(t, 2, s.limit(50*ms, ms))
	assert.Equal(t, 1, s.limit(time.Second, ms), "never below one")
	s.k.cfg.MaxConnections = 2
	assert.Equal(t, 1, s.limit(10*ms, ms))
}

func TestSlowNodeConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{Addrs: []string{"a:1"}, SlowNodeFactor: 1},
		{Addrs: []string{"a:1"}, SlowNodeFactor: 0.5},
		{Addrs: []string{"a:1"}, SlowNodeFloor: -1},
		{Addrs: []string{"a:1"}, SlowNodeMarkAfter: -1},
		{Addrs: []string{"a:1"}, SlowNodeEjection: -time.Second},
	} {
		_, err := cfg.resolve()
		assert.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
		assert.Contains(t, err.Error(), "SlowNode")
	}
	resolved, err := Config{Addrs: []string{"a:1"}}.resolve()
	require.NoError(t, err)
	assert.Equal(t, DefaultSlowNodeFactor, resolved.SlowNodeFactor)
	assert.Equal(t, DefaultSlowNodeFloor, resolved.SlowNodeFloor)
	assert.Equal(t, DefaultSlowNodeMarkAfter, resolved.SlowNodeMarkAfter)
	assert.Equal(t, DefaultSlowNodeEjection, resolved.SlowNodeEjection)
}

// The hook refuses a command for a marked node before it reaches the
// breaker or the network, and times only ordinary commands.
func TestNodeGuardShedsForASlowNode(t *testing.T) {
	f := newSlowFixture(t, Config{MaxConnections: 4})
	a, _ := f.nodes.lookup("a:1")
	a.slowLimit.Store(1)
	a.slow.Store(true)
	g := nodeGuard{k: f.nodes.k, nodes: f.nodes, n: a}

	release := make(chan struct{})
	entered := make(chan struct{})
	hook := g.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		entered <- struct{}{}
		<-release
		return nil
	})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- hook(ctx, redis.NewStringCmd(ctx, "get", "k")) }()
	<-entered
	err := hook(ctx, redis.NewStringCmd(ctx, "get", "k"))
	assert.ErrorIs(t, err, ErrNodeSlow, "the one allowed caller is waiting")
	close(release)
	require.NoError(t, <-done)

	assert.Zero(t, a.slowWaiting.Load(), "the admitted caller is counted out")

	// A blocking command waits by design: it is not limited.
	pass := g.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	a.slowWaiting.Store(1)
	assert.ErrorIs(t, pass(ctx, redis.NewStringCmd(ctx, "get", "k")), ErrNodeSlow)
	assert.NoError(t, pass(ctx, redis.NewStringSliceCmd(ctx, "blpop", "q", 1)))
	a.slowWaiting.Store(0)

	// Unmarked, everything passes.
	a.slow.Store(false)
	a.slowWaiting.Store(5)
	assert.NoError(t, pass(ctx, redis.NewStringCmd(ctx, "get", "k")))
}

// A node's commands are timed one in four above SlowNodeFloor only where it
// can be judged: beside at least outlier.MinPeers other nodes. A lone
// Standalone server, however slow, keeps the one-in-64 rate.
func TestSlowNodeSampleRate(t *testing.T) {
	cmd := redis.NewStringCmd(context.Background(), "get", "k")
	for _, tt := range []struct {
		name  string
		addrs []string
		want  uint32
	}{
		{"alone", []string{"a:1"}, sampleFast},
		{"one peer", []string{"a:1", "b:1"}, sampleFast},
		{"two peers", []string{"a:1", "b:1", "c:1"}, sampleWatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(slowEpoch)
			resolved, err := Config{Addrs: []string{"a:1"}}.resolve()
			require.NoError(t, err)
			nodes := newNodeSet(newCore(resolved, clk), nil, func(context.Context, string, time.Duration) error { return nil })
			t.Cleanup(nodes.close)
			for _, a := range tt.addrs {
				nodes.get(a)
			}
			n := nodes.get("a:1")
			nodes.slow.observe(nodes, n, cmd, clk.Now().Add(-4*resolved.SlowNodeFloor))
			assert.Equal(t, tt.want, n.sampleMask.Load())
		})
	}
}
