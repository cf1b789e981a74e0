package redisguard

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/outlier"
	"github.com/redisguard/redisguard/internal/slotmap"
)

// slowNodes marks the nodes that answer far slower than their peers (see
// Config.SlowNodeFactor) and sheds the load a marked node cannot carry. It
// runs no goroutine: latencies are sampled from the ordinary commands, and
// whichever sampled command finds the last evaluation slowEvalEvery old
// evaluates again, on its own goroutine.
type slowNodes struct {
	k   *core
	det *outlier.Detector
	// shards, if set, returns the slot map whose shards group the nodes,
	// so that no two nodes of a shard are marked at once.
	shards func() *slotmap.Map

	nextEval atomic.Int64 // unix ns of the next evaluation
}

// slowEvalEvery is how often the marks are revisited while commands flow.
const slowEvalEvery = 250 * time.Millisecond

// The commands whose latency is measured: one in 64 on a node that looks
// fast, so that the two clock readings cost each command about a
// nanosecond on average; one in four on a node whose latency is above
// SlowNodeFloor among enough peers to be judged, or that is marked, so
// that its mark is decided on enough samples and ends soon after it is
// fast again, and on a node whose latency routes reads (watch).
const (
	sampleFast  = 63
	sampleWatch = 3
)

func newSlowNodes(k *core) *slowNodes {
	if k.cfg.SlowNodeFactor < 0 {
		return nil
	}
	return &slowNodes{k: k, det: outlier.NewDetector(outlier.Settings{
		Factor:      k.cfg.SlowNodeFactor,
		Floor:       k.cfg.SlowNodeFloor,
		MarkAfter:   k.cfg.SlowNodeMarkAfter,
		Ejection:    k.cfg.SlowNodeEjection,
		MaxEjection: 6 * k.cfg.SlowNodeEjection,
	})}
}

// sample reports whether the command about to run on n is timed.
func (s *slowNodes) sample(n *node) bool {
	return s != nil && rand.Uint32()&n.sampleMask.Load() == 0
}

// observe records that cmd, an answered command on n started at start, and
// evaluates the marks when they are due.
func (s *slowNodes) observe(nodes *nodeSet, n *node, cmd redis.Cmder, start time.Time) {
	if classifyCmd(cmd) != classOrdinary {
		return // a blocking command's wait is no latency
	}
	now := s.k.clock.Now()
	if n.maint.overlaps(start, now) {
		return // the maintenance's wait, not the node's latency
	}
	n.lat.Observe(now, now.Sub(start))
	mask := uint32(sampleFast)
	// A node is judged only beside enough peers: alone (Standalone), above
	// the floor it still cannot be marked, and its commands are not timed
	// more often for that.
	judged := nodes.count.Load() > outlier.MinPeers
	if est, _, _, _ := n.lat.Estimate(); (judged && est > s.k.cfg.SlowNodeFloor) || n.slow.Load() || n.watched.Load() {
		mask = sampleWatch
	}
	if n.sampleMask.Load() != mask {
		n.sampleMask.Store(mask)
	}
	due := s.nextEval.Load()
	if now.UnixNano() < due || !s.nextEval.CompareAndSwap(due, now.Add(slowEvalEvery).UnixNano()) {
		return
	}
	s.evaluate(nodes, now)
}

// evaluate revisits every node's mark and applies the changes.
func (s *slowNodes) evaluate(nodes *nodeSet, now time.Time) {
	var shards *slotmap.Map
	if s.shards != nil {
		shards = s.shards()
	}
	all := nodes.all()
	list := make([]outlier.Node, 0, len(all))
	byAddr := make(map[string]*node, len(all))
	for _, n := range all {
		lat := &n.lat
		if _, at, _, _ := lat.Estimate(); n.maint.overlaps(at, now) {
			// Under an announced maintenance, or not measured since one:
			// its estimate predates the maintenance and says nothing of
			// the node now. It is judged again once measured after it.
			lat = nil
		}
		list = append(list, outlier.Node{ID: n.addr, Group: shards.Shard(n.addr), Latency: lat, Out: n.out()})
		byAddr[n.addr] = n
	}
	for _, ch := range s.det.Evaluate(now, list) {
		n := byAddr[ch.ID]
		e := Event{Addr: n.addr, Duration: ch.Latency, PeerLatency: ch.Peers}
		if ch.Marked {
			n.slowLimit.Store(int64(s.limit(ch.Latency, ch.Peers)))
			n.slow.Store(true)
			e.Kind = EventNodeSlow
			s.k.emit(e, slog.Time("until", ch.Until), slog.Int64("max_waiting", n.slowLimit.Load()))
			continue
		}
		n.slow.Store(false)
		// Judge it afresh, from its peers' latency: while marked it saw
		// little traffic, and its old average would keep it slow.
		n.lat.Reset(now, ch.Peers)
		e.Kind, e.Decision = EventNodeSlowEnded, ch.Reason
		s.k.emit(e)
	}
}

// limit is how many callers may wait on a node marked slow at once: the
// share of MaxConnections that would be busy if the node were only
// SlowNodeFactor times slower than its peers, between one and a quarter of
// MaxConnections.
func (s *slowNodes) limit(lat, peers time.Duration) int {
	most := max(1, s.k.cfg.MaxConnections/4)
	if lat <= 0 || peers <= 0 {
		return most
	}
	n := math.Ceil(float64(s.k.cfg.MaxConnections) * s.k.cfg.SlowNodeFactor * float64(peers) / float64(lat))
	return int(min(max(n, 1), float64(most)))
}

// admit decides whether a command may wait on n, which is marked slow, and
// counts it among those waiting if so; the caller ends the count with
// n.slowWaiting.Add(-1). Under an announced maintenance every command may.
// It is off the hot path: only marked nodes get here.
func (s *slowNodes) admit(ctx context.Context, n *node) error {
	waiting := n.slowWaiting.Add(1)
	if n.maint.active(s.k.clock.Now()) {
		// An announced maintenance: go-redis has relaxed the node's
		// timeouts for waits it expects, and they are the maintenance's,
		// not the node's. Every command waits, as with go-redis alone.
		return nil
	}
	if waiting > n.slowLimit.Load() {
		n.slowWaiting.Add(-1)
		return n.slowRefused
	}
	if dl, ok := ctx.Deadline(); ok {
		if est, _, _, ok := n.lat.Estimate(); ok && dl.Sub(s.k.clock.Now()) < est {
			n.slowWaiting.Add(-1)
			return n.slowRefused
		}
	}
	return nil
}

// watch has n's latency measured at the higher rate from now on.
func watch(n *node) {
	if !n.watched.Load() {
		n.watched.Store(true)
		n.sampleMask.Store(sampleWatch)
	}
}
