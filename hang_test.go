package redisguard

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
)

// hangFixture is a node set on a fake clock whose hang watch is driven by
// hand: tick judges once, as the watch goroutine would every hangTick.
type hangFixture struct {
	clk   *clock.Fake
	nodes *nodeSet
	mu    sync.Mutex
	opens []Event
}

func newHangFixture(t *testing.T, addrs ...string) *hangFixture {
	t.Helper()
	f := &hangFixture{clk: clock.NewFake(slowEpoch)}
	cfg := Config{Addrs: addrs[:1], OnEvent: func(e Event) {
		if e.Kind == EventBreakerOpened {
			f.mu.Lock()
			f.opens = append(f.opens, e)
			f.mu.Unlock()
		}
	}}
	resolved, err := cfg.resolve()
	require.NoError(t, err)
	f.nodes = newNodeSet(newCore(resolved, f.clk), nil, func(context.Context, string, time.Duration) error { return nil })
	t.Cleanup(f.nodes.close)
	// The test judges in the watch goroutine's place: none starts.
	f.nodes.watch.running.Store(true)
	for _, a := range addrs {
		f.nodes.get(a)
	}
	return f
}

func (f *hangFixture) node(addr string) *node {
	n, _ := f.nodes.lookup(addr)
	return n
}

// conn is one of the node's connections, as its guard's dial hook
// registers it.
func (f *hangFixture) conn(addr string) net.Conn {
	return f.node(addr).conns.track(fakeConn{}, f.nodes.watch)
}

// ask sends the node a command on c; answer reads its reply.
func ask(c net.Conn)    { _, _ = c.Write([]byte("*1\r\n$4\r\nPING\r\n")) }
func answer(c net.Conn) { _, _ = c.Read(make([]byte, 16)) }

// tick advances the clock by d and judges.
func (f *hangFixture) tick(d time.Duration) {
	f.clk.Advance(d)
	f.nodes.watch.judge(f.clk.Now())
}

// run ticks every hangTick for d, calling each before every tick.
func (f *hangFixture) run(d time.Duration, each func()) {
	for end := f.clk.Now().Add(d); f.clk.Now().Before(end); {
		if each != nil {
			each()
		}
		f.tick(hangTick)
	}
}

// chatter is a node that keeps answering: one command asked and answered
// on c before every tick.
func chatter(c net.Conn) func() {
	return func() {
		ask(c)
		answer(c)
	}
}

func (f *hangFixture) opened() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Event(nil), f.opens...)
}

func TestHangWatchTripsASilentNode(t *testing.T) {
	f := newHangFixture(t, "a:1", "b:1", "c:1")
	f.tick(hangTick) // the run's first judgement
	a, b := f.conn("a:1"), f.conn("b:1")
	ask(a)
	// b keeps answering: the client hears fine.
	f.run(DefaultHungNodeAfter-2*hangTick, chatter(b))
	assert.Empty(t, f.opened(), "opened before HungNodeAfter of silence")
	assert.Equal(t, breaker.Closed, f.node("a:1").br.State())

	f.run(4*hangTick, chatter(b))
	opens := f.opened()
	require.Len(t, opens, 1, "the silent node's breaker did not open")
	assert.Equal(t, "a:1", opens[0].Addr)
	assert.Equal(t, DecisionSilent, opens[0].Decision)
	assert.GreaterOrEqual(t, opens[0].Duration, DefaultHungNodeAfter)
	assert.Less(t, opens[0].Duration, DefaultHungNodeAfter+3*hangTick)
	assert.Equal(t, breaker.Open, f.node("a:1").br.State())
	assert.Equal(t, breaker.Closed, f.node("b:1").br.State(), "the node that answered")
	assert.Zero(t, f.node("a:1").conns.len(), "the hung node's connections were not cut")
	assert.Equal(t, 1, f.node("b:1").conns.len(), "a healthy node's connection was cut")
}

// The watch marks a node silent once it has been asked something and
// answered nothing for half HungNodeAfter, before its bound trips the
// breaker; a late tick leaves the mark, and the node's first answer, or
// having nothing asked, clears it. A node that answers every few ticks (a
// slow one) is never silent.
func TestHangWatchMarksASilentNode(t *testing.T) {
	f := newHangFixture(t, "a:1", "b:1", "c:1")
	f.tick(hangTick)
	a, b := f.conn("a:1"), f.conn("b:1")
	n := f.node("a:1")
	ask(a)
	f.run(DefaultHungNodeAfter/2-hangTick, chatter(b))
	assert.False(t, n.silent.Load(), "silent before half HungNodeAfter")
	f.run(2*hangTick, chatter(b))
	assert.True(t, n.silent.Load(), "a node that answered nothing for half HungNodeAfter is not silent")
	assert.True(t, n.out(), "a silent node is not out")
	assert.False(t, f.node("b:1").silent.Load(), "a node that answers is silent")
	f.tick(2 * hangLate)
	assert.True(t, n.silent.Load(), "a late tick cleared the mark")
	answer(a)
	f.tick(hangTick)
	assert.False(t, n.silent.Load(), "an answer did not clear the mark")
	assert.Empty(t, f.opened())

	// Slow, not silent: it answers every 75ms.
	for range 20 {
		ask(a)
		f.run(3*hangTick, chatter(b))
		answer(a)
		assert.False(t, n.silent.Load(), "a slow node is silent")
	}
}

