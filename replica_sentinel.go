package redisguard

import (
	"context"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/redisguard/redisguard/internal/background"
	"github.com/redisguard/redisguard/internal/breaker"
)

// sentinelReplicasEvery is the least spacing of SENTINEL REPLICAS questions.
const sentinelReplicasEvery = time.Second

// sentinelReplicas knows the replicas of a Sentinel-managed master, asking
// the sentinels (SENTINEL REPLICAS) only while reads want a replica and at
// most once per sentinelReplicasEvery, and builds a client for each, with
// the replica's own node guard. The first look-up is waited for; later ones
// run in the background, in a goroutine owned and stopped by close.
type sentinelReplicas struct {
	k     *core
	nodes *nodeSet
	sm    *sentinelMaster
	// newClient builds the client of the replica at addr, with its node
	// guard; register records it, for the reads to go to.
	newClient func(addr string) *redis.Client
	register  func(addr string, cl *redis.Client)

	bg background.Group // the background look-ups; closed by close

	first singleflight.Group // the look-up the reads wait for, until the sentinels have answered once

	list  atomic.Pointer[[]*node] // the last answer's usable replicas; nil before one
	asked atomic.Int64            // unix ns (client clock) when the last look-up started

	mu      sync.Mutex
	clients map[string]*redis.Client // guarded by mu; one per replica seen
	closed  bool                     // guarded by mu; no client is built once set
}

func newSentinelReplicas(k *core, nodes *nodeSet, sm *sentinelMaster, newClient func(string) *redis.Client,
	register func(string, *redis.Client)) *sentinelReplicas {
	return &sentinelReplicas{k: k, nodes: nodes, sm: sm, newClient: newClient, register: register,
		clients: make(map[string]*redis.Client)}
}

// of returns the replicas of the master (which master does not matter: the
// sentinels name the replicas of the role).
func (s *sentinelReplicas) of(ctx context.Context, _ *node) []*node {
	if l := s.list.Load(); l != nil {
		now := s.k.clock.Now().UnixNano()
		if asked := s.asked.Load(); now-asked >= int64(sentinelReplicasEvery) && s.asked.CompareAndSwap(asked, now) {
			s.refresh()
		}
		return *l
	}
	// Until the sentinels have answered once, reads wait for the look-up,
	// and those that come while it runs share its answer.
	v, _, _ := s.first.Do("", func() (any, error) {
		if l := s.list.Load(); l != nil {
			return *l, nil
		}
		now := s.k.clock.Now().UnixNano()
		if asked := s.asked.Load(); asked != 0 && now-asked < int64(sentinelReplicasEvery) {
			return nil, nil // asked less than a second ago, and no sentinel answered
		}
		s.asked.Store(now)
		s.lookup(ctx)
		if l := s.list.Load(); l != nil {
			return *l, nil
		}
		return nil, nil
	})
	l, _ := v.([]*node)
	return l
}

// refresh runs a look-up in the background.
func (s *sentinelReplicas) refresh() { s.bg.Go(s.lookup) }

// lookup asks the sentinels, one after the other until one answers, for the
// replicas, and keeps those they do not consider down.
func (s *sentinelReplicas) lookup(ctx context.Context) {
	for _, addr := range s.sm.sentinelAddrs() {
		qctx, cancel := mergeCancel(ctx, s.bg.Context())
		qctx, cancelQ := context.WithTimeout(qctx, sentinelQueryTimeout)
		sc := newGoRedis(clientSpec{kind: clientSentinelQuestion, base: s.sm.sentinel, addr: addr, wait: sentinelQueryTimeout}).(*redis.SentinelClient)
		replicas, err := sc.Replicas(qctx, s.sm.name).Result()
		_ = sc.Close()
		cancelQ()
		cancel()
		if err != nil {
			continue
		}
		s.use(replicas)
		return
	}
}

// use keeps the replicas of a SENTINEL REPLICAS answer that no sentinel
// flags down or disconnected, building a client for each new one.
func (s *sentinelReplicas) use(replicas []map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	var list []*node
	for _, r := range replicas {
		flags := r["flags"]
		if strings.Contains(flags, "s_down") || strings.Contains(flags, "o_down") || strings.Contains(flags, "disconnected") ||
			r["ip"] == "" || r["port"] == "" {
			continue
		}
		addr := net.JoinHostPort(r["ip"], r["port"])
		if _, ok := s.clients[addr]; !ok {
			cl := s.newClient(addr)
			s.clients[addr] = cl
			s.register(addr, cl)
		}
		list = append(list, s.nodes.get(addr))
	}
	s.list.Store(&list)
}

