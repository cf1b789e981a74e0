package redisguard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The subscription rules, with a budget of one permit.
func TestLongBudgetSubscriptions(t *testing.T) {
	srv := redistest.StartServer(t)
	const poolTimeout = 300 * time.Millisecond
	subscribe := []struct {
		name string
		open func(ctx context.Context, c *Client, ch string) *redis.PubSub
		drop func(ctx context.Context, ps *redis.PubSub, ch string) error
	}{
		{"SUBSCRIBE", func(ctx context.Context, c *Client, ch string) *redis.PubSub { return c.Subscribe(ctx, ch) },
			func(ctx context.Context, ps *redis.PubSub, ch string) error { return ps.Unsubscribe(ctx, ch) }},
		{"PSUBSCRIBE", func(ctx context.Context, c *Client, ch string) *redis.PubSub { return c.PSubscribe(ctx, ch+"*") },
			func(ctx context.Context, ps *redis.PubSub, ch string) error { return ps.PUnsubscribe(ctx, ch+"*") }},
		{"SSUBSCRIBE", func(ctx context.Context, c *Client, ch string) *redis.PubSub { return c.SSubscribe(ctx, ch) },
			func(ctx context.Context, ps *redis.PubSub, ch string) error { return ps.SUnsubscribe(ctx, ch) }},
	}
	for _, tc := range subscribe {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 1, PoolTimeout: poolTimeout})
			ctx := testCtx(t, 30*time.Second)
			blpop := func() error { return shortBLPop(ctx, c, "subs:list") }
			exhausted := func(why string) {
				t.Helper()
				start := time.Now()
				err := blpop()
				assert.ErrorIs(t, err, ErrPoolExhausted, why)
				assert.GreaterOrEqual(t, time.Since(start), poolTimeout-10*time.Millisecond, "failed before PoolTimeout")
			}

			empty := c.Subscribe(ctx)
			defer empty.Close()
			require.Equal(t, redis.Nil, blpop(), "an unused Subscribe() holds the permit")
			assert.Zero(t, c.Stats().LongInUse)

			ps := tc.open(ctx, c, "subs:ch")
			_, err := ps.Receive(ctx) // the confirmation: the subscription runs
			require.NoError(t, err)
			assert.Equal(t, 1, c.Stats().LongInUse)
			exhausted("a running subscription must hold the permit")

			require.NoError(t, tc.drop(ctx, ps, "subs:ch"))
			_, err = ps.Receive(ctx)
			require.NoError(t, err)
			exhausted("the connection stays reserved after Unsubscribe")

			require.NoError(t, ps.Close())
			assert.Zero(t, c.Stats().LongInUse)
			require.Equal(t, redis.Nil, blpop(), "PubSub.Close must release the permit")
			assert.Equal(t, uint64(2), c.Stats().LongExhaustions)
		})
	}

	t.Run("subscribing with the budget spent", func(t *testing.T) {
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 1, PoolTimeout: poolTimeout})
		ctx := testCtx(t, 30*time.Second)
		first := c.Subscribe(ctx, "subs:a")
		defer first.Close()
		_, err := first.Receive(ctx)
		require.NoError(t, err)
		second := c.Subscribe(ctx)
		defer second.Close()
		assert.ErrorIs(t, second.Subscribe(ctx, "subs:b"), ErrPoolExhausted)
		assert.Equal(t, 1, c.Stats().LongInUse)
	})

	// go-redis redials a subscription whose connection dies and subscribes
	// again; the old connection's permit must come back and the new one's
	// be taken, once each.
	t.Run("reconnect", func(t *testing.T) {
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 2, PoolTimeout: poolTimeout})
		ctx := testCtx(t, 30*time.Second)
		ps := c.Subscribe(ctx, "subs:reconnect")
		defer ps.Close()
		_, err := ps.Receive(ctx)
		require.NoError(t, err)
		for range 3 {
			require.NoError(t, srv.Admin().ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
			// Receive sees the dead connection, redials and resubscribes.
			require.Eventually(t, func() bool {
				_ = c.Publish(ctx, "subs:reconnect", "hello").Err()
				msg, err := ps.ReceiveTimeout(ctx, 100*time.Millisecond)
				m, ok := msg.(*redis.Message)
				return err == nil && ok && m.Payload == "hello"
			}, 10*time.Second, 10*time.Millisecond)
			assert.Equal(t, 1, c.Stats().LongInUse, "a reconnect leaked or double-counted a permit")
		}
		require.NoError(t, ps.Close())
		assert.Zero(t, c.Stats().LongInUse)
	})
}
