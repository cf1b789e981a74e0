package redisguard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// A process that only subscribes: one Subscribe and one SSubscribe, both on
// the channels of a master that hangs until its replica is promoted, the
// publisher in another client. Nothing but the subscriptions tells the
// client that the node is gone: the subscriptions themselves must notice,
// and follow the promotion.
func TestScenarioSubscriberOnlyProcessFollowsFailover(t *testing.T) {
	sideBySide(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	owner := cl.Masters[0]
	partner := replicaOf(cl, owner)
	classic := cl.KeyOn(t, owner, "lone:classic")
	sharded := cl.KeyOn(t, owner, "lone:sharded")
	ctx := testCtx(t, time.Minute)
	observe := pick(18*time.Second, 14*time.Second)

	var events eventLog
	lone := newTestClient(t, Config{Addrs: cl.Addrs(), OnEvent: events.onEvent})
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = stock.Close() })
	publisher := newTestClient(t, Config{Addrs: cl.Addrs()})

	subs := map[string]*redis.PubSub{
		"redisguard classic": lone.Subscribe(ctx, classic),
		"redisguard sharded": lone.SSubscribe(ctx, sharded),
		"go-redis classic":   stock.Subscribe(ctx, classic),
		"go-redis sharded":   stock.SSubscribe(ctx, sharded),
	}
	logs := map[string]*subscriberLog{}
	for name, ps := range subs {
		logs[name] = receiveAll(name, ps)
	}
	classicPub, stopClassic := publishEvery(classic, func(ctx context.Context, ch, p string) error { return publisher.Publish(ctx, ch, p).Err() })
	shardedPub, stopSharded := publishEvery(sharded, func(ctx context.Context, ch, p string) error { return publisher.SPublish(ctx, ch, p).Err() })
	for _, l := range logs {
		waitReceiving(t, l)
	}

	paused := time.Now()
	owner.Pause(t)
	defer owner.Resume(t)
	promotedAfter := waitPromoted(partner, paused, observe)
	require.Positive(t, promotedAfter, "the replica was not promoted")
	promoted := paused.Add(promotedAfter)
	time.Sleep(time.Until(paused.Add(observe)))
	stopClassic()
	stopSharded()
	time.Sleep(500 * time.Millisecond)
	for name, ps := range subs {
		require.NoError(t, ps.Close())
		<-logs[name].done
	}
	from := promoted.Add(3 * time.Second)
	rc, rcT := classicPub.received(logs["redisguard classic"], from)
	rs, rsT := shardedPub.received(logs["redisguard sharded"], from)
	sc, scT := classicPub.received(logs["go-redis classic"], from)
	ss, ssT := shardedPub.received(logs["go-redis sharded"], from)
	table(t, fmt.Sprintf("a subscriber-only process through a hung master, promoted %v after the pause; messages from 3s after the promotion",
		promotedAfter.Round(time.Millisecond)),
		[]string{"client", "classic", "sharded"},
		[]string{"go-redis", ratio(sc, scT), ratio(ss, ssT)},
		[]string{"redisguard", ratio(rc, rcT), ratio(rs, rsT)})
	// The classic subscription leaves at go-redis's first health-check
	// PING that the node leaves unanswered for the hang watch's bound:
	// 3s after the last message, and HungNodeAfter. Beside other tests
	// with -race, the watch's ticks come late often enough (each late
	// one restarts its count, as a stalled client's would) to add seconds;
	// the short form allows for that, the full one does not.
	var left time.Duration
	events.mu.Lock()
	for _, e := range events.events {
		t.Logf("event at %v: %v", e.Time.Sub(paused).Round(time.Millisecond), e)
		if e.Kind == EventSubscriptionMoved && left == 0 {
			left = e.Time.Sub(paused)
		}
	}
	events.mu.Unlock()
	t.Logf("the first subscription left the hung node %v after the pause", left.Round(time.Millisecond))
	assert.Positive(t, left, "no subscription moved")
	assert.Less(t, left, 3*time.Second+DefaultHungNodeAfter+pick(time.Second, 3*time.Second), "the subscriptions waited for more than one health check")
	require.Positive(t, rcT)
	require.Positive(t, rsT)
	assert.GreaterOrEqual(t, float64(rc)/float64(rcT), pick(0.99, 0.97), "the classic subscription did not follow")
	assert.GreaterOrEqual(t, float64(rs)/float64(rsT), pick(0.99, 0.97), "the sharded subscription did not follow")
}
