package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// subscriptionBudget is installed on the clients that run subscriptions
// and nothing else (subscription_client.go, subscription_sharded.go; on
// each node client in Cluster mode), so every dial it sees is a PubSub
// connection's: go-redis dials one through the client's dial hook on the
// first subscribe, one per reconnect, and closes the old one before it
// redials. Taking the permit at that dial and giving it back when that
// connection is closed is therefore exactly "held while the subscription
// runs": an unused Subscribe() dials nothing, Unsubscribe keeps the
// connection, and PubSub.Close (or Client.Close) closes it. go-redis
// dials the client's other pool through the same hook, and never uses it:
// those clients send no command of their own (newNodeClient).
//
// The same dial decides where a subscription goes (route) and registers the
// connection with subs, which moves it when its node stops answering
// (subscription_move.go).
type subscriptionBudget struct {
	subs  *subscriptions
	route subscriptionRoute
}

// subscriptionRoute says where a subscription may be dialed while the node
// go-redis asks for is known to be down.
type subscriptionRoute uint8

const (
	// routeAsked dials what go-redis asks for (Standalone: there is nowhere
	// else to go).
	routeAsked subscriptionRoute = iota
	// routeAnyNode is for classic channels and patterns in Cluster mode: the
	// cluster delivers them on every node, so a subscription whose node is
	// down goes to any healthy one.
	routeAnyNode
	// routeSlotOwner is for sharded channels: only the slot's owner delivers
	// them. A dial to an owner whose breaker is open is refused, and the
	// slot map reloaded, until the map names a new owner or the old one
	// answers its probe.
	routeSlotOwner
	// routeMaster is for Sentinel mode: go-redis resolves the master at each
	// dial. A dial while the master's breaker is open is refused; the
	// sentinels are being asked meanwhile (sentinel.go).
	routeMaster
)

func (h subscriptionBudget) DialHook(next redis.DialHook) redis.DialHook {
	s, route := h.subs, h.route
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if s.k.closed.Load() {
			return nil, ErrClosed
		}
		if route == routeSlotOwner {
			return s.dialSharded(ctx, network, addr, next)
		}
		target, err := s.target(route, addr)
		if err != nil {
			return nil, err
		}
		if err := s.a.acquire(ctx); err != nil {
			return nil, err
		}
		conn, err := next(ctx, network, target)
		if err != nil && route == routeAnyNode && isNetworkError(err) && ctx.Err() == nil {
			// A classic subscription need not wait for this node's breaker
			// to hear of it: any other node delivers the same messages.
			if alt := s.healthyNode(target); alt != "" {
				target = alt
				conn, err = next(ctx, network, target)
			}
		}
		if err != nil {
			s.a.release()
			return nil, err
		}
		if route == routeMaster {
			target = conn.RemoteAddr().String() // addr is go-redis's placeholder
			if n, ok := s.nodes.lookup(target); ok && n.br.State() == breaker.Open {
				// go-redis's sentinel still names the master redisguard
				// has moved away from: refused here, the dial does not
				// reach sentinelMaster's hook, which would take it for
				// the master again.
				_ = conn.Close()
				s.a.release()
				s.nodes.refused(n)
				return nil, n.unavailable
			}
		}
		return s.track(conn, target, route, true), nil
	}
}

// dialSharded dials a sharded subscription's first connection, to the
// slot owner go-redis asks for, and returns it as a splitConn, which dials
// the other owners its channels need (subscription_split.go). Only the
// first connection holds the subscription's permit. A later one to an
// owner whose breaker is open is refused at once: its channels wait, and
// the others are served.
func (s *subscriptions) dialSharded(ctx context.Context, network, addr string, next redis.DialHook) (net.Conn, error) {
	dial := func(ctx context.Context, addr string, home bool) (*subscriptionConn, error) {
		target, err := s.target(routeSlotOwner, addr)
		if err == nil && s.avoiding(target) {
			// It left a subscription's PING unanswered, and its breaker
			// may not know: a hung node accepts the dial and never
			// answers the handshake.
			err = fmt.Errorf("%w (node %s left a PING unanswered)", ErrNodeUnavailable, target)
		}
		if err != nil && home && errors.Is(err, ErrNodeUnavailable) {
			// The first connection carries only what go-redis sends
			// besides the shard channels, which go to their own owners:
			// any node serves it while the one go-redis asked for is down.
			if alt := s.healthyNode(addr); alt != "" {
				target, err = alt, nil
			} else {
				target, err = s.awaitOwner(ctx, addr)
			}
		}
		if err != nil {
			return nil, err
		}
		conn, err := next(ctx, network, target)
		if err != nil {
			return nil, err
		}
		return s.track(conn, target, routeSlotOwner, home), nil
	}
	if err := s.a.acquire(ctx); err != nil {
		return nil, err
	}
	home, err := dial(ctx, addr, true)
	if err != nil {
		s.a.release()
		return nil, err
	}
	return newSplitConn(s, home, func(ctx context.Context, addr string) (*subscriptionConn, error) {
		return dial(ctx, addr, false)
	}), nil
}

