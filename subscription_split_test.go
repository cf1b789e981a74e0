package redisguard

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/redisguard/redisguard/internal/resp"
)

// receiveEach publishes on every channel until ps has received a message
// on each.
func receiveEach(t *testing.T, ctx context.Context, c *Client, ps *redis.PubSub, channels ...string) {
	t.Helper()
	got := map[string]bool{}
	for len(got) < len(channels) {
		require.NoError(t, ctx.Err(), "received on %v of %v", got, channels)
		for _, ch := range channels {
			_ = c.SPublish(ctx, ch, "x").Err()
		}
		msg, err := ps.ReceiveTimeout(ctx, 200*time.Millisecond)
		if m, ok := msg.(*redis.Message); ok && err == nil {
			got[m.Channel] = true
		}
	}
}

// Shard channels on three masters, in one PubSub: each master holds a
// connection for its own channels, and the PubSub receives from all of them
// with one long permit. go-redis alone refuses them with CROSSSLOT. A
// dropped connection is re-established, and each channel's move told once.
func TestSSubscribeSplitsAcrossNodes(t *testing.T) {
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) { testSSubscribeSplits(t, protocol) })
	}
}

func testSSubscribeSplits(t *testing.T, protocol int) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	ctx := testCtx(t, 30*time.Second)
	var channels []string
	for i, m := range cl.Masters {
		channels = append(channels, cl.KeyOn(t, m, "split:"+string(rune('a'+i))))
	}
	var events eventLog
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), OnEvent: events.onEvent, Protocol: protocol})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: protocol})
	t.Cleanup(func() { _ = stock.Close() })
	stockSub := stock.SSubscribe(ctx, channels...)
	_, stockErr := stockSub.Receive(ctx)
	t.Logf("go-redis alone: %v", stockErr)
	require.NoError(t, stockSub.Close())

	// The first channel's node holds the connection go-redis dialed; the
	// others are added to it.
	ps := c.SSubscribe(ctx, channels[0])
	require.NoError(t, ps.SSubscribe(ctx, channels[1:]...))
	receiveEach(t, ctx, c, ps, channels...)
	for _, m := range cl.Masters {
		clients, err := m.Admin().ClientList(ctx).Result()
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(clients, "cmd=ssubscribe"), "%s: one connection for its channels", m.Addr)
	}
	assert.Equal(t, 1, c.Stats().LongInUse, "one permit for the subscription")

	movedOf := func(ch string) []Event {
		return events.find(EventSubscriptionMoved, func(e Event) bool { return e.Channels == "shard channel "+ch })
	}
	// One of the added connections drops: its channel is subscribed again
	// on a new one, the others are left alone.
	require.NoError(t, cl.Masters[1].Admin().ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	for len(movedOf(channels[1])) == 0 {
		receiveEach(t, ctx, c, ps, channels...)
	}
	if moved := movedOf(channels[1]); assert.Len(t, moved, 1) {
		assert.Equal(t, cl.Masters[1].Addr, moved[0].Addr)
		assert.Equal(t, cl.Masters[1].Addr, moved[0].To)
	}
	assert.Empty(t, movedOf(channels[0]))
	assert.Empty(t, movedOf(channels[2]))

	// The first connection drops: go-redis subscribes again to everything,
	// and each node's move is told once. What was read before comes first.
	require.NoError(t, cl.Masters[0].Admin().ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	for len(events.find(EventSubscriptionMoved, func(Event) bool { return true })) < 1+len(channels) {
		receiveEach(t, ctx, c, ps, channels...)
	}
	receiveEach(t, ctx, c, ps, channels...)
	for i, ch := range channels {
		want := 1
		if i == 1 {
			want = 2
		}
		if moved := movedOf(ch); assert.Len(t, moved, want, ch) {
			assert.Equal(t, cl.Masters[i].Addr, moved[want-1].Addr)
			assert.Equal(t, cl.Masters[i].Addr, moved[want-1].To)
		}
	}
	assert.Equal(t, 1, c.Stats().LongInUse)

	// A channel added later goes to its own owner's connection, and one
	// removed leaves the others.
	extra := cl.KeyOn(t, cl.Masters[2], "split:extra")
	require.NoError(t, ps.SSubscribe(ctx, extra))
	require.NoError(t, ps.SUnsubscribe(ctx, channels[0]))
	receiveEach(t, ctx, c, ps, extra, channels[1], channels[2])

	require.NoError(t, ps.Close())
	assert.Zero(t, c.Stats().LongInUse)
	noPubSubClients(t, cl.Nodes()...)
}

// Two shard channels of one master, in different slots; one slot migrates
// to another master. The subscription is split between the two and keeps
// receiving both.
func TestSSubscribeSplitsAfterSlotMigration(t *testing.T) {
	sideBySide(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	from, to := cl.Masters[0], cl.Masters[1]
	moving := cl.KeyOn(t, from, "split:moving")
	staying := cl.KeyOn(t, from, "split:staying")
	require.NotEqual(t, redistest.Slot(moving), redistest.Slot(staying))
	ctx := testCtx(t, 30*time.Second)
	var events eventLog
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), OnEvent: events.onEvent})
	ps := c.SSubscribe(ctx, moving, staying)
	sub := receiveAll("redisguard", ps)
	pubs := map[string]*publishLog{}
	var stops []func()
	for _, ch := range []string{moving, staying} {
		pub, stop := publishEvery(ch, func(ctx context.Context, ch, p string) error { return c.SPublish(ctx, ch, p).Err() })
		pubs[ch] = pub
		stops = append(stops, stop)
	}
	waitReceiving(t, sub)

	migrateSlot(t, cl, redistest.Slot(moving), from, to)
	migrated := time.Now()
	time.Sleep(3 * time.Second)
	for _, stop := range stops {
		stop()
	}
	time.Sleep(300 * time.Millisecond)
	for _, m := range []*redistest.Server{from, to} {
		clients, err := m.Admin().ClientList(ctx).Result()
		require.NoError(t, err)
		assert.Contains(t, clients, "cmd=ssubscribe", "%s holds none of the subscription", m.Addr)
	}
	require.NoError(t, ps.Close())
	<-sub.done
	for ch, pub := range pubs {
		got, total := pub.received(sub, migrated.Add(time.Second))
		t.Logf("%s, from 1s after the migration: %s", ch, ratio(got, total))
		require.Positive(t, total)
		assert.Equal(t, total, got, ch)
	}
	moved := events.find(EventSubscriptionMoved, func(Event) bool { return true })
	if assert.Len(t, moved, 1, "only the channel whose slot moved moves, once") {
		assert.Equal(t, "shard channel "+moving, moved[0].Channels)
		assert.Equal(t, from.Addr, moved[0].Addr)
		assert.Equal(t, to.Addr, moved[0].To)
	}
	assert.Zero(t, c.Stats().LongInUse)
}

