package redisguard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pipelined command that still ends in MOVED after go-redis's redirects
// (during failovers) does not reach the caller raw: what the pipeline loop
// leaves redirected ends as ErrSlotMapCorruption, with a forced refresh; the
// batch's other outcomes are left as they are.
func TestPipelineLeftoverRedirectEndsAsSlotMapCorruption(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		redirect string
	}{
		{"moved", "MOVED 3999 127.0.0.1:6381"},
		{"ask", "ASK 3999 127.0.0.1:6381"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, Config{Mode: ModeCluster, Addrs: []string{"127.0.0.1:1"}})
			answered := redis.NewStringCmd(ctx, "get", "a")
			answered.SetVal("v")
			redirected := redis.NewStringCmd(ctx, "get", "b")
			redirected.SetErr(redisErr(tt.redirect))
			wrongType := redis.NewStringCmd(ctx, "get", "c")
			wrongType.SetErr(redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"))
			hook := divergenceHook{c.div}.ProcessPipelineHook(func(context.Context, []redis.Cmder) error {
				return redirected.Err() // go-redis returns the first command error
			})

			err := hook(ctx, []redis.Cmder{answered, redirected, wrongType})

			require.ErrorIs(t, err, ErrSlotMapCorruption)
			assert.ErrorIs(t, redirected.Err(), ErrSlotMapCorruption)
			assert.Contains(t, redirected.Err().Error(), "slot 3999")
			_, _, raw := redirectOf(redirected.Err())
			assert.False(t, raw, "the redirect must not stay a raw reply")
			assert.NoError(t, answered.Err())
			assert.Equal(t, "v", answered.Val())
			assert.EqualError(t, wrongType.Err(), "WRONGTYPE Operation against a key holding the wrong kind of value")
			assert.Equal(t, uint64(1), c.Stats().Divergence.SlotMapCorruption)
		})
	}
}

// Batches without a leftover redirect pass through untouched.
func TestPipelineWithoutRedirectUntouched(t *testing.T) {
	ctx := context.Background()
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: []string{"127.0.0.1:1"}})
	reply := redisErr("WRONGTYPE Operation against a key holding the wrong kind of value")
	cmd := redis.NewStringCmd(ctx, "get", "a")
	cmd.SetErr(reply)
	for _, want := range []error{nil, redis.Nil, reply} {
		hook := divergenceHook{c.div}.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return want })
		assert.Equal(t, want, hook(ctx, []redis.Cmder{cmd}))
	}
	assert.Equal(t, reply, cmd.Err())
	assert.Zero(t, c.Stats().Divergence.SlotMapCorruption)
}

func TestDivergenceCycleRaisesWithinNodeTimeout(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	key := cl.KeyOn(t, cl.Masters[0], "div:cycle:")
	owner, other, _ := cycle(t, cl, key)

	start := time.Now()
	err := c.Get(ctx, key).Err()
	took := time.Since(start)
	require.ErrorIs(t, err, ErrClusterFailover, "views disagree and both claimants answer: a failover that never converges")
	_, isRedirect := redis.IsMovedError(err)
	assert.False(t, isRedirect, "the raw redirect leaked")
	assert.Contains(t, err.Error(), owner.Addr)
	assert.Contains(t, err.Error(), other.Addr)
	assert.GreaterOrEqual(t, took, 900*time.Millisecond, "raised before ClusterNodeTimeout: no time to converge was given")
	assert.Less(t, took, 2*time.Second+3*time.Second, "beyond ClusterNodeTimeout + ReadTimeout, with slack for a busy machine")
	s := c.Stats().Divergence
	assert.Equal(t, uint64(1), s.Failover)
	assert.Positive(t, s.Converging)
	assert.Zero(t, s.SlotMapCorruption)

	// The slot is known to be stuck: the next command on it fails fast.
	start = time.Now()
	require.ErrorIs(t, c.Get(ctx, key).Err(), ErrClusterFailover)
	assert.Less(t, time.Since(start), 900*time.Millisecond, "a slot known to be stuck made the caller wait again")
}

func TestDivergenceCycleRecoversWhenRepaired(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: 20 * time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 60*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	key := cl.KeyOn(t, cl.Masters[1], "div:repair:")
	_, _, repair := cycle(t, cl, key)

	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Set(ctx, key, "v", 0).Err() }()
	redistest.WaitFor(t, 10*time.Second, "the command to wait on the contested slot", func() error {
		if c.Stats().Divergence.Converging == 0 {
			return errors.New("no back-off yet")
		}
		return nil
	})
	repair()
	require.NoError(t, <-done, "the command should be served once ownership is consistent")
	assert.Less(t, time.Since(start), 15*time.Second, "it waited as if nothing changed")
	assert.Equal(t, uint64(1), c.Stats().Divergence.Recovered)
	assert.Zero(t, c.Stats().Divergence.Failover)
	assert.Equal(t, "v", c.Get(ctx, key).Val())
}

