package redisguard

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// In Cluster mode SSubscribe runs on the sharded-subscription client: it
// reaches the slot's owner, holds one long permit, and its client is closed
// with the Client.
func TestSSubscribeClusterFollowsSlotOwner(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c, err := NewClient(Config{Mode: ModeCluster, Addrs: cl.Addrs()})
	require.NoError(t, err)
	ctx := testCtx(t, 30*time.Second)
	owner := cl.Masters[2]
	ch := cl.KeyOn(t, owner, "sharded:ch")

	ps := c.SSubscribe(ctx, ch)
	msg, err := ps.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, &redis.Subscription{Kind: "ssubscribe", Channel: ch, Count: 1}, msg)
	assert.Equal(t, 1, c.Stats().LongInUse)
	clients, err := owner.Admin().ClientList(ctx).Result()
	require.NoError(t, err)
	assert.Contains(t, clients, "cmd=ssubscribe", "the subscription is not on the slot's owner")

	require.NoError(t, c.SPublish(ctx, ch, "hello").Err())
	msg, err = ps.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, "hello", msg.(*redis.Message).Payload)

	require.NoError(t, ps.Close())
	assert.Zero(t, c.Stats().LongInUse)

	kept := c.SSubscribe(ctx, ch)
	_, err = kept.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = kept.Receive(ctx)
	assert.Error(t, err, "Client.Close must end the sharded subscriptions too")
	_, err = c.SSubscribe(ctx, ch).Receive(ctx)
	assert.Error(t, err, "a sharded subscription after Close")
	noPubSubClients(t, cl.Nodes()...)
}