// migrateSlot moves slot, holding no keys, from one master to another.
func migrateSlot(t *testing.T, cl *redistest.Cluster, slot int, from, to *redistest.Server) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	fromID, toID := cl.NodeID(t, from), cl.NodeID(t, to)
	require.NoError(t, to.Admin().Do(ctx, "cluster", "setslot", slot, "importing", fromID).Err())
	require.NoError(t, from.Admin().Do(ctx, "cluster", "setslot", slot, "migrating", toID).Err())
	for _, m := range cl.Masters {
		require.NoError(t, m.Admin().Do(ctx, "cluster", "setslot", slot, "node", toID).Err())
	}
}

// pipeNode is the server's end of a connection splitConn dialed, in a unit
// test: what it is sent arrives on got.
type pipeNode struct {
	net.Conn
	got chan string
}

func newPipeNode(t *testing.T) (client net.Conn, server *pipeNode) {
	client, end := net.Pipe()
	server = &pipeNode{Conn: end, got: make(chan string, 16)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := end.Read(buf)
			if err != nil {
				close(server.got)
				return
			}
			server.got <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { _ = end.Close(); _ = client.Close() })
	return client, server
}

func (n *pipeNode) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-n.got:
		require.Equal(t, want, got)
	case <-time.After(5 * time.Second):
		t.Fatalf("%q never arrived", want)
	}
}

func (n *pipeNode) send(t *testing.T, resp string) {
	t.Helper()
	_, err := n.Write([]byte(resp))
	require.NoError(t, err)
}

