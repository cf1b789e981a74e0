package redisguard

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
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