func (subscriptionBudget) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (subscriptionBudget) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// target returns the address to dial for a subscription go-redis wants on
// addr, or the error that refuses the dial.
func (s *subscriptions) target(route subscriptionRoute, addr string) (string, error) {
	var n *node
	switch route {
	case routeAsked:
		return addr, nil
	case routeMaster:
		n = s.master.node()
	default:
		var ok bool
		if n, ok = s.nodes.lookup(addr); !ok {
			return addr, nil
		}
	}
	if n.br.State() != breaker.Open {
		if route == routeAnyNode && s.avoiding(addr) {
			if alt := s.healthyNode(addr); alt != "" {
				return alt, nil
			}
		}
		return addr, nil
	}
	// Keep the node's prober running: it is what lets the dial through
	// again once the node answers.
	s.nodes.refused(n)
	if s.topo != nil {
		s.topo.trigger()
	}
	if route == routeAnyNode {
		if alt := s.healthyNode(addr); alt != "" {
			return alt, nil
		}
	}
	return "", n.unavailable
}

// healthyNode returns a random cluster node other than avoid whose breaker
// is not open, or "" if there is none. The candidates are the nodes of the
// last slot map, masters and replicas: the cluster delivers a classic
// message on each of them.
func (s *subscriptions) healthyNode(avoid string) string {
	var candidates []string
	seen := map[string]bool{avoid: true}
	add := func(addr string) {
		if seen[addr] {
			return
		}
		seen[addr] = true
		if n, ok := s.nodes.lookup(addr); ok && n.br.State() == breaker.Open || s.avoiding(addr) {
			return
		}
		candidates = append(candidates, addr)
	}
	if s.topo != nil {
		for _, addr := range s.topo.slotMap().Nodes() {
			add(addr)
		}
	}
	if len(candidates) == 0 {
		for _, n := range s.nodes.all() {
			add(n.addr)
		}
	}
	if len(candidates) == 0 {
		return ""
	}
	return candidates[rand.N(len(candidates))]
}

// awaitOwner waits, at most ownerWait, for the slot map to name the node
// that took over the slots addr served when its subscriptions were moved
// off it, and returns that node; or for addr to answer again, and returns
// addr. go-redis picked addr from a map that was stale; waiting here, rather
// than refusing at once, puts the subscription on the new owner as soon as
// redisguard's own refresh names it, instead of up to 100ms later when
// go-redis retries. Meanwhile the PubSub's other calls, Close included,
// wait for it.
func (s *subscriptions) awaitOwner(ctx context.Context, addr string) (string, error) {
	n, ok := s.nodes.lookup(addr)
	if !ok {
		return addr, nil
	}
	deadline := time.Now().Add(s.ownerWait)
	tick := time.NewTicker(ownerPoll)
	defer tick.Stop()
	for {
		if s.k.closed.Load() {
			return "", ErrClosed
		}
		if n.br.State() != breaker.Open {
			return addr, nil
		}
		if to := s.successor(addr); to != "" {
			return to, nil
		}
		s.nodes.refused(n)
		s.topo.trigger()
		if !time.Now().Before(deadline) {
			return "", n.unavailable
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
}

// How long a sharded subscription's dial waits for its slot's new owner,
// and how often it looks.
const (
	ownerWait = 500 * time.Millisecond
	ownerPoll = 20 * time.Millisecond
)

// successor returns the one master that, in the last slot map, serves every
// slot range addr served when its subscriptions were moved off it, if that
// master is not addr and its breaker is not open; "" otherwise.
func (s *subscriptions) successor(addr string) string {
	s.mu.Lock()
	ranges := s.owned[addr]
	s.mu.Unlock()
	if len(ranges) == 0 || s.topo == nil {
		return ""
	}
	view := s.topo.slotMap()
	to := ""
	for _, r := range ranges {
		m := view.Owner(r.Start)
		if m == "" || m == addr || (to != "" && m != to) {
			return ""
		}
		to = m
	}
	if n, ok := s.nodes.lookup(to); ok && n.br.State() == breaker.Open {
		return ""
	}
	return to
}

// servedBy returns the slot ranges addr is master of in the last slot map.
func (s *subscriptions) servedBy(addr string) []slotmap.Range {
	if s.topo == nil {
		return nil
	}
	return s.topo.slotMap().ServedBy(addr)
}
