package redisguard

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// Topology refresh limits. A refresh is one CLUSTER SLOTS sent to one node;
// refreshMinInterval plus up to refreshJitter apart, so a herd of failing
// callers costs the cluster at most two topology calls a second.
const (
	refreshMinInterval = 500 * time.Millisecond
	refreshJitter      = 100 * time.Millisecond
)

// topology keeps the cluster slot map fresh without letting many callers
// refresh it at once.
//
// go-redis already reloads its slot map lazily and in the background
// (callers keep using the current map meanwhile) and asks nodes in random
// order. What it lacks is a bound: every MOVED, every caller of a fresh
// client and every reload request may send its own CLUSTER SLOTS. topology
// sits where those calls leave go-redis, in each node's hook: concurrent
// calls share one round trip (singleflight), calls within the minimum
// interval are answered from the last map, and nodes whose breaker is open
// are skipped for free because their hook fails fast.
type topology struct {
	c *Client

	sf singleflight.Group

	mu       sync.Mutex
	clusters []*redis.ClusterClient // guarded by mu; the clients to reload
	slots    []redis.ClusterSlot    // guarded by mu; last map fetched, read-only once stored
	next     time.Time              // guarded by mu; earliest time for the next real fetch

	fetches  atomic.Uint64 // CLUSTER SLOTS calls sent to a server
	failures atomic.Uint64 // of which failed
	lastDur  atomic.Int64  // duration of the last fetch, ns
}

func newTopology(c *Client) *topology { return &topology{c: c} }

// attach registers a cluster client whose slot map trigger reloads.
func (t *topology) attach(cc *redis.ClusterClient) {
	t.mu.Lock()
	t.clusters = append(t.clusters, cc)
	t.mu.Unlock()
}

// due reports whether a real fetch is allowed now.
func (t *topology) due(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !now.Before(t.next)
}

// trigger asks every attached client to reload its slot map, unless a fetch
// happened within the minimum interval. It never blocks: go-redis reloads in
// the background and callers keep the map they have.
func (t *topology) trigger() {
	if t.c.closed.Load() || !t.due(t.c.clock.Now()) {
		return
	}
	t.mu.Lock()
	clusters := append([]*redis.ClusterClient(nil), t.clusters...)
	t.mu.Unlock()
	for _, cc := range clusters {
		cc.ReloadState(context.Background())
	}
}

// force discards the rate limit and reloads: for when the map is known to be
// wrong.
func (t *topology) force() {
	t.mu.Lock()
	t.next = time.Time{}
	t.mu.Unlock()
	t.trigger()
}

// serve answers a CLUSTER SLOTS that go-redis is about to send through a
// node's guarded hook: from the last map while it is fresh, otherwise with
// one shared fetch.
func (t *topology) serve(ctx context.Context, cmd redis.Cmder, send redis.ProcessHook) error {
	sc, ok := cmd.(*redis.ClusterSlotsCmd)
	if !ok {
		return send(ctx, cmd)
	}
	now := t.c.clock.Now()
	t.mu.Lock()
	if t.slots != nil && now.Before(t.next) {
		sc.SetVal(t.slots)
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()

	v, err, shared := t.sf.Do("slots", func() (any, error) {
		start := time.Now()
		t.mu.Lock()
		t.next = t.c.clock.Now().Add(refreshMinInterval + rand.N(refreshJitter))
		t.mu.Unlock()
		err := send(ctx, sc)
		if isGuardError(err) {
			return nil, err // breaker open: nothing was sent
		}
		t.fetches.Add(1)
		t.lastDur.Store(int64(time.Since(start)))
		if err != nil {
			t.failures.Add(1)
			t.c.log.Warn("redisguard: topology refresh failed", "err", err)
			return nil, err
		}
		slots := sc.Val()
		t.mu.Lock()
		t.slots = slots
		t.mu.Unlock()
		t.c.log.Debug("redisguard: topology refreshed", "duration", time.Since(start), "ranges", len(slots))
		return slots, nil
	})
	if err != nil {
		return err
	}
	if shared {
		sc.SetVal(v.([]redis.ClusterSlot))
	}
	return nil
}

// isClusterSlots reports whether cmd is CLUSTER SLOTS, without allocating.
func isClusterSlots(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	a0, ok0 := args[0].(string)
	a1, ok1 := args[1].(string)
	return ok0 && ok1 && strings.EqualFold(a0, "cluster") && strings.EqualFold(a1, "slots")
}