func TestDivergenceCycleHonoursCallerDeadline(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: 20 * time.Second, ReadTimeout: time.Second})
	require.NoError(t, c.Ping(testCtx(t, 10*time.Second)).Err())
	key := cl.KeyOn(t, cl.Masters[2], "div:deadline:")
	cycle(t, cl, key)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Get(ctx, key).Err()
	assert.True(t, err == ctx.Err(), "want ctx.Err() unchanged, got %v", err)
	assert.Less(t, time.Since(start), 300*time.Millisecond+2*time.Second)
}

// A slot left MIGRATING on its owner with no importing side makes an ASK
// loop: the owner sends ASK to the target, which sends MOVED back. Every
// node agrees on the owner, so this is not a failover.
func TestDivergenceAskLoopIsSlotMapCorruption(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: 5 * time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	owner := cl.Masters[0]
	key := cl.KeyOn(t, owner, "div:ask:")
	require.NoError(t, owner.Admin().Do(ctx, "cluster", "setslot", redistest.Slot(key), "migrating", cl.NodeID(t, cl.Masters[1])).Err())

	start := time.Now()
	err := c.Get(ctx, key).Err()
	require.ErrorIs(t, err, ErrSlotMapCorruption)
	assert.NotErrorIs(t, err, ErrClusterFailover)
	assert.Contains(t, err.Error(), owner.Addr)
	assert.Less(t, time.Since(start), 3*time.Second, "agreement needs no waiting")
	assert.Equal(t, uint64(1), c.Stats().Divergence.SlotMapCorruption)
	assert.Zero(t, c.Stats().Divergence.Failover)
}

// Blocking commands run on the long client (admission.go), which follows
// redirects with go-redis's own loop; a redirect cycle must end there as it
// does for ordinary commands, typed, not as the raw MOVED go-redis gives up
// with. (Found by the chaos soak: BLPOPs returned raw MOVED in a graceful
// failover.)
func TestDivergenceCycleOnBlockingCommandsIsTyped(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	key := cl.KeyOn(t, cl.Masters[0], "div:blocking:")
	cycle(t, cl, key)

	err := c.BLPop(ctx, 100*time.Millisecond, key).Err()
	require.ErrorIs(t, err, ErrClusterFailover, "BLPOP")
	_, moved := redis.IsMovedError(err)
	assert.False(t, moved, "the raw redirect leaked")

	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.BLPop(ctx, 100*time.Millisecond, key)
		return nil
	})
	require.Error(t, err)
	for _, cmd := range cmds {
		_, _, raw := redirectOf(cmd.Err())
		assert.False(t, raw, "a raw redirect leaked from a blocking pipeline: %v", cmd.Err())
		assert.True(t, errors.Is(cmd.Err(), ErrClusterFailover) || errors.Is(cmd.Err(), ErrSlotMapCorruption), "%v", cmd.Err())
	}
}

func TestDivergenceEpisodes(t *testing.T) {
	const window = time.Second
	clk := clock.NewFake(divEpoch)
	var d divergence
	first := d.observe(7, clk.Now(), window)
	assert.Equal(t, divEpoch, first)

	clk.Advance(600 * time.Millisecond)
	assert.Equal(t, divEpoch, d.observe(7, clk.Now(), window), "cycles on the same slot share the episode")
	assert.Equal(t, clk.Now(), d.observe(8, clk.Now(), window), "another slot has its own")

	clk.Advance(900 * time.Millisecond) // within window of the last cycle, past it since the first
	assert.Equal(t, divEpoch, d.observe(7, clk.Now(), window), "an episode lasts while cycles keep coming")

	clk.Advance(window + time.Millisecond)
	assert.Equal(t, clk.Now(), d.observe(7, clk.Now(), window), "a quiet window ends it")
	d.mu.Lock()
	_, stale := d.episodes[8]
	d.mu.Unlock()
	assert.False(t, stale, "quiet episodes of other slots are swept")

	d.end(7)
	clk.Advance(time.Millisecond)
	assert.Equal(t, clk.Now(), d.observe(7, clk.Now(), window), "end starts the next cycle afresh")
}
