package redisguard

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/redisguard/redisguard/internal/slotmap"
)

// Topology refresh limits. A refresh is one CLUSTER SLOTS sent to one node;
// refreshMinInterval plus up to refreshJitter apart, so a herd of failing
// callers costs the cluster at most four topology calls a second (go-redis
// alone: one per client each 200ms, its reload cooldown, and more on every
// MOVED). While a master's breaker is open its callers keep asking, so a
// promotion is seen within one interval, 250-300ms, of the cluster's own
// map saying so.
const (
	refreshMinInterval = 250 * time.Millisecond
	refreshJitter      = 50 * time.Millisecond
)

// topology keeps the cluster slot map fresh without letting many callers
// refresh it at once, and gives every go-redis cluster client the Client
// runs (ordinary, long, sharded) the same map.
//
// go-redis already reloads its slot map lazily and in the background
// (callers keep using the current map meanwhile) and asks nodes in random
// order. What it lacks is a bound: every MOVED, every caller of a fresh
// client and every reload request may send its own CLUSTER SLOTS. topology
// sits where those calls leave go-redis, in each node's hook: concurrent
// calls share one round trip (singleflight), calls within the minimum
// interval after a fetch are answered from its map, and nodes whose breaker
// is open are skipped for free because their hook fails fast. A call that
// comes while a fetch is in flight waits for that fetch rather than take
// the map it is replacing, and a fetched map that differs from the last is
// handed to every attached client at once (each reloads, answered from it).
type topology struct {
	k *core

	sf singleflight.Group

	// changed are told of each fetched map that differs from the last,
	// after the clients were asked to reload; registered (whenChanged) by
	// the components built on the topology, while they are built.
	changed []func(*slotmap.Map)

	mu       sync.Mutex
	clusters []*redis.ClusterClient // guarded by mu; the clients to reload
	ordinary *redis.ClusterClient   // guarded by mu; the ordinary one, whose node clients serve every key and fetch the first map for answer

	view        atomic.Pointer[slotmap.Map] // last map fetched, indexed; nil before the first
	fetching    atomic.Bool                 // a fetch is in flight: calls wait for its map
	nextFetch   atomic.Int64                // unix ns before which CLUSTER SLOTS is answered from view
	nextTrigger atomic.Int64                // unix ns before which trigger does not ask again

	fetches  atomic.Uint64 // CLUSTER SLOTS calls sent to a server
	failures atomic.Uint64 // of which failed
	lastDur  atomic.Int64  // duration of the last fetch, ns
}

func newTopology(k *core) *topology { return &topology{k: k} }

// attach registers a cluster client whose slot map trigger reloads.
func (t *topology) attach(cc *redis.ClusterClient, kind clientKind) {
	t.mu.Lock()
	t.clusters = append(t.clusters, cc)
	if kind == clientOrdinary {
		t.ordinary = cc
	}
	t.mu.Unlock()
}

// whenChanged has fn told of every fetched map that differs from the last.
func (t *topology) whenChanged(fn func(*slotmap.Map)) { t.changed = append(t.changed, fn) }

// ordinaryClient returns the ordinary cluster client; nil before it is built.
func (t *topology) ordinaryClient() *redis.ClusterClient {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ordinary
}

// interval is the minimum spacing of real fetches, with jitter so that many
// clients started together do not refresh in lockstep.
func interval() time.Duration { return refreshMinInterval + rand.N(refreshJitter) }

