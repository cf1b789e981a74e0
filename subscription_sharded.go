package redisguard

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SSubscribe subscribes to sharded channels, as go-redis's SSubscribe does.
// In Cluster mode the subscription follows its slot's owner: when the
// owner stops answering, its connection is closed, and go-redis subscribes
// again at the owner the refreshed slot map names, once the replica is
// promoted (or the old owner answers again); until then its dials are
// refused. Channels in several slots are subscribed with one SSUBSCRIBE per
// slot, so no CROSSSLOT comes back, and channels of several nodes each on a
// connection to their own node, under the one connection go-redis sees
// (splitConn).
//
// go-redis gives a subscription no way to tell its kind at the moment it
// dials, so in Cluster mode sharded subscriptions run on a go-redis cluster
// client of their own, which shares the node breakers and the slot map
// refreshes. Shard channels added to a PubSub from Subscribe or PSubscribe
// are routed as classic ones (any healthy node), which after a move answers
// them with a redirect; use SSubscribe for them.
func (c *Client) SSubscribe(ctx context.Context, channels ...string) *redis.PubSub {
	if up := c.current(); up != c {
		return up.SSubscribe(ctx, channels...)
	}
	if cc := c.subs.sharded(); cc != nil {
		return cc.SSubscribe(ctx, channels...)
	}
	if cl := c.subs.classic(); cl != nil && c.topo == nil {
		return cl.SSubscribe(ctx, channels...) // Standalone, Sentinel: one server
	}
	return c.UniversalClient.SSubscribe(ctx, channels...) // closed: go-redis's closed error
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
		// Its pools are never used: the subscriptions dial connections of
		// their own, and the slot map comes from the topology cache.
		s.shard = newGoRedis(clientSpec{kind: clientSharded, k: s.k, nodes: s.nodes, poolSize: 1, hooks: s.hooks,
			budget: subscriptionBudget{s, routeSlotOwner}}).(*redis.ClusterClient)
	}
	return s.shard
}

// bySlot groups shard channels by slot, each slot in the order it first
// appears. An SSUBSCRIBE or SUNSUBSCRIBE sent as one command per group is
// answered exactly as the one command (a reply per channel), but without
// CROSSSLOT: go-redis sends all of a PubSub's shard channels in one
// SSUBSCRIBE when it subscribes again, and passes SSubscribe's channels on
// as given.
func bySlot(channels []string) [][]string {
	if len(channels) < 2 {
		return [][]string{channels}
	}
	index := map[int]int{}
	var groups [][]string
	for _, ch := range channels {
		s := channelSlot(ch)
		i, seen := index[s]
		if !seen {
			i = len(groups)
			index[s] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], ch)
	}
	return groups
}

// channelSlot is the cluster hash slot of a shard channel, as of a key:
// CRC16 (XMODEM) of its hash tag, or of the whole name without one, mod
// 16384.
func channelSlot(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(name); k++ {
		crc ^= uint16(name[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
