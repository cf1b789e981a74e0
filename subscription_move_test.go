package redisguard

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// subscriptionsFixture is a subscriptions with a fake clock, nodes whose
// probes never succeed, and four long permits.
type subscriptionsFixture struct {
	s      *subscriptions
	clk    *clock.Fake
	events *eventLog
}

func newSubscriptionsFixture(t *testing.T) subscriptionsFixture {
	t.Helper()
	events := &eventLog{}
	cfg, err := Config{Addrs: []string{"a:1"}, MaxLongConnections: 4, OnEvent: events.onEvent}.resolve()
	require.NoError(t, err)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	k := newCore(cfg, clk)
	nodes := newNodeSet(k, nil, func(context.Context, string, time.Duration) error { return errors.New("still down") })
	t.Cleanup(nodes.close)
	return subscriptionsFixture{s: newSubscriptions(k, newAdmission(k, nil, nil, nil), nodes, nil, nil, nil), clk: clk, events: events}
}

// dial returns a tracked connection to addr holding a permit, and the
// server's end, whose reads are drained.
func (f subscriptionsFixture) dial(t *testing.T, addr string) (*subscriptionConn, net.Conn) {
	return f.dialKind(t, addr, routeAnyNode)
}

func (f subscriptionsFixture) dialKind(t *testing.T, addr string, route subscriptionRoute) (*subscriptionConn, net.Conn) {
	t.Helper()
	require.NoError(t, f.s.a.acquire(context.Background()))
	client, server := net.Pipe()
	go func() { _, _ = io.Copy(io.Discard, server) }()
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return f.s.track(client, addr, route, true), server
}

// reply sends resp from the server's end and reads it on c.
func reply(t *testing.T, c, server net.Conn, resp string) {
	t.Helper()
	go func() { _, _ = server.Write([]byte(resp)) }()
	buf := make([]byte, len(resp))
	_, err := io.ReadFull(c, buf)
	require.NoError(t, err)
}

func (f subscriptionsFixture) moves() []Event {
	f.events.mu.Lock()
	defer f.events.mu.Unlock()
	var out []Event
	for _, e := range f.events.events {
		if e.Kind == EventSubscriptionMoved {
			out = append(out, e)
		}
	}
	return out
}

func write(t *testing.T, c net.Conn, resp string) {
	t.Helper()
	_, err := c.Write([]byte(resp))
	require.NoError(t, err)
}

const (
	subscribeX     = "*2\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n"
	psubscribeP    = "*2\r\n$10\r\npsubscribe\r\n$2\r\np*\r\n"
	subscribedX    = ">3\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n:1\r\n"
	ssubscribeS    = "*2\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n"
	sunsubscribeS  = "*2\r\n$12\r\nsunsubscribe\r\n$1\r\ns\r\n"
	ssubscribedS   = ">3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n"
	sunsubscribedS = ">3\r\n$12\r\nsunsubscribe\r\n$1\r\ns\r\n:0\r\n"
	movedS         = "-MOVED 1234 b:1\r\n"
)

