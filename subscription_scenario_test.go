package redisguard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// publishLog numbers messages and records when each one that the server
// accepted was sent.
type publishLog struct {
	channel string
	mu      sync.Mutex
	at      map[int]time.Time // guarded by mu
}

// publishEvery sends message 0, 1, 2, ... on channel with publish every 10ms, each in
// its own goroutine, so that one stuck on a hung node holds up none of the
// others. stop ends it and waits for the sends in flight.
func publishEvery(channel string, publish func(ctx context.Context, channel, payload string) error) (*publishLog, func()) {
	l := &publishLog{channel: channel, at: make(map[int]time.Time)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				sent := time.Now()
				if publish(ctx, channel, strconv.Itoa(i)) == nil {
					l.mu.Lock()
					l.at[i] = sent
					l.mu.Unlock()
				}
			}()
		}
	}()
	return l, func() { close(done); wg.Wait() }
}

// received reports how many of the messages published at or after from
// the subscriber got, out of how many.
func (l *publishLog) received(s *subscriberLog, from time.Time) (got, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, at := range l.at {
		if at.Before(from) {
			continue
		}
		total++
		if s.got[received{l.channel, i}] {
			got++
		}
	}
	return got, total
}

// subscriberLog records the message numbers one subscription received.
type subscriberLog struct {
	name string
	mu   sync.Mutex
	got  map[received]bool // guarded by mu
	done chan struct{}
}

// received is one message: its channel and number.
type received struct {
	channel string
	n       int
}

// receiveAll reads ps's Channel until ps is closed.
func receiveAll(name string, ps *redis.PubSub) *subscriberLog {
	s := &subscriberLog{name: name, got: make(map[received]bool), done: make(chan struct{})}
	ch := ps.Channel()
	go func() {
		defer close(s.done)
		for m := range ch {
			if n, err := strconv.Atoi(m.Payload); err == nil {
				s.mu.Lock()
				s.got[received{m.Channel, n}] = true
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *subscriberLog) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// find returns the events of kind that match.
func (l *eventLog) find(kind EventKind, match func(Event) bool) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.events {
		if e.Kind == kind && match(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits for the first event of kind that matches and returns when
// it happened.
func (l *eventLog) waitEvent(t *testing.T, d time.Duration, kind EventKind, match func(Event) bool) time.Time {
	t.Helper()
	var at time.Time
	redistest.WaitFor(t, d, kind.String(), func() error {
		if es := l.find(kind, match); len(es) > 0 {
			at = es[0].Time
			return nil
		}
		return fmt.Errorf("no %s yet", kind)
	})
	return at
}

// waitReceiving waits until every subscriber has received something.
func waitReceiving(t *testing.T, subs ...*subscriberLog) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, "every subscriber to receive", func() error {
		for _, s := range subs {
			if s.count() == 0 {
				return fmt.Errorf("%s received nothing", s.name)
			}
		}
		return nil
	})
}

// ratio renders got/total.
func ratio(got, total int) string {
	if total == 0 {
		return "nothing published"
	}
	return fmt.Sprintf("%s (%d/%d)", fmtPct(float64(got)/float64(total)), got, total)
}

// noPubSubClients waits until no node lists a pub/sub client.
func noPubSubClients(t *testing.T, nodes ...*redistest.Server) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, "the subscription connections to be gone", func() error {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			list, err := n.Admin().ClientList(ctx).Result()
			cancel()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(list, "\n") {
				if strings.Contains(line, "cmd=subscribe") || strings.Contains(line, "cmd=ssubscribe") ||
					strings.Contains(line, "cmd=psubscribe") || strings.Contains(line, " flags=P ") {
					return fmt.Errorf("%s still has %q", n.Addr, line)
				}
			}
		}
		return nil
	})
}

