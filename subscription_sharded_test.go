package redisguard

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/redisguard/redisguard/internal/resp"
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

// A sharded subscription whose slot migrates to another master gets an
// unsolicited SUNSUBSCRIBE from its old node; it subscribes again at the new
// owner, and the move is told once. go-redis alone is measured beside it.
func TestSSubscribeFollowsSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	from, to := cl.Masters[0], cl.Masters[1]
	ch := cl.KeyOn(t, from, "sharded:migrating")
	ctx := testCtx(t, 30*time.Second)
	var events eventLog
	guard := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), OnEvent: events.onEvent})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = stock.Close() })
	guardSub, stockSub := guard.SSubscribe(ctx, ch), stock.SSubscribe(ctx, ch)
	guardLog, stockLog := receiveAll("redisguard", guardSub), receiveAll("go-redis", stockSub)
	pub, stop := publishEvery(ch, func(ctx context.Context, ch, p string) error { return guard.SPublish(ctx, ch, p).Err() })
	waitReceiving(t, guardLog, stockLog)

	migrateSlot(t, cl, redistest.Slot(ch), from, to)
	migrated := time.Now()
	time.Sleep(3 * time.Second)
	stop()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, guardSub.Close())
	require.NoError(t, stockSub.Close())
	<-guardLog.done
	<-stockLog.done

	from1s := migrated.Add(time.Second)
	gg, gTotal := pub.received(guardLog, from1s)
	sg, sTotal := pub.received(stockLog, from1s)
	t.Logf("slot migrated: from 1s after, go-redis received %s, redisguard %s", ratio(sg, sTotal), ratio(gg, gTotal))
	require.Positive(t, gTotal)
	assert.Equal(t, gTotal, gg, "the sharded subscription did not follow its slot")
	moved := events.find(EventSubscriptionMoved, func(e Event) bool { return strings.Contains(e.Channels, ch) })
	if assert.Len(t, moved, 1) {
		t.Logf("event: %v", moved[0])
		assert.Equal(t, from.Addr, moved[0].Addr)
		assert.Equal(t, to.Addr, moved[0].To)
	}
	assert.Zero(t, guard.Stats().LongInUse)
}

func TestChannelSlot(t *testing.T) {
	for _, tt := range []struct {
		name string
		slot int
	}{
		{"123456789", 0x31C3}, // CRC16/XMODEM's check value
		{"foo", 12182},
		{"{user1000}.following", channelSlot("user1000")},
		{"foo{}{bar}", channelSlot("foo{}{bar}")}, // an empty tag hashes the whole name
		{"", 0},
	} {
		assert.Equal(t, tt.slot, channelSlot(tt.name), tt.name)
		assert.Equal(t, redistest.Slot(tt.name), channelSlot(tt.name), "%s: the harness's slot", tt.name)
	}
}

func TestSplitBySlot(t *testing.T) {
	cmd := func(args ...string) string { return string(resp.AppendCommand(nil, args[0], args[1:]...)) }
	a, b := "{a}x", "{b}x" // two slots
	for _, tt := range []struct {
		name, in, want string
	}{
		{"one slot", cmd("ssubscribe", a, "{a}y"), ""},
		{"two slots", cmd("ssubscribe", a, b, "{a}y"), cmd("ssubscribe", a, "{a}y") + cmd("ssubscribe", b)},
		{"sunsubscribe", cmd("sunsubscribe", b, a), cmd("sunsubscribe", b) + cmd("sunsubscribe", a)},
		{"classic channels are not slotted", cmd("subscribe", a, b), ""},
		{"beside other commands", cmd("subscribe", "c") + cmd("SSUBSCRIBE", a, b) + cmd("ping"),
			cmd("subscribe", "c") + cmd("SSUBSCRIBE", a) + cmd("SSUBSCRIBE", b) + cmd("ping")},
		{"cut short", cmd("ssubscribe", a, b)[:20], ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := subscriptionConn{route: routeAnyNode}
			got, _ := c.follow([]byte(tt.in))
			if tt.want == "" {
				assert.Nil(t, got, "written as it is")
				return
			}
			assert.Equal(t, tt.want, string(got))
		})
	}
}

// Shard channels in several slots of one master, subscribed together, and
// subscribed again after the connection is killed: go-redis sends them in one
// SSUBSCRIBE each time, which Redis refuses with CROSSSLOT.
func TestSSubscribeSeveralSlotsOfOneNode(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	owner := cl.Masters[1]
	first := cl.KeyOn(t, owner, "sharded:first")
	second := cl.KeyOn(t, owner, "sharded:second")
	require.NotEqual(t, redistest.Slot(first), redistest.Slot(second))
	ctx := testCtx(t, 30*time.Second)
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs()})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = stock.Close() })

	stockSub := stock.SSubscribe(ctx, first, second)
	defer stockSub.Close()
	_, stockErr := stockSub.Receive(ctx)
	t.Logf("go-redis alone: %v", stockErr)

	ps := c.SSubscribe(ctx, first, second)
	defer ps.Close()
	receiveBoth := func() {
		t.Helper()
		got := map[string]bool{}
		for len(got) < 2 {
			_ = c.SPublish(ctx, first, "1").Err()
			_ = c.SPublish(ctx, second, "2").Err()
			msg, err := ps.ReceiveTimeout(ctx, time.Second)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			require.NoError(t, err)
			if m, ok := msg.(*redis.Message); ok {
				got[m.Channel] = true
			}
		}
	}
	receiveBoth()
	require.NoError(t, owner.Admin().ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	receiveBoth()
}

// Instrument reaches the sharded-subscription client whether it is built
// before or after, once.
func TestInstrumentReachesShardedSubscriptions(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	ctx := testCtx(t, 30*time.Second)
	for _, before := range []bool{true, false} {
		c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs()})
		var given []redis.UniversalClient
		instrument := func() {
			require.NoError(t, c.Instrument(func(u redis.UniversalClient) error {
				given = append(given, u)
				return nil
			}))
		}
		if !before {
			instrument()
		}
		ps := c.SSubscribe(ctx, "sharded:instrumented")
		_, err := ps.Receive(ctx)
		require.NoError(t, err)
		if before {
			instrument()
		}
		var sharded int
		for _, u := range given {
			if u == redis.UniversalClient(c.subs.shard) {
				sharded++
			}
		}
		assert.Equal(t, 1, sharded, "SSubscribe before Instrument: %v", before)
		require.NoError(t, ps.Close())
	}
}