// pipeNodes are the nodes a splitConn dialed, by address.
type pipeNodes struct {
	mu    sync.Mutex
	nodes map[string]*pipeNode
}

// get waits for addr to be dialed.
func (p *pipeNodes) get(t *testing.T, addr string) *pipeNode {
	t.Helper()
	var n *pipeNode
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		n = p.nodes[addr]
		return n != nil
	}, 5*time.Second, time.Millisecond, "%s was not dialed", addr)
	return n
}

// split returns a splitConn whose first leg is to a:1 and holds a permit,
// and the nodes it dials.
func (f subscriptionsFixture) split(t *testing.T) (*splitConn, *pipeNodes) {
	t.Helper()
	nodes := &pipeNodes{nodes: map[string]*pipeNode{}}
	dial := func(_ context.Context, addr string) (*subscriptionConn, error) {
		if strings.HasPrefix(addr, "down:") {
			return nil, fmt.Errorf("%w (node %s)", ErrNodeUnavailable, addr)
		}
		client, server := newPipeNode(t)
		nodes.mu.Lock()
		nodes.nodes[addr] = server
		nodes.mu.Unlock()
		return f.s.track(client, addr, routeSlotOwner, false), nil
	}
	require.NoError(t, f.s.a.acquire(context.Background()))
	client, server := newPipeNode(t)
	nodes.nodes["a:1"] = server
	c := newSplitConn(f.s, f.s.track(client, "a:1", routeSlotOwner, true), dial)
	t.Cleanup(func() { _ = c.Close() })
	return c, nodes
}

func readReply(t *testing.T, c net.Conn, want string) {
	t.Helper()
	buf := make([]byte, len(want))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, want, string(buf))
}