// A cluster master hangs (SIGSTOP) and its replica is promoted
// (cluster-node-timeout 2s). A classic subscription on it moves to a healthy
// node as soon as the master's breaker opens; a sharded one follows the
// promotion. go-redis alone is measured beside, in the same run.
func TestScenarioSubscriptionsFollowClusterFailover(t *testing.T) {
	sideBySide(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	owner, other := cl.Masters[0], cl.Masters[1]
	partner := replicaOf(cl, owner)
	classic := cl.KeyOn(t, owner, "subs:classic") // go-redis subscribes on the channel's slot owner
	sharded := cl.KeyOn(t, owner, "subs:sharded")
	// One subscription to a shard channel on each of two masters: split
	// over both, it keeps the healthy master's while the other's moves.
	splitHung, splitHealthy := cl.KeyOn(t, owner, "subs:split-hung"), cl.KeyOn(t, other, "subs:split-healthy")
	observe := pick(20*time.Second, 12*time.Second)
	ctx := testCtx(t, time.Minute)

	var events eventLog
	guard := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), OnEvent: events.onEvent,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = stock.Close() })
	// A client with the default Config whose only traffic is its
	// subscription: no breaker opens for it, and it moves when the node
	// leaves its health check unanswered.
	lone := newTestClient(t, Config{Addrs: cl.Addrs()})

	subs := map[string]*redis.PubSub{
		"redisguard classic, no other traffic":        lone.Subscribe(ctx, classic),
		"redisguard classic":                          guard.Subscribe(ctx, classic),
		"redisguard sharded":                          guard.SSubscribe(ctx, sharded),
		"redisguard sharded, split":                   guard.SSubscribe(ctx, splitHung, splitHealthy),
		"redisguard sharded, split, no other traffic": lone.SSubscribe(ctx, splitHung, splitHealthy),
		"go-redis classic":                            stock.Subscribe(ctx, classic),
		"go-redis sharded":                            stock.SSubscribe(ctx, sharded),
	}
	logs := map[string]*subscriberLog{}
	for name, ps := range subs {
		logs[name] = receiveAll(name, ps)
	}
	// Closed while its move waits for the promotion: it must leave nothing.
	abandoned := guard.SSubscribe(ctx, sharded)
	_, err := abandoned.Receive(ctx)
	require.NoError(t, err)

	// Classic messages are sent to a healthy master, which the cluster
	// forwards to every node; sharded ones through redisguard, to the
	// slot's owner, which is also what opens its breaker once it hangs.
	direct := other.Admin()
	classicPub, stopClassic := publishEvery(classic, func(ctx context.Context, ch, p string) error {
		return direct.Publish(ctx, ch, p).Err()
	})
	spublish := func(ctx context.Context, ch, p string) error { return guard.SPublish(ctx, ch, p).Err() }
	shardedPub, stopSharded := publishEvery(sharded, spublish)
	hungPub, stopHung := publishEvery(splitHung, spublish)
	healthyPub, stopHealthy := publishEvery(splitHealthy, spublish)
	waitReceiving(t, slices.Collect(maps.Values(logs))...)

	paused := time.Now()
	owner.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			owner.Resume(t)
		}
	}()
	promotedCh := make(chan time.Duration, 1)
	go func() { promotedCh <- waitPromoted(partner, paused, observe) }()
	opened := events.waitEvent(t, 10*time.Second, EventBreakerOpened, func(e Event) bool { return e.Addr == owner.Addr })
	require.NoError(t, abandoned.Close())
	time.Sleep(time.Until(paused.Add(observe)))
	stopClassic()
	stopSharded()
	stopHung()
	stopHealthy()
	time.Sleep(500 * time.Millisecond) // the last messages in flight
	promotedAfter := <-promotedCh
	require.Positive(t, promotedAfter, "the replica was not promoted within %v", observe)
	promoted := paused.Add(promotedAfter)
	inUse := guard.Stats().LongInUse
	for _, ps := range subs {
		require.NoError(t, ps.Close())
	}
	for _, l := range logs {
		<-l.done
	}

	classicFrom, shardedFrom := opened.Add(time.Second), promoted.Add(time.Second)
	gc, gcTotal := classicPub.received(logs["redisguard classic"], classicFrom)
	sc, scTotal := classicPub.received(logs["go-redis classic"], classicFrom)
	gs, gsTotal := shardedPub.received(logs["redisguard sharded"], shardedFrom)
	hs, hsTotal := hungPub.received(logs["redisguard sharded, split"], shardedFrom)
	// The healthy master's channel, from 1s after the breaker opened: the
	// subscription is re-established without the hung master's channel.
	ks, ksTotal := healthyPub.received(logs["redisguard sharded, split"], classicFrom)
	ss, ssTotal := shardedPub.received(logs["go-redis sharded"], shardedFrom)
	// go-redis's health check pings every 3s while nothing arrives; the
	// second PING finds the first unanswered.
	// Under -race in make test, the hung master's channel of a split
	// subscription with the default Config was back 8 to 9.1s after the
	// pause in about one run in four (before and after 2026-12-01's
	// changes); the strict runs judge it from 8s, make test from 10s.
	loneAfter := pick(8*time.Second, 10*time.Second)
	loneFrom := paused.Add(loneAfter)
	lc, lcTotal := classicPub.received(logs["redisguard classic, no other traffic"], loneFrom)
	sl, slTotal := classicPub.received(logs["go-redis classic"], loneFrom)
	table(t, fmt.Sprintf("subscriptions through a hung cluster master: breaker opened %v and replica promoted %v after the pause",
		opened.Sub(paused).Round(time.Millisecond), promotedAfter.Round(time.Millisecond)),
		[]string{"client", "classic, from 1s after the breaker opened", "sharded, from 1s after the promotion"},
		[]string{"go-redis", ratio(sc, scTotal), ratio(ss, ssTotal)},
		[]string{"redisguard", ratio(gc, gcTotal), ratio(gs, gsTotal)})
	t.Logf("classic, default Config, subscription only, from %v after the pause: go-redis %s, redisguard %s", loneAfter, ratio(sl, slTotal), ratio(lc, lcTotal))
	t.Logf("redisguard, one SSubscribe over two masters: the hung master's channel from 1s after the promotion %s, the healthy master's from 1s after the breaker opened %s",
		ratio(hs, hsTotal), ratio(ks, ksTotal))
	lhs, lhsTotal := hungPub.received(logs["redisguard sharded, split, no other traffic"], loneFrom)
	lks, lksTotal := healthyPub.received(logs["redisguard sharded, split, no other traffic"], loneFrom)
	t.Logf("the same, default Config, subscription only, from %v after the pause (go-redis refuses the subscription with CROSSSLOT): the hung master's channel %s, the healthy master's %s",
		loneAfter, ratio(lhs, lhsTotal), ratio(lks, lksTotal))

	want := pick(0.99, 0.97)
	require.Positive(t, gcTotal)
	require.Positive(t, gsTotal)
	assert.GreaterOrEqual(t, float64(gc)/float64(gcTotal), want, "classic subscription did not move to a healthy node")
	assert.GreaterOrEqual(t, float64(gs)/float64(gsTotal), want, "sharded subscription did not follow the promotion")
	require.Positive(t, hsTotal)
	require.Positive(t, ksTotal)
	assert.GreaterOrEqual(t, float64(hs)/float64(hsTotal), want, "a split subscription's channel did not follow the promotion")
	assert.GreaterOrEqual(t, float64(ks)/float64(ksTotal), want, "a split subscription's healthy channel stopped with the hung one")
	require.Positive(t, lhsTotal)
	assert.GreaterOrEqual(t, float64(lhs)/float64(lhsTotal), want, "a subscription-only split subscription did not leave the hung node")
	assert.GreaterOrEqual(t, float64(lks)/float64(lksTotal), want, "a subscription-only split subscription lost its healthy channel")
	require.Positive(t, lcTotal)
	assert.GreaterOrEqual(t, float64(lc)/float64(lcTotal), want, "a subscription-only client did not move off the hung node")

	moved := func(name string) []Event {
		return events.find(EventSubscriptionMoved, func(e Event) bool { return strings.Contains(e.Channels, name) })
	}
	for _, e := range slices.Concat(moved(classic), moved(sharded), moved(splitHung), moved(splitHealthy)) {
		t.Logf("event: %v", e)
	}

	if assert.Len(t, moved(classic), 1, "the classic move must be told once") {
		e := moved(classic)[0]
		assert.WithinDuration(t, opened, e.Time, time.Second, "the classic subscription moved long after the breaker opened")
		assert.Equal(t, owner.Addr, e.Addr)
		assert.NotEqual(t, owner.Addr, e.To)
		assert.Positive(t, e.Duration)
	}
	if assert.Len(t, moved(sharded), 1, "the sharded move must be told once") {
		assert.Equal(t, partner.Addr, moved(sharded)[0].To)
	}
	if assert.Len(t, moved(splitHung), 1, "the split subscription's move must be told once per node") {
		assert.Equal(t, owner.Addr, moved(splitHung)[0].Addr)
		assert.Equal(t, partner.Addr, moved(splitHung)[0].To)
	}
	if assert.Len(t, moved(splitHealthy), 1, "the split subscription's move must be told once per node") {
		assert.Equal(t, other.Addr, moved(splitHealthy)[0].To)
	}
	assert.Equal(t, uint64(4), guard.Stats().SubscriptionMoves)
	assert.Equal(t, 3, inUse, "each moved subscription holds exactly one permit")
	assert.Zero(t, guard.Stats().LongInUse)

	owner.Resume(t)
	resumed = true
	noPubSubClients(t, cl.Nodes()...)
}