// close stops the look-up in flight and closes the replicas' clients.
func (s *sentinelReplicas) close() {
	s.bg.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true // a look-up on a caller's goroutine may still answer
	for _, cl := range s.clients {
		_ = cl.Close()
	}
}

// sentinelReadHook is installed on the Sentinel client, outside the master's
// node guard: with ReadFromReplicaPreferred and ReadFromAny it sends reads
// to a replica as they say (go-redis's failover client has no such routing
// of its own), and in every mode it applies replicas.process to the current
// master.
type sentinelReadHook struct {
	r  *replicas
	sm *sentinelMaster
}

func (h sentinelReadHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h sentinelReadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	r := h.r
	routed := r.k.cfg.ReadFrom != ReadFromMasterPreferred
	return func(ctx context.Context, cmd redis.Cmder) error {
		master := h.sm.node()
		if routed && !own(ctx, cmd) && classifyCmd(cmd) == classOrdinary {
			if rep, cl := r.pick(ctx, master); cl != nil && r.isRead(ctx, cmd, cl) {
				rep.replicaReads.Add(1)
				return r.translated(ctx, cl.Process(ctx, cmd))
			}
		}
		return r.translated(ctx, r.process(ctx, cmd, master, nil, next))
	}
}

func (h sentinelReadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	r := h.r
	routed := r.k.cfg.ReadFrom != ReadFromMasterPreferred
	return func(ctx context.Context, cmds []redis.Cmder) error {
		master := h.sm.node()
		if routed && len(cmds) > 0 && !own(ctx, cmds[0]) && !batchIsBlocking(cmds) {
			if rep, cl := r.pick(ctx, master); cl != nil && r.allReads(ctx, cmds, cl) {
				rep.replicaReads.Add(uint64(len(cmds)))
				return r.translatedBatch(ctx, cmds, pipelineOn(ctx, cl, cmds))
			}
		}
		return r.translatedBatch(ctx, cmds, r.processBatch(ctx, cmds, master, nil, next))
	}
}

// pick chooses where a read for master goes in Sentinel mode: a usable
// replica with ReadFromReplicaPreferred; with ReadFromAny the master or a
// replica at random, the master when the replica drawn is not usable; with
// ReadFromNearest the usable node with the lowest sampled latency, or one
// in nearestExplore a random one (as ReadFromAny), so that the others keep
// being sampled. nil means the master.
func (r *replicas) pick(ctx context.Context, master *node) (*node, *redis.Client) {
	if r.k.cfg.ReadFrom == ReadFromNearest && rand.N(nearestExplore) != 0 {
		return r.nearest(ctx, master)
	}
	if r.k.cfg.ReadFrom == ReadFromAny || r.k.cfg.ReadFrom == ReadFromNearest {
		reps := r.members(ctx, master)
		i := rand.N(len(reps) + 1)
		if i == len(reps) {
			return nil, nil
		}
		rep := reps[i]
		if cl := r.client(rep.addr); cl != nil && r.usable(ctx, rep) {
			return rep, cl
		}
		return nil, nil
	}
	return r.standIn(ctx, master)
}

// nearestExplore: one read in this many goes to a random usable node under
// ReadFromNearest, so that a node that was slow once is measured again.
const nearestExplore = 16

// nearest returns the usable replica of master with the lowest sampled
// latency, if it is lower than master's; nil means the master. A node not
// measured yet counts as fastest, so that it is measured.
func (r *replicas) nearest(ctx context.Context, master *node) (*node, *redis.Client) {
	latency := func(n *node) time.Duration {
		d, _, _, ok := n.lat.Estimate()
		if !ok {
			return 0
		}
		return d
	}
	var best *node
	var bestCl *redis.Client
	watch(master)
	bestLat := latency(master)
	if master.br.State() == breaker.Open || master.slow.Load() {
		bestLat = time.Duration(math.MaxInt64)
	}
	for _, rep := range r.members(ctx, master) {
		watch(rep)
		if l := latency(rep); l < bestLat {
			if cl := r.client(rep.addr); cl != nil && r.usable(ctx, rep) {
				best, bestCl, bestLat = rep, cl, l
			}
		}
	}
	return best, bestCl
}

// translated is err as the caller gets it: what a replica answered passes
// no facade of its own.
func (r *replicas) translated(ctx context.Context, err error) error {
	if err == nil || err == redis.Nil || r.translate == nil {
		return err
	}
	return r.translate(ctx, err)
}

// translatedBatch is translated for a batch and each of its commands.
func (r *replicas) translatedBatch(ctx context.Context, cmds []redis.Cmder, err error) error {
	if batchAnswered(err) || r.translate == nil {
		return err
	}
	return translateBatch(ctx, cmds, err, r.translate)
}
