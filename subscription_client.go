package redisguard

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Subscribe is go-redis's Subscribe, on the subscriptions client; on the
// Cluster-mode Client once the server said cluster.
//
// Subscriptions run on go-redis clients of their own, which run nothing
// else (the subscriptions client here, the sharded one for SSubscribe):
// go-redis dials a client's PubSub connections through the same dial hook
// as its pooled ones, and runs their handshakes through the same process
// hooks, so a client that has no other connections is how its hooks know
// that every dial and handshake they see is a subscription's. The client
// shares the node breakers, the long budget and, in Cluster mode, the slot
// map; in Sentinel mode it is a failover client of its own, which follows
// the master as the ordinary one does.
func (c *Client) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	if up := c.current(); up != c {
		return up.Subscribe(ctx, channels...)
	}
	if cl := c.subs.classic(); cl != nil {
		return cl.Subscribe(ctx, channels...)
	}
	return c.UniversalClient.Subscribe(ctx, channels...) // closed: go-redis's closed error
}

// PSubscribe is go-redis's PSubscribe, as Subscribe.
func (c *Client) PSubscribe(ctx context.Context, patterns ...string) *redis.PubSub {
	if up := c.current(); up != c {
		return up.PSubscribe(ctx, patterns...)
	}
	if cl := c.subs.classic(); cl != nil {
		return cl.PSubscribe(ctx, patterns...)
	}
	return c.UniversalClient.PSubscribe(ctx, patterns...)
}

// classic returns the client Subscribe and PSubscribe run on, built on
// first use; nil once the Client is closed.
func (s *subscriptions) classic() redis.UniversalClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.plain == nil {
		// One pooled connection, never used: each subscription dials its
		// own (subscriptionBudget).
		s.plain = newGoRedis(clientSpec{kind: clientSubscriptions, k: s.k, nodes: s.nodes, poolSize: 1, hooks: s.hooks,
			budget: s.budget()}).(redis.UniversalClient)
	}
	return s.plain
}

// poolStats returns the PoolStats of the subscriptions client of a
// Standalone or Sentinel Client, nil before it is built: go-redis folds no
// PubSub statistics into a cluster client's PoolStats.
func (s *subscriptions) poolStats() *redis.PoolStats {
	s.mu.Lock()
	cl, ok := s.plain.(*redis.Client)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return cl.PoolStats()
}

// withClients runs fn with the sharded and the classic subscriptions
// clients, nil if not built, and builds none meanwhile: a client built
// after fn returns gets what fn registered (Instrument's extensions) when
// it is built.
func (s *subscriptions) withClients(fn func(sharded *redis.ClusterClient, classic redis.UniversalClient) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(s.shard, s.plain)
}

// close closes the subscription clients, and with them their
// subscriptions' connections.
func (s *subscriptions) close() error {
	s.mu.Lock()
	s.closed = true
	cc, plain := s.shard, s.plain
	s.mu.Unlock()
	var errs []error
	if cc != nil {
		errs = append(errs, cc.Close())
	}
	if plain != nil {
		errs = append(errs, plain.Close())
	}
	return errors.Join(errs...)
}
