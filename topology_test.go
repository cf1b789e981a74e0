package redisguard

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// Cluster mode reports each CLUSTER SLOTS it sends as a started/finished
// pair, and a failure with its cause, never with the password.
func TestRefreshEvents(t *testing.T) {
	const password = "hunter2-Secret"
	srv := miniredis.RunT(t) // answers CLUSTER SLOTS as a one-node cluster
	srv.RequireAuth(password)
	rec := &eventLog{}
	c := newTestClient(t, Config{
		Mode: ModeCluster, Addrs: []string{srv.Addr()}, Password: password,
		OnEvent: rec.onEvent, Logger: rec.logger(),
	})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, []EventKind{EventRefreshStarted, EventRefreshFinished}, rec.kinds())
	events, _ := rec.all()
	assert.Positive(t, events[1].Duration)
	assert.Equal(t, uint64(1), c.Stats().TopologyRefreshes)

	srv.SetError("ERR broken, and by the way the password is " + password)
	time.Sleep(refreshMinInterval + refreshJitter) // let the rate limit pass
	topo := c.topo
	topo.force()
	require.Eventually(t, func() bool {
		k := rec.kinds()
		return len(k) >= 4 && k[len(k)-1] == EventRefreshFailed
	}, 10*time.Second, 10*time.Millisecond)

	events, lines := rec.all()
	failed := events[len(events)-1]
	assert.Equal(t, EventRefreshStarted, events[len(events)-2].Kind)
	assert.Contains(t, failed.Err, "ERR broken")
	assert.Contains(t, failed.Err, "[redacted]")
	assert.Positive(t, failed.Duration)
	for _, e := range events {
		assert.NotContains(t, fmt.Sprintf("%#v", e), password)
	}
	var sawWarn bool
	for _, l := range lines {
		assert.NotContains(t, fmt.Sprint(l), password)
		if l.msg == EventRefreshFailed.message() {
			sawWarn = l.level == slog.LevelWarn
		}
		if l.msg == EventRefreshStarted.message() {
			assert.Equal(t, slog.LevelDebug, l.level)
		}
	}
	assert.True(t, sawWarn, "a failed refresh is logged as a warning")
}

// A CLUSTER SLOTS that comes while a fetch is in flight waits for that
// fetch's map, however fresh the map it replaces looks; before and after,
// calls within the interval are answered from the last map.
func TestTopologyCallDuringFetchWaitsForIt(t *testing.T) {
	resolved, err := Config{Addrs: []string{"a:1"}, Mode: ModeCluster}.resolve()
	require.NoError(t, err)
	clk := clock.NewFake(slowEpoch)
	topo := newTopology(newCore(resolved, clk))
	ctx := testCtx(t, 10*time.Second)
	mapOf := func(addr string) []redis.ClusterSlot {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr}}}}
	}
	fetches := 0
	answer := func(m []redis.ClusterSlot) redis.ProcessHook {
		return func(_ context.Context, cmd redis.Cmder) error {
			fetches++
			cmd.(*redis.ClusterSlotsCmd).SetVal(m)
			return nil
		}
	}
	get := func(send redis.ProcessHook) []redis.ClusterSlot {
		cmd := redis.NewClusterSlotsCmd(ctx, "cluster", "slots")
		require.NoError(t, topo.serve(ctx, cmd, send))
		return cmd.Val()
	}
	assert.Equal(t, mapOf("old:1"), get(answer(mapOf("old:1"))))
	assert.Equal(t, mapOf("old:1"), get(answer(mapOf("unused:1"))), "within the interval: the cached map")
	assert.Equal(t, 1, fetches)

	clk.Advance(refreshMinInterval + refreshJitter)
	slow := func(_ context.Context, cmd redis.Cmder) error {
		// The fetch is under way: however fresh the last map would look
		// by the interval, a call now is not answered from it.
		clk.Set(slowEpoch)
		assert.Nil(t, topo.fresh(), "a call during the fetch would get the map it replaces")
		cmd.(*redis.ClusterSlotsCmd).SetVal(mapOf("new:1"))
		return nil
	}
	assert.Equal(t, mapOf("new:1"), get(slow))
	assert.Equal(t, mapOf("new:1"), get(answer(mapOf("unused:3"))), "after the fetch: its map, cached")
	assert.Equal(t, mapOf("new:1"), topo.fresh())
	assert.Equal(t, 1, fetches, "one fetch went to the fake node, the other to the slow one")
}