func TestHangWatchAloneTripsOnItsOwn(t *testing.T) {
	// Standalone: one node, no peers to compare with; punctual ticks say
	// the client is not the one stalled.
	f := newHangFixture(t, "a:1")
	f.tick(hangTick)
	ask(f.conn("a:1"))
	f.run(DefaultHungNodeAfter+2*hangTick, nil)
	require.Len(t, f.opened(), 1)
	assert.Equal(t, breaker.Open, f.node("a:1").br.State())
}

func TestHangWatchLeavesANodeThatAnswers(t *testing.T) {
	f := newHangFixture(t, "a:1", "b:1")
	f.tick(hangTick)
	// Always something waiting for a reply, one reply every 100ms: a node
	// under a heavy load, slow, never silent for 400ms.
	conns := []net.Conn{f.conn("a:1"), f.conn("a:1")}
	ask(conns[0])
	ask(conns[1])
	elapsed := time.Duration(0)
	f.run(5*time.Second, func() {
		elapsed += hangTick
		if elapsed%(100*time.Millisecond) == 0 {
			c := conns[int(elapsed/(100*time.Millisecond))%2]
			answer(c)
			ask(c)
		}
	})
	assert.Empty(t, f.opened())
}

func TestHangWatchJudgesOnlyWhatWasAsked(t *testing.T) {
	f := newHangFixture(t, "a:1")
	f.tick(hangTick)
	c := f.conn("a:1")
	// Commands in flight that never reached the node (they wait for a
	// connection, or their callers gave up before they were written) are
	// not its silence, however long.
	_, err := f.node("a:1").admit()
	require.NoError(t, err)
	f.run(5*time.Second, nil)
	assert.Empty(t, f.opened(), "tripped a node that was asked nothing")
	// Asked, answered within its bound, idle again.
	ask(c)
	f.run(DefaultHungNodeAfter-2*hangTick, nil)
	answer(c)
	f.run(time.Second, nil)
	assert.Empty(t, f.opened())
}

func TestHangWatchLateTickJudgesAfresh(t *testing.T) {
	// The client stalled (GC, a starved process): a tick comes 2s late.
	// Whatever the nodes said meanwhile went unread; nobody is tripped.
	f := newHangFixture(t, "a:1")
	f.tick(hangTick)
	ask(f.conn("a:1"))
	f.tick(2 * time.Second)
	assert.Empty(t, f.opened(), "tripped on the client's own stall")
	// Silent from then on, on time: tripped after its bound.
	f.run(DefaultHungNodeAfter+2*hangTick, nil)
	assert.Len(t, f.opened(), 1)
}

func TestHangWatchEveryWaitingNodeSilentIsTheClient(t *testing.T) {
	f := newHangFixture(t, "a:1", "b:1", "c:1")
	f.tick(hangTick)
	for _, a := range []string{"a:1", "b:1", "c:1"} {
		ask(f.conn(a))
	}
	f.run(3*time.Second, nil)
	assert.Empty(t, f.opened(), "every node asked is silent: the client's network, not theirs")
	for _, a := range []string{"a:1", "b:1", "c:1"} {
		assert.Equal(t, breaker.Closed, f.node(a).br.State(), a)
	}
}

func TestHangWatchTwoOfThreeSilent(t *testing.T) {
	f := newHangFixture(t, "a:1", "b:1", "c:1")
	f.tick(hangTick)
	ask(f.conn("a:1"))
	ask(f.conn("b:1"))
	f.run(DefaultHungNodeAfter+2*hangTick, chatter(f.conn("c:1")))
	assert.Len(t, f.opened(), 2)
	assert.Equal(t, breaker.Open, f.node("a:1").br.State())
	assert.Equal(t, breaker.Open, f.node("b:1").br.State())
	assert.Equal(t, breaker.Closed, f.node("c:1").br.State())
}