// trigger asks every attached client to reload its slot map, unless a
// fetch happened within the interval. It never blocks: go-redis reloads in the
// background and callers keep the map they have. Many goroutines call it at
// once when a node fails (every fast-failed command does), so the checks are
// atomic loads, and one compare-and-swap picks the single caller that acts.
func (t *topology) trigger() {
	now := t.k.clock.Now().UnixNano()
	if now < t.nextFetch.Load() || t.k.closed.Load() {
		return // a fresh map: the reload would be answered from it anyway
	}
	claim := t.nextTrigger.Load()
	if now < claim || !t.nextTrigger.CompareAndSwap(claim, now+int64(interval())) {
		return // another caller has just asked
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
	t.nextFetch.Store(0)
	t.nextTrigger.Store(0)
	t.trigger()
}

// serve answers a CLUSTER SLOTS that go-redis is about to send through a
// node's guarded hook: from the last map while it is fresh, otherwise with
// one fetch shared by every concurrent caller.
func (t *topology) serve(ctx context.Context, cmd redis.Cmder, send redis.ProcessHook) error {
	sc, ok := cmd.(*redis.ClusterSlotsCmd)
	if !ok {
		return send(ctx, cmd)
	}
	slots, err := t.load(ctx, func(ctx context.Context) ([]redis.ClusterSlot, error) {
		err := send(ctx, sc)
		return sc.Val(), err
	})
	if err == nil {
		sc.SetVal(slots)
	}
	return err
}

// answer answers cmd, a CLUSTER SLOTS go-redis is about to send on a node
// client of a subscription client, without sending it: such a client's
// pools must dial nothing, since its guards take every dial for a
// subscription's. The answer is the map last fetched, however old: a map
// past its interval asks every attached client to reload (trigger), and
// the map that fetches, if it differs, reloads the subscription clients
// too (adopt). Before any map was fetched, the ordinary client's node
// clients fetch one, through their guards.
func (t *topology) answer(ctx context.Context, cmd redis.Cmder) error {
	sc, ok := cmd.(*redis.ClusterSlotsCmd)
	if !ok {
		return errNoSlotMap
	}
	view := t.view.Load()
	switch {
	case view != nil && t.k.clock.Now().UnixNano() >= t.nextFetch.Load():
		t.trigger()
	case view == nil:
		src := t.ordinaryClient()
		if src == nil || t.k.clock.Now().UnixNano() < t.nextFetch.Load() {
			// No client to fetch with, or its fetch has just failed: go-redis
			// asks each node in turn, and each would fetch again.
			return errNoSlotMap
		}
		_, err, _ := t.sf.Do("first", func() (any, error) {
			return nil, src.ForEachShard(ctx, func(context.Context, *redis.Client) error { return nil })
		})
		if err != nil {
			return err
		}
		if view = t.view.Load(); view == nil {
			return errNoSlotMap
		}
	}
	sc.SetVal(view.Slots())
	return nil
}

// errNoSlotMap is answer's error while no node has answered CLUSTER SLOTS.
var errNoSlotMap = errors.New("redisguard: no cluster slot map fetched yet")

// clusterSlots wraps Config.ClusterSlots for go-redis, which calls it in
// place of sending CLUSTER SLOTS: its calls share the cache as those would.
func (t *topology) clusterSlots(fn func(context.Context) ([]redis.ClusterSlot, error)) func(context.Context) ([]redis.ClusterSlot, error) {
	return func(ctx context.Context) ([]redis.ClusterSlot, error) { return t.load(ctx, fn) }
}

// load returns the last map while it is fresh, otherwise what fetch
// returns, fetched once for every concurrent caller.
func (t *topology) load(ctx context.Context, fetch func(context.Context) ([]redis.ClusterSlot, error)) ([]redis.ClusterSlot, error) {
	if cached := t.fresh(); cached != nil {
		return cached, nil
	}
	v, err, _ := t.sf.Do("slots", func() (any, error) {
		start := time.Now()
		t.fetching.Store(true)
		defer func() {
			// The interval runs from the end of the fetch, whatever it
			// found: a failing cluster is not asked again at once either.
			t.nextFetch.Store(t.k.clock.Now().Add(interval()).UnixNano())
			t.fetching.Store(false)
		}()
		t.k.emit(Event{Kind: EventRefreshStarted})
		slots, err := fetch(ctx)
		took := time.Since(start)
		if isGuardError(err) {
			// Breaker open: nothing was sent, so nothing is counted, but
			// the start above still gets its ending; go-redis tries
			// another node.
			t.k.emit(Event{Kind: EventRefreshFailed, Duration: took, Err: err.Error()})
			return nil, err
		}
		t.fetches.Add(1)
		t.lastDur.Store(int64(took))
		if err != nil {
			t.failures.Add(1)
			t.k.emit(Event{Kind: EventRefreshFailed, Duration: took, Err: err.Error()})
			return nil, err
		}
		view := slotmap.New(slots)
		prev := t.view.Swap(view)
		t.k.emit(Event{Kind: EventRefreshFinished, Duration: took}, slog.Int("ranges", len(slots)))
		if prev != nil && !prev.Same(view) {
			t.adopt()
			for _, fn := range t.changed {
				fn(view)
			}
		}
		return slots, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]redis.ClusterSlot), nil
}

// fresh returns the last map if a CLUSTER SLOTS may be answered from it:
// it was fetched within the interval, and no fetch is in flight to replace
// it. Otherwise nil: the call joins the fetch in flight, or makes one.
func (t *topology) fresh() []redis.ClusterSlot {
	cached := t.view.Load()
	if cached == nil || t.fetching.Load() || t.k.clock.Now().UnixNano() >= t.nextFetch.Load() {
		return nil
	}
	return cached.Slots()
}

// adopt has every attached client reload its slot map, which the fresh
// map in the cache answers: a map one client fetched is every client's.
// go-redis reloads in the background; nothing here waits.
func (t *topology) adopt() {
	t.mu.Lock()
	clusters := append([]*redis.ClusterClient(nil), t.clusters...)
	t.mu.Unlock()
	for _, cc := range clusters {
		cc.ReloadState(context.Background())
	}
}

// slotMap returns the last slot map fetched, with its indexes; nil before
// the first, which every look-up of a nil map takes for empty.
func (t *topology) slotMap() *slotmap.Map { return t.view.Load() }