func TestSubscriptionMoveIsToldOnce(t *testing.T) {
	t.Run("moved off a node", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		old, _ := f.dial(t, "a:1")
		write(t, old, subscribeX)
		write(t, old, psubscribeP)
		f.clk.Advance(2 * time.Second) // nothing read since: the window opens at the dial
		f.s.moveFrom("a:1")
		_, err := old.Read(make([]byte, 1))
		require.Error(t, err, "a moved connection must fail its reader, so that go-redis redials")
		assert.NoError(t, old.Close(), "closing a moved connection is no error for its user")
		assert.Zero(t, len(f.s.a.permits), "the moved connection's permit")

		f.clk.Advance(time.Second)
		moved, server := f.dial(t, "b:1")
		write(t, moved, subscribeX)
		write(t, moved, psubscribeP)
		assert.Empty(t, f.moves(), "told before the server answered")
		reply(t, moved, server, subscribedX)
		require.Len(t, f.moves(), 1)
		e := f.moves()[0]
		assert.Equal(t, Event{Kind: EventSubscriptionMoved, Time: f.clk.Now(), Addr: "a:1", To: "b:1",
			Channels: "channel x, pattern p*", Duration: 3 * time.Second}, e)
		assert.Equal(t, uint64(1), f.s.moves.Load())

		reply(t, moved, server, subscribedX)
		other, otherServer := f.dial(t, "c:1")
		write(t, other, subscribeX)
		write(t, other, psubscribeP)
		reply(t, other, otherServer, subscribedX)
		assert.Len(t, f.moves(), 1, "one move, one event")
		assert.Equal(t, 2, len(f.s.a.permits))
	})

	t.Run("a connection the server dropped", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		old, server := f.dial(t, "a:1")
		write(t, old, subscribeX)
		require.NoError(t, server.Close())
		_, err := old.Read(make([]byte, 1))
		require.Error(t, err)
		require.NoError(t, old.Close())
		again, server := f.dial(t, "a:1")
		write(t, again, subscribeX)
		reply(t, again, server, subscribedX)
		require.Len(t, f.moves(), 1)
		assert.Equal(t, "a:1", f.moves()[0].To)
	})

	t.Run("a redial that broke on the node being left", func(t *testing.T) {
		// go-redis redials before the slot map names the new owner: the
		// redial subscribes on the hung node and breaks there too. Still
		// one move.
		f := newSubscriptionsFixture(t)
		old, _ := f.dial(t, "a:1")
		write(t, old, subscribeX)
		f.s.moveFrom("a:1")
		require.NoError(t, old.Close())
		f.clk.Advance(time.Second)
		again, _ := f.dial(t, "a:1")
		write(t, again, subscribeX)
		f.s.moveFrom("a:1")
		require.NoError(t, again.Close())
		f.clk.Advance(time.Second)
		moved, server := f.dial(t, "b:1")
		write(t, moved, subscribeX)
		reply(t, moved, server, subscribedX)
		require.Len(t, f.moves(), 1, "one move, one event")
		assert.Equal(t, "a:1", f.moves()[0].Addr)
		assert.Equal(t, 2*time.Second, f.moves()[0].Duration, "the window opens at the first break")
		assert.Equal(t, uint64(1), f.s.moves.Load())
	})

	t.Run("closed by its user", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		old, _ := f.dial(t, "a:1")
		write(t, old, subscribeX)
		require.NoError(t, old.SetReadDeadline(time.Now().Add(time.Millisecond)))
		_, err := old.Read(make([]byte, 1))
		require.True(t, isTimeout(err), "a read timeout is no failure of the connection")
		require.NoError(t, old.Close())
		next, server := f.dial(t, "a:1")
		write(t, next, subscribeX)
		reply(t, next, server, subscribedX)
		assert.Empty(t, f.moves(), "a new subscription to the same channels is no move")
		assert.Equal(t, 1, len(f.s.a.permits))
	})

	t.Run("given up while broken", func(t *testing.T) {
		f := newSubscriptionsFixture(t)
		old, _ := f.dial(t, "a:1")
		write(t, old, subscribeX)
		f.s.moveFrom("a:1")
		require.NoError(t, old.Close())
		f.clk.Advance(pendingMoveTTL + time.Second)
		other, _ := f.dial(t, "b:1")
		write(t, other, psubscribeP)
		other.broken.Store(true)
		require.NoError(t, other.Close()) // registers its own move, and forgets the stale one
		next, server := f.dial(t, "b:1")
		write(t, next, subscribeX)
		reply(t, next, server, subscribedX)
		assert.Empty(t, f.moves(), "a subscription closed while broken is waited for no longer than pendingMoveTTL")
	})
}

// A sharded subscription's connection breaks off when the server says the
// node no longer serves its slot, and only then.
func TestSubscriptionDialTarget(t *testing.T) {
	f := newSubscriptionsFixture(t)
	nodes := f.s.nodes
	open := func(addr string) {
		n := nodes.get(addr)
		for n.br.State() != breaker.Open {
			tk, err := n.br.Allow()
			require.NoError(t, err)
			n.br.Done(tk, breaker.Failure)
		}
	}
	nodes.get("b:1")
	open("a:1")
	tests := []struct {
		route subscriptionRoute
		addr  string
		want  string // "" for ErrNodeUnavailable
	}{
		{routeAsked, "a:1", "a:1"},
		{routeAnyNode, "a:1", "b:1"},
		{routeAnyNode, "b:1", "b:1"},
		{routeAnyNode, "unknown:1", "unknown:1"},
		{routeSlotOwner, "a:1", ""},
		{routeSlotOwner, "b:1", "b:1"},
	}
	for _, tt := range tests {
		got, err := f.s.target(tt.route, tt.addr)
		if tt.want == "" {
			var ne *NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, tt.addr, ne.Addr)
			assert.ErrorIs(t, err, ErrNodeUnavailable)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "route %d, %s", tt.route, tt.addr)
	}

	open("b:1")
	_, err := f.s.target(routeAnyNode, "a:1")
	assert.ErrorIs(t, err, ErrNodeUnavailable, "with every node down there is nowhere to go")
}