func TestSplitConnFollowsItsChannels(t *testing.T) {
	movedS := fmt.Sprintf("-MOVED %d b:1\r\n", channelSlot("s"))
	t.Run("a SUNSUBSCRIBE it asked for", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		c, nodes := f.split(t)
		write(t, c, ssubscribeS)
		nodes.get(t, "a:1").expect(t, ssubscribeS)
		nodes.get(t, "a:1").send(t, ssubscribedS)
		readReply(t, c, ssubscribedS)
		write(t, c, sunsubscribeS)
		nodes.get(t, "a:1").expect(t, sunsubscribeS)
		nodes.get(t, "a:1").send(t, sunsubscribedS)
		readReply(t, c, sunsubscribedS)
		assert.Empty(t, f.moves())
	})

	t.Run("a SUNSUBSCRIBE it did not ask for, then a MOVED", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		c, nodes := f.split(t)
		write(t, c, ssubscribeS)
		a := nodes.get(t, "a:1")
		a.expect(t, ssubscribeS)
		a.send(t, ssubscribedS)
		readReply(t, c, ssubscribedS)

		a.send(t, sunsubscribedS) // the slot moved away
		// With no slot map, the owner is taken to be the first node; it
		// answers with where the slot is now.
		a.expect(t, ssubscribeS)
		a.send(t, movedS)
		b := nodes.get(t, "b:1")
		b.expect(t, ssubscribeS)
		assert.Empty(t, f.moves(), "the move is not complete before the new node confirms it")
		b.send(t, ssubscribedS)
		readReply(t, c, ssubscribedS) // neither the SUNSUBSCRIBE nor the MOVED reached go-redis
		require.Len(t, f.moves(), 1)
		assert.Equal(t, "a:1", f.moves()[0].Addr)
		assert.Equal(t, "b:1", f.moves()[0].To)
		assert.Equal(t, "shard channel s", f.moves()[0].Channels)

		// The health check's PING reaches both nodes; go-redis reads one
		// PONG.
		write(t, c, string(pingCmd))
		a.expect(t, string(pingCmd))
		b.expect(t, string(pingCmd))
		b.send(t, "+PONG\r\n")
		a.send(t, "+PONG\r\n")
		readReply(t, c, "+PONG\r\n")
		require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		require.ErrorAs(t, err, &ne, "the second PONG was not dropped")
		assert.True(t, ne.Timeout())

		assert.Equal(t, 1, len(f.s.a.permits), "two connections, one permit")
		require.NoError(t, c.Close())
		assert.Zero(t, len(f.s.a.permits))
		_, err = c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, net.ErrClosed)
	})

	t.Run("an SUNSUBSCRIBE it asked for is told from one it did not by its channel", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		c, nodes := f.split(t)
		a := nodes.get(t, "a:1")
		both := string(resp.AppendCommand(nil, "ssubscribe", "s", "t"))
		write(t, c, both)
		a.expect(t, string(resp.AppendCommand(nil, "ssubscribe", "s"))+string(resp.AppendCommand(nil, "ssubscribe", "t")))
		write(t, c, string(resp.AppendCommand(nil, "sunsubscribe", "t")))
		a.expect(t, string(resp.AppendCommand(nil, "sunsubscribe", "t")))
		a.send(t, sunsubscribedS) // s's slot moved away, before t's reply
		a.expect(t, ssubscribeS)  // s is subscribed again
		unsubscribedT := ">3\r\n$12\r\nsunsubscribe\r\n$1\r\nt\r\n:1\r\n"
		a.send(t, unsubscribedT)
		readReply(t, c, unsubscribedT)
	})

	t.Run("a command written in pieces is split whole", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		c, nodes := f.split(t)
		write(t, c, ssubscribeS[:9])
		write(t, c, ssubscribeS[9:])
		nodes.get(t, "a:1").expect(t, ssubscribeS)
		c.home.mu.Lock()
		defer c.home.mu.Unlock()
		assert.Contains(t, c.home.subs[shardKind], "s")
	})

	t.Run("channels waiting for their owner are dropped by SUNSUBSCRIBE", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		c, nodes := f.split(t)
		a := nodes.get(t, "a:1")
		write(t, c, ssubscribeS)
		a.expect(t, ssubscribeS)
		a.send(t, fmt.Sprintf("-MOVED %d down:1\r\n", channelSlot("s")))
		require.Eventually(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			_, waiting := c.waiting["s"]
			return waiting
		}, 5*time.Second, time.Millisecond, "s does not wait for its unreachable owner")
		write(t, c, string(resp.AppendCommand(nil, "sunsubscribe")))
		a.expect(t, string(resp.AppendCommand(nil, "sunsubscribe")))
		c.mu.Lock()
		defer c.mu.Unlock()
		assert.Empty(t, c.waiting)
		assert.Empty(t, c.lost)
	})

	t.Run("the first connection fails: go-redis sees it after what it read", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		c, nodes := f.split(t)
		write(t, c, ssubscribeS)
		nodes.get(t, "a:1").expect(t, ssubscribeS)
		nodes.get(t, "a:1").send(t, ssubscribedS)
		require.NoError(t, nodes.get(t, "a:1").Close())
		readReply(t, c, ssubscribedS)
		_, err := c.Read(make([]byte, 1))
		require.Error(t, err)
		assert.ErrorIs(t, err, io.EOF)
	})
}

// Channel's health check pings every node of a split subscription; the
// nodes answer, and nothing is moved or lost.
func TestSSubscribeSplitHealthCheck(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	ctx := testCtx(t, 30*time.Second)
	var channels []string
	for i, m := range cl.Masters {
		channels = append(channels, cl.KeyOn(t, m, "split:ping:"+string(rune('a'+i))))
	}
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs()})
	ps := c.SSubscribe(ctx, channels...)
	defer ps.Close()
	for _, m := range cl.Masters {
		require.NoError(t, m.Admin().ConfigResetStat(ctx).Err())
	}
	msgs := ps.Channel(redis.WithChannelHealthCheckInterval(50 * time.Millisecond))
	time.Sleep(time.Second) // idle: about 20 health-check PINGs to each node
	for _, ch := range channels {
		require.NoError(t, c.SPublish(ctx, ch, "after-idle").Err())
	}
	got := map[string]bool{}
	for len(got) < len(channels) {
		select {
		case m := <-msgs:
			got[m.Channel] = true
		case <-ctx.Done():
			t.Fatalf("received on %v of %v", got, channels)
		}
	}
	assert.Zero(t, c.Stats().SubscriptionMoves, "a health check broke a connection")
	for _, m := range cl.Masters {
		info, err := m.Admin().Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		assert.Contains(t, info, "cmdstat_ping:", "%s was not pinged", m.Addr)
	}
}