// A Sentinel-managed master hangs; the sentinels promote its replica. The
// subscription follows the new master once the sentinels name it.
func TestScenarioSubscriptionsFollowSentinelFailover(t *testing.T) {
	sideBySide(t)
	g := redistest.StartSentinel(t)
	ctx := testCtx(t, time.Minute)
	var events eventLog
	guard := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs(),
		ReadTimeout: recoveryReadTimeout, OnEvent: events.onEvent})
	stock := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: g.Addrs(),
		ReadTimeout: recoveryReadTimeout})
	t.Cleanup(func() { _ = stock.Close() })

	// The default Config, and no traffic but the subscription: it moves
	// when the master leaves its health check unanswered.
	lone := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs()})

	const channel = "subs:sentinel"
	guardSub, stockSub, loneSub := guard.Subscribe(ctx, channel), stock.Subscribe(ctx, channel), lone.Subscribe(ctx, channel)
	guardLog, stockLog := receiveAll("redisguard", guardSub), receiveAll("go-redis", stockSub)
	loneLog := receiveAll("redisguard, default Config, subscription only", loneSub)
	pub, stop := publishEvery(channel, func(ctx context.Context, ch, p string) error { return guard.Publish(ctx, ch, p).Err() })
	waitReceiving(t, guardLog, stockLog, loneLog)

	old := g.Master.Addr
	paused := time.Now()
	g.Master.Pause(t)
	named := waitNewMaster(t, g.Sentinels, old)
	time.Sleep(time.Until(paused.Add(pick(15*time.Second, 10*time.Second))))
	stop()
	time.Sleep(500 * time.Millisecond)
	inUse := guard.Stats().LongInUse
	require.NoError(t, guardSub.Close())
	require.NoError(t, stockSub.Close())
	require.NoError(t, loneSub.Close())
	<-guardLog.done
	<-stockLog.done
	<-loneLog.done

	from := named.Add(time.Second)
	gg, gTotal := pub.received(guardLog, from)
	sg, sTotal := pub.received(stockLog, from)
	table(t, fmt.Sprintf("a subscription through a hung Sentinel master: new master named %v after the pause",
		named.Sub(paused).Round(time.Millisecond)),
		[]string{"client", "received, from 1s after the new master was named"},
		[]string{"go-redis", ratio(sg, sTotal)},
		[]string{"redisguard", ratio(gg, gTotal)})
	loneFrom := paused.Add(8 * time.Second)
	lg, lTotal := pub.received(loneLog, loneFrom)
	sl, slTotal := pub.received(stockLog, loneFrom)
	t.Logf("default Config, subscription only, from 8s after the pause: go-redis %s, redisguard %s", ratio(sl, slTotal), ratio(lg, lTotal))
	require.Positive(t, lTotal)
	assert.GreaterOrEqual(t, float64(lg)/float64(lTotal), pick(0.99, 0.97), "a subscription-only client did not follow the new master")
	require.Positive(t, gTotal)
	assert.GreaterOrEqual(t, float64(gg)/float64(gTotal), pick(0.99, 0.97), "the subscription did not follow the new master")
	moved := events.find(EventSubscriptionMoved, func(e Event) bool { return strings.Contains(e.Channels, channel) })
	for _, e := range moved {
		t.Logf("event: %v", e)
	}
	if assert.Len(t, moved, 1, "the move must be told once") {
		assert.Equal(t, old, moved[0].Addr)
		assert.Equal(t, g.Replica.Addr, moved[0].To)
	}
	assert.Equal(t, 1, inUse, "the moved subscription holds exactly one permit")
	assert.Zero(t, guard.Stats().LongInUse)
	g.Master.Resume(t)
}