func TestHangWatchBoundFollowsLatency(t *testing.T) {
	// Every command of this cluster takes 200ms: 400ms without an answer
	// is two commands' worth, not a hang.
	f := newHangFixture(t, "a:1", "b:1", "c:1")
	for _, a := range []string{"a:1", "b:1", "c:1"} {
		f.node(a).lat.Observe(f.clk.Now(), 200*time.Millisecond)
	}
	bound := f.nodes.watch.bound(f.node("a:1"), f.nodes.snapshot())
	assert.Equal(t, hangFactor*200*time.Millisecond, bound)
	f.tick(hangTick)
	ask(f.conn("a:1"))
	b := chatter(f.conn("b:1"))
	f.run(time.Second, b)
	assert.Empty(t, f.opened(), "opened a node within a few of its usual latencies")
	f.run(bound, b)
	assert.Len(t, f.opened(), 1)
}

func TestHangWatchReplyAfterTheCallerGaveUpIsHeard(t *testing.T) {
	// A reply that reached the socket only after the caller's deadline had
	// passed is never read (go-redis closes the connection), but the node
	// did answer. A loopback socket, so that there is one to look into.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	cli, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	srv, err := l.Accept()
	require.NoError(t, err)
	defer srv.Close()

	f := newHangFixture(t, "a:1", "b:1")
	f.tick(hangTick)
	c := f.node("a:1").conns.track(cli, f.nodes.watch)
	defer c.Close()
	ask(c)
	f.run(DefaultHungNodeAfter/2, nil)
	_, err = srv.Write([]byte("+PONG\r\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return dataWaiting(cli) }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(-time.Second))) // the caller's deadline has passed
	_, err = c.Read(make([]byte, 16))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "go-redis's read gives up at the deadline")
	require.NoError(t, c.Close()) // as go-redis closes it
	ask(f.conn("a:1"))            // and another command goes unanswered
	f.run(DefaultHungNodeAfter/2+2*hangTick, nil)
	assert.Empty(t, f.opened(), "the late reply was not taken for an answer")
	f.run(DefaultHungNodeAfter, nil)
	assert.Len(t, f.opened(), 1, "silent since: tripped after its bound")
}

func TestHangWatchIgnoresLongWork(t *testing.T) {
	// A BLPOP waits by design: it runs on a connection of its own, not
	// tracked, and is counted apart.
	f := newHangFixture(t, "a:1")
	f.tick(hangTick)
	n := f.node("a:1")
	_, err := n.admitAs(true)
	require.NoError(t, err)
	f.run(5*time.Second, nil)
	assert.Empty(t, f.opened())
	assert.Equal(t, int64(1), n.long.Load())
}

func TestHangWatchOffWithBreakers(t *testing.T) {
	resolved, err := Config{Addrs: []string{"a:1"}, NodeFailureThreshold: -1}.resolve()
	require.NoError(t, err)
	nodes := newNodeSet(newCore(resolved, clock.Real()), nil, nil)
	defer nodes.close()
	assert.Nil(t, nodes.watch)
	c := nodes.get("a:1").conns.track(fakeConn{}, nodes.watch)
	ask(c) // wakes nothing
}

// The watch goroutine starts with the first command written to a node and
// ends once no connection has waited for a reply for a while: an idle
// client runs none.
func TestHangWatchRunsOnlyWhileBusy(t *testing.T) {
	resolved, err := Config{Addrs: []string{"a:1"}}.resolve()
	require.NoError(t, err)
	clk := clock.NewFake(slowEpoch)
	nodes := newNodeSet(newCore(resolved, clk), nil, nil)
	defer nodes.close()
	c := nodes.get("a:1").conns.track(fakeConn{}, nodes.watch)
	assert.False(t, nodes.watch.running.Load())
	ask(c)
	assert.True(t, nodes.watch.running.Load(), "the first command did not wake the watch")
	answer(c)
	// The watch ends after hangIdleStop of idleness by the client's clock;
	// it wakes on a real ticker, which this waits for.
	require.Eventually(t, func() bool {
		clk.Advance(hangIdleStop / 4)
		return !nodes.watch.running.Load()
	}, 10*time.Second, 5*time.Millisecond, "the watch kept running with nothing outstanding")
	ask(c)
	assert.True(t, nodes.watch.running.Load(), "a command after the watch stopped did not wake it again")
	answer(c)
}

// fakeConn is a connection to a node that answers every read at once.
type fakeConn struct{}

func (fakeConn) Read(p []byte) (int, error)       { return copy(p, "+PONG\r\n"), nil }
func (fakeConn) Write(p []byte) (int, error)      { return len(p), nil }
func (fakeConn) Close() error                     { return nil }
func (fakeConn) LocalAddr() net.Addr              { return refusedAddr{} }
func (fakeConn) RemoteAddr() net.Addr             { return refusedAddr{} }
func (fakeConn) SetDeadline(time.Time) error      { return nil }
func (fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (fakeConn) SetWriteDeadline(time.Time) error { return nil }

// loopback returns both ends of a local TCP connection: a socket that the
// watch can look into.
func loopback(t *testing.T) (cli, srv net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	cli, err = net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	srv, err = l.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close(); _ = srv.Close() })
	return cli, srv
}