// ClusterSlots shards by hand over servers that are not cluster nodes:
// each key goes where the map says, on the long client too, every reload
// of every go-redis client the Client runs is answered by one cache, and
// the map is the topology's.
func TestClusterSlotsShardsByHand(t *testing.T) {
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	slots := []redis.ClusterSlot{
		{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: a.Addr}}},
		{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: b.Addr}}},
	}
	var calls atomic.Int32
	c := newTestClient(t, Config{ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
		calls.Add(1)
		return slots, nil
	}})
	require.Equal(t, ModeCluster, c.Mode(), "ClusterSlots makes ModeAuto Cluster, with no Addrs")
	ctx := testCtx(t, 20*time.Second)

	owner := func(key string) *redistest.Server {
		if redistest.Slot(key) <= 8191 {
			return a
		}
		return b
	}
	for i := range 20 {
		key := fmt.Sprintf("byhand:%d", i)
		require.NoError(t, c.Set(ctx, key, i, 0).Err())
		assert.Equal(t, fmt.Sprint(i), owner(key).Admin().Get(ctx, key).Val(), "%s is on the server the map names", key)
	}
	q := "byhand:q"
	for i := 0; owner(q) != b; i++ {
		q = fmt.Sprintf("byhand:q%d", i)
	}
	require.NoError(t, b.Admin().RPush(ctx, q, "x").Err())
	assert.Equal(t, []string{q, "x"}, c.BLPop(ctx, time.Second, q).Val(), "the long client uses the map")

	before := calls.Load()
	for range 10 {
		c.ClusterClient().ReloadState(ctx) // go-redis reloads in the background
	}
	time.Sleep(100 * time.Millisecond)
	assert.Positive(t, before)
	assert.LessOrEqual(t, calls.Load(), before+1, "reloads within the refresh interval are answered from the cache")
	assert.Equal(t, slots, c.topo.slotMap().Slots())
	assert.Equal(t, []string{a.Addr, b.Addr}, c.topo.slotMap().Masters())
}

// With NoRedirects a MOVED reply reaches the caller as the command's error,
// as go-redis's MaxRedirects -1 does; by default the redirect is followed.
// ClusterSlots gives every slot to one master, so the other's keys are
// redirected.
func TestNoRedirectsHandsTheRedirectToTheCaller(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2})
	m0 := cl.Masters[0]
	wrong := func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: cl.ClientAddr(m0)}}}}, nil
	}
	key := cl.KeyOn(t, cl.Masters[1], "moved")
	ctx := testCtx(t, 20*time.Second)

	follow := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.ClientAddrs(), ClusterSlots: wrong})
	require.NoError(t, follow.Set(ctx, key, "v", 0).Err(), "the default follows the redirect")

	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.ClientAddrs(), ClusterSlots: wrong, MaxRedirects: NoRedirects})
	err := c.Get(ctx, key).Err()
	slot, _, ok := redirectOf(err)
	require.True(t, ok, "want the MOVED reply, got %v", err)
	assert.Equal(t, redistest.Slot(key), slot)
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, key); return nil })
	_, _, ok = redirectOf(err)
	assert.True(t, ok, "a pipeline's MOVED reaches the caller too, got %v", err)
}

// A subscription client's CLUSTER SLOTS is answered from the cache, and
// nothing is sent: with no map yet and nothing to fetch one with, it fails;
// with a map, however old, it gets that map.
func TestTopologyAnswersSubscriptionClientsFromTheCache(t *testing.T) {
	resolved, err := Config{Addrs: []string{"a:1"}, Mode: ModeCluster}.resolve()
	require.NoError(t, err)
	clk := clock.NewFake(slowEpoch)
	topo := newTopology(newCore(resolved, clk))
	ctx := testCtx(t, 10*time.Second)

	cmd := redis.NewClusterSlotsCmd(ctx, "cluster", "slots")
	assert.ErrorIs(t, topo.answer(ctx, cmd), errNoSlotMap)

	m := []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: "a:1"}}}}
	topo.view.Store(slotmap.New(m))
	clk.Advance(time.Hour) // past every interval: still the cached map
	cmd = redis.NewClusterSlotsCmd(ctx, "cluster", "slots")
	require.NoError(t, topo.answer(ctx, cmd))
	assert.Equal(t, m, cmd.Val())
}