// A sharded subscription's dial to a master whose breaker is open goes to
// the master that the refreshed slot map names for all of its slots.
func TestSubscriptionShardedDialFindsNewOwner(t *testing.T) {
	f := newSubscriptionsFixture(t)
	f.s.topo = newTopology(f.s.k)
	f.s.ownerWait = 0 // one look, no waiting: the map is set by hand
	setMap := func(owners ...string) {
		slots := []redis.ClusterSlot{
			{Start: 0, End: 99, Nodes: []redis.ClusterNode{{Addr: owners[0]}}},
			{Start: 100, End: 199, Nodes: []redis.ClusterNode{{Addr: owners[1]}}},
			{Start: 200, End: 16383, Nodes: []redis.ClusterNode{{Addr: "c:1"}}},
		}
		f.s.topo.view.Store(slotmap.New(slots))
	}
	setMap("a:1", "a:1")
	f.s.moveFrom("a:1") // remembers that a:1 served 0-199
	n := f.s.nodes.get("a:1")
	for n.br.State() != breaker.Open {
		tk, err := n.br.Allow()
		require.NoError(t, err)
		n.br.Done(tk, breaker.Failure)
	}

	_, err := f.s.awaitOwner(context.Background(), "a:1")
	assert.ErrorIs(t, err, ErrNodeUnavailable, "the map still names the old owner")
	setMap("b:1", "d:1")
	_, err = f.s.awaitOwner(context.Background(), "a:1")
	assert.ErrorIs(t, err, ErrNodeUnavailable, "its slots went to two masters: which one is unknown")
	setMap("b:1", "b:1")
	to, err := f.s.awaitOwner(context.Background(), "a:1")
	require.NoError(t, err)
	assert.Equal(t, "b:1", to)
	f.s.k.closed.Store(true)
	_, err = f.s.awaitOwner(context.Background(), "a:1")
	assert.ErrorIs(t, err, ErrClosed)
}

// A node that holds a subscription's connection but leaves go-redis's
// health-check PING unanswered, while its breaker stays closed, loses the
// connection at the next PING, and classic subscriptions avoid it for a
// while.
func TestSubscriptionUnansweredPingMovesIt(t *testing.T) {
	const ping = "*1\r\n$4\r\nping\r\n"
	f := newSubscriptionsFixture(t)
	f.s.nodes.get("a:1")
	f.s.nodes.get("b:1")
	c, server := f.dial(t, "a:1")
	write(t, c, subscribeX)
	reply(t, c, server, subscribedX)

	// A quiet channel on a live node: every PING is answered.
	for range 3 {
		f.clk.Advance(3 * time.Second)
		write(t, c, ping)
		reply(t, c, server, "+PONG\r\n")
	}
	// A PING answered late, but before the next one, is no failure either.
	f.clk.Advance(3 * time.Second)
	write(t, c, ping)
	f.clk.Advance(2 * time.Second)
	reply(t, c, server, "+PONG\r\n")
	f.clk.Advance(time.Second)
	write(t, c, ping)
	assert.False(t, c.broken.Load())
	to, err := f.s.target(routeAnyNode, "a:1")
	require.NoError(t, err)
	assert.Equal(t, "a:1", to)

	// Then the node hangs.
	f.clk.Advance(3 * time.Second)
	_, err = c.Write([]byte(ping))
	require.Error(t, err, "the PING after an unanswered one must fail, so that go-redis subscribes again")
	assert.True(t, c.broken.Load())
	to, err = f.s.target(routeAnyNode, "a:1")
	require.NoError(t, err)
	assert.Equal(t, "b:1", to, "a classic subscription avoids the node")
	to, err = f.s.target(routeSlotOwner, "a:1")
	require.NoError(t, err)
	assert.Equal(t, "a:1", to, "a sharded one has nowhere else to go")
	f.clk.Advance(avoidFor)
	to, err = f.s.target(routeAnyNode, "a:1")
	require.NoError(t, err)
	assert.Equal(t, "a:1", to, "avoided for avoidFor only")

	// A lone server keeps the connection: there is nowhere else to go.
	lone, loneServer := f.dialKind(t, "a:1", routeAsked)
	write(t, lone, subscribeX)
	reply(t, lone, loneServer, subscribedX)
	for range 3 {
		f.clk.Advance(3 * time.Second)
		write(t, lone, ping)
	}
	assert.False(t, lone.broken.Load())
}