func TestHangWatchReplyNobodyReadIsNoSilence(t *testing.T) {
	// A starved machine: the node answered, and the goroutine that reads
	// the reply has not run for longer than the bound.
	cli, srv := loopback(t)
	f := newHangFixture(t, "a:1")
	f.tick(hangTick)
	c := f.node("a:1").conns.track(cli, f.nodes.watch)
	ask(c)
	_, err := srv.Write([]byte("+PONG\r\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return dataWaiting(cli) }, 5*time.Second, time.Millisecond)
	f.run(3*DefaultHungNodeAfter, nil)
	assert.Empty(t, f.opened(), "an answer waiting in the socket was taken for silence")

	// Read, and asked again without an answer: silent from now.
	answer(c)
	ask(c)
	f.run(DefaultHungNodeAfter+2*hangTick, nil)
	assert.Len(t, f.opened(), 1)
}

// A subscription's connection is listened to: a health-check PING the node
// leaves unanswered is its silence, an answer is heard, and a subscriber
// that does not keep up (the answer unread in the socket) is no silence.
// Its connection is not cut with the others: subscriptions move.
func TestHangWatchListensToSubscriptions(t *testing.T) {
	f := newHangFixture(t, "a:1", "b:1")
	subs := newSubscriptions(f.nodes.k, nil, f.nodes, nil, nil, nil)
	f.tick(hangTick)

	cli, srv := loopback(t)
	sub := subs.track(cli, "a:1", routeAsked, false)
	_, _ = sub.Write(pingCmd)
	_, err := srv.Write([]byte("*2\r\n$4\r\npong\r\n$0\r\n\r\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return dataWaiting(cli) }, 5*time.Second, time.Millisecond)
	f.run(3*DefaultHungNodeAfter, nil)
	assert.Empty(t, f.opened(), "an unread PONG was taken for silence")
	_, err = sub.Read(make([]byte, 64))
	require.NoError(t, err)
	f.run(3*DefaultHungNodeAfter, nil)
	assert.Empty(t, f.opened(), "an answered PING was taken for silence")

	_, _ = sub.Write(pingCmd)
	f.run(DefaultHungNodeAfter-2*hangTick, nil)
	assert.Empty(t, f.opened(), "opened before HungNodeAfter of silence")
	f.run(4*hangTick, nil)
	opens := f.opened()
	require.Len(t, opens, 1, "the PING left unanswered did not open the breaker")
	assert.Equal(t, "a:1", opens[0].Addr)
	assert.Equal(t, DecisionSilent, opens[0].Decision)

	// Closed, the connection is forgotten.
	require.NoError(t, sub.Close())
	f.node("a:1").conns.mu.Lock()
	left := len(f.node("a:1").conns.subs)
	f.node("a:1").conns.mu.Unlock()
	assert.Zero(t, left)
}

// Callers that give up within a millisecond on a loaded but healthy node:
// every command is written, and its connection closed unanswered before
// the next tick, because the reply comes after its caller's deadline. The
// node never kept a connection waiting, and it is not judged silent. The
// same node kept waiting by callers of 100ms is.
func TestHangWatchImpatientCallersAddUpToNoSilence(t *testing.T) {
	f := newHangFixture(t, "a:1")
	f.tick(hangTick)
	var pending net.Conn
	f.run(3*DefaultHungNodeAfter, func() {
		if pending != nil {
			_ = pending.Close()
		}
		c := f.conn("a:1")
		ask(c)
		_ = c.Close()
		pending = f.conn("a:1") // written just before the tick, closed after it
		ask(pending)
	})
	assert.Empty(t, f.opened(), "a node whose callers gave up at once was taken for silent")

	var c net.Conn
	waited := 0
	f.run(DefaultHungNodeAfter+4*hangTick, func() {
		if c == nil || waited == 4 { // each caller gives up after 100ms
			if c != nil {
				_ = c.Close()
			}
			c, waited = f.conn("a:1"), 0
			ask(c)
		}
		waited++
	})
	require.Len(t, f.opened(), 1, "a node that kept its callers waiting 100ms each was not found silent")
	assert.Equal(t, DecisionSilent, f.opened()[0].Decision)
}
