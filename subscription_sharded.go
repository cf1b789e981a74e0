package redisguard

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// SSubscribe subscribes to sharded channels, as go-redis's SSubscribe does.
// In Cluster mode the subscription follows its slot's owner: when the
// owner stops answering, its connection is closed, and go-redis subscribes
// again at the owner the refreshed slot map names, once the replica is
// promoted (or the old owner answers again). Until then its dials are
// refused at once. All the channels of one SSubscribe must hash to one
// slot, as in Redis.
//
// go-redis gives a subscription no way to tell its kind at the moment it
// dials, so in Cluster mode sharded subscriptions run on a go-redis cluster
// client of their own, which shares the node breakers and the slot map
// refreshes. Shard channels added to a PubSub from Subscribe or PSubscribe
// are routed as classic ones (any healthy node), which after a move answers
// them with a redirect; use SSubscribe for them.
func (c *Client) SSubscribe(ctx context.Context, channels ...string) *redis.PubSub {
	if cc := c.subs.sharded(); cc != nil {
		return cc.SSubscribe(ctx, channels...)
	}
	return c.UniversalClient.SSubscribe(ctx, channels...)
}

// sharded returns the cluster client sharded subscriptions run on, built on
// first use; nil outside Cluster mode or once the Client is closed.
func (s *subscriptions) sharded() *redis.ClusterClient {
	if s.topo == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.shard == nil {
		// Its pools serve only the slot-map look-ups and the handshakes of
		// its subscriptions; the subscriptions dial connections of their own.
		cc := newGoRedis(s.k, s.nodes, nil, 1, false).(*redis.ClusterClient)
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(subscriptionBudget{s, routeSlotOwner}) })
		s.topo.attach(cc)
		s.shard = cc
	}
	return s.shard
}

// close closes the sharded-subscription client, and with it its
// subscriptions' connections.
func (s *subscriptions) close() error {
	s.mu.Lock()
	s.closed = true
	cc := s.shard
	s.mu.Unlock()
	if cc == nil {
		return nil
	}
	return cc.Close()
}
