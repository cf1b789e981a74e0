package redisguard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Subscriptions run on clients whose pools dial nothing, which is what
// lets their hooks take every dial for a subscription's: in Cluster mode
// their CLUSTER SLOTS are answered from the topology cache, a slot-map
// reload included. PoolStats keeps counting the subscriptions as go-redis
// does, in PubSubStats, and Instrument's extensions see their dials.
func TestSubscriptionClientsDialOnlySubscriptions(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
		ctx := testCtx(t, 30*time.Second)
		rec := &recorder{}
		var roles []ClientRole
		require.NoError(t, c.InstrumentRoles(func(rdb redis.UniversalClient, role ClientRole) error {
			roles = append(roles, role)
			return instrumentAll(rec)(rdb)
		}))
		ps := c.Subscribe(ctx, "subclient:ch")
		defer ps.Close()
		_, err := ps.Receive(ctx)
		require.NoError(t, err)

		assert.Equal(t, uint32(1), c.PoolStats().PubSubStats.Active, "the subscription, in the Client's PoolStats")
		assert.Equal(t, 1, c.Stats().LongInUse, "its permit")
		sub := c.subs.classic().(*redis.Client).PoolStats()
		assert.Zero(t, sub.TotalConns, "the subscriptions client's own pool")
		assert.Equal(t, uint32(1), sub.PubSubStats.Active)
		assert.Contains(t, roles, RoleSubscriptions)
		_, _, dials := rec.seen()
		assert.Equal(t, 1, dials, "the subscription's dial")
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs()})
		ctx := testCtx(t, 30*time.Second)
		classic := c.Subscribe(ctx, "subclient:ch") // before any command: no map fetched yet
		defer classic.Close()
		_, err := classic.Receive(ctx)
		require.NoError(t, err)
		sharded := c.SSubscribe(ctx, "subclient:sch")
		defer sharded.Close()
		_, err = sharded.Receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, c.Stats().LongInUse)

		require.NoError(t, c.SPublish(ctx, "subclient:sch", "m").Err())
		msg, err := sharded.ReceiveMessage(ctx)
		require.NoError(t, err)
		assert.Equal(t, "m", msg.Payload)
		plain, shard := c.subs.classic().(*redis.ClusterClient), c.subs.sharded()
		for name, cc := range map[string]*redis.ClusterClient{"classic": plain, "sharded": shard} {
			// ForEachShard reloads the slot map first, and go-redis sends
			// CLUSTER SLOTS on a node client: answered from the cache.
			require.NoError(t, cc.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
				assert.Zero(t, node.PoolStats().TotalConns, "%s: %s's pool", name, node.Options().Addr)
				return nil
			}))
		}
	})
}
