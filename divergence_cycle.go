package redisguard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/flight"
)

// This file is the mechanism behind divergence.go's policy: a hook that
// catches commands ending in a redirect, the loop that gathers views (see
// divergence_views.go), decides, and backs off and retries or raises, and
// the per-slot state that the commands on one slot share.

// forceEvery spaces the forced slot-map refreshes that waiting commands ask
// for; in between they only trigger the rate-limited one.
const forceEvery = 100 * time.Millisecond

// divergenceHook is installed on the cluster client just inside the facade,
// so it sees each command's final error from go-redis's redirect loop, and
// next is that loop: a retry spends a fresh redirect budget.
type divergenceHook struct{ d *divergence }

func (h divergenceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook ends what go-redis's pipeline loop leaves redirected.
// That loop follows MOVED and ASK per command up to MaxRedirects, then hands
// a command still redirected to the caller as a raw reply. A batch cannot be
// retried command by command without breaking its order, or a transaction's
// atomicity, so such a command ends as ErrSlotMapCorruption and the map is
// refreshed at once: it sent the command to the wrong node.
func (h divergenceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	d := h.d
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil || err == redis.Nil {
			return err
		}
		return d.endPipelineRedirects(cmds, err)
	}
}

// endPipelineRedirects replaces each redirect left in cmds with
// ErrSlotMapCorruption, forcing one refresh, and returns err, or the first
// command's new error if err was a redirect itself.
func (d *divergence) endPipelineRedirects(cmds []redis.Cmder, err error) error {
	if d.k.cfg.MaxRedirects == NoRedirects {
		return err // the caller asked for the redirects themselves
	}
	var first error
	for _, cmd := range cmds {
		slot, _, ok := redirectOf(cmd.Err())
		if !ok {
			continue
		}
		cerr := fmt.Errorf("%w: slot %d: still redirected after %d redirects in a pipeline (%v); slot map refresh forced",
			ErrSlotMapCorruption, slot, d.k.cfg.MaxRedirects, cmd.Err())
		cmd.SetErr(cerr)
		if first == nil {
			first = cerr
			d.corruptions.Add(1)
			d.topo.force()
			d.report(slot, decision{verdict: corruption}, nil, cerr)
		}
	}
	if _, _, ok := redirectOf(err); ok && first != nil {
		return first
	}
	return err
}

func (h divergenceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	d := h.d
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil || err == redis.Nil {
			return err
		}
		return d.resolveRedirect(ctx, cmd, err, next)
	}
}

// resolveRedirect is the hook's body: given a command's final error, it
// returns err itself unless err is a redirect left over in Cluster mode, in
// which case it decides as described at the top of divergence.go. The healthy
// path (nil, redis.Nil) allocates nothing.
func (d *divergence) resolveRedirect(ctx context.Context, cmd redis.Cmder, err error, next redis.ProcessHook) error {
	if d.topo == nil || err == nil || err == redis.Nil || d.k.cfg.MaxRedirects == NoRedirects {
		return err
	}
	slot, target, ok := redirectOf(err)
	if !ok {
		return err
	}
	return d.resolve(ctx, cmd, slot, target, next)
}

// resolve gathers views, decides, and either raises or backs off and retries
// the command, until the command is answered or a raise. Every raise comes
// within ClusterNodeTimeout plus one ReadTimeout of the call, in wall time
// whatever the injected clock says; a ctx that ends first wins.
func (d *divergence) resolve(ctx context.Context, cmd redis.Cmder, slot int, target string, next redis.ProcessHook) error {
	c := d.k
	nodeTimeout := c.cfg.ClusterNodeTimeout
	hardStop := time.Now().Add(nodeTimeout + c.cfg.ReadTimeout)
	for {
		first := d.observe(slot, c.clock.Now(), nodeTimeout)
		views, err := d.views(ctx, slot, func(ctx context.Context) []slotView {
			return d.gatherViews(ctx, slot, target)
		})
		if err != nil {
			return err
		}
		dec := decide(views, first, c.clock.Now(), nodeTimeout)
		if dec.verdict == converging && time.Until(hardStop) <= 0 {
			return d.raise(slot, dec.expire(), views)
		}
		if dec.verdict != converging {
			return d.raise(slot, dec, views)
		}
		d.waits.Add(1)
		d.report(slot, dec, views, nil)
		if err := sleep(ctx, min(dec.backoff, time.Until(hardStop))); err != nil {
			return err
		}
		d.refresh()
		rctx, cancel := context.WithDeadline(ctx, hardStop)
		err = next(rctx, cmd)
		cut := rctx.Err() != nil
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if s, t, ok := redirectOf(err); ok {
			slot, target = s, t
			continue
		}
		if cut {
			// Our own bound cut the retry short, not the caller's.
			dec.elapsed = max(c.clock.Now().Sub(first), 0)
			return d.raise(slot, dec.expire(), views)
		}
		if err == nil || err == redis.Nil || isRedisReply(err) {
			d.recovered.Add(1)
			d.end(slot)
		}
		return err
	}
}

// raise ends a command with dec's error, counting and reporting it. A
// corrupt map is refreshed at once, past the rate limit: it is known wrong.
func (d *divergence) raise(slot int, dec decision, views []slotView) error {
	if dec.verdict == corruption {
		d.corruptions.Add(1)
		d.end(slot)
		d.topo.force()
	} else {
		d.failovers.Add(1)
	}
	err := dec.err(slot, d.k.cfg.ClusterNodeTimeout)
	d.report(slot, dec, views, err)
	return err
}

// divergence decides what a command that ends in a redirect cycle gets
// (Cluster mode), and holds the per-slot state that commands on one slot
// share. Maps are created on first use.
type divergence struct {
	k     *core
	topo  *topology      // the slot map it reads and refreshes; nil outside Cluster mode
	nodes *nodeSet       // whose breakers say which nodes are worth asking
	probe *redis.Options // handshake for a one-off PING to a node the client has no client for

	mu       sync.Mutex
	episodes map[int]*episode // guarded by mu; by slot

	gathers flight.Group[int, gathered] // the view gather in flight, by slot

	lastForce atomic.Int64 // unix ns of the last forced refresh
	nodesAsk  denial       // CLUSTER NODES, which the views are asked with (permission.go)

	waits, recovered, failovers, corruptions atomic.Uint64
}

// episode is one run of cycles on a slot. Commands on the slot share it, so a
// slot that stays contested fails new commands fast instead of making each
// wait ClusterNodeTimeout again.
type episode struct {
	first, last time.Time
}

// gathered is what a gather that concurrent commands on the same slot
// share found.
type gathered struct {
	views []slotView // read-only
	cut   bool       // the leader's context ended mid-gather: views are partial
}

// observe records a cycle on slot at now and returns when its episode began.
// An episode nobody has touched for window is over; the next cycle starts a
// new one.
func (d *divergence) observe(slot int, now time.Time, window time.Duration) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.episodes == nil {
		d.episodes = make(map[int]*episode)
	}
	for s, e := range d.episodes { // error path only, and rarely more than a few
		if now.Sub(e.last) > window {
			delete(d.episodes, s)
		}
	}
	e := d.episodes[slot]
	if e == nil {
		e = &episode{first: now}
		d.episodes[slot] = e
	}
	e.last = now
	return e.first
}

// end closes slot's episode: it was served again, or its views agree.
func (d *divergence) end(slot int) {
	d.mu.Lock()
	delete(d.episodes, slot)
	d.mu.Unlock()
}

// views returns the views of slot, gathering them or sharing a gather
// already in flight for it. It returns ctx's error, unchanged, when ctx ends
// first; a follower whose leader gave up gathers again itself.
func (d *divergence) views(ctx context.Context, slot int, gather func(context.Context) []slotView) ([]slotView, error) {
	for {
		f, leader := d.gathers.Join(slot)
		if leader {
			views := gather(ctx)
			err := ctx.Err()
			d.gathers.End(slot, f, gathered{views: views, cut: err != nil})
			if err != nil {
				return nil, err
			}
			return views, nil
		}
		select {
		case <-f.Done():
			if g := f.Val(); !g.cut {
				return g.views, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// refresh asks for a new slot map. The first waiter in forceEvery forces one
// past the rate limit (the map may be the problem); the rest only trigger.
func (d *divergence) refresh() {
	now := d.k.clock.Now().UnixNano()
	last := d.lastForce.Load()
	if now-last >= int64(forceEvery) && d.lastForce.CompareAndSwap(last, now) {
		d.topo.force()
		return
	}
	d.topo.trigger()
}

// sleep waits d or until ctx ends, and then returns ctx's error unchanged.
func sleep(ctx context.Context, d time.Duration) error {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return ctx.Err()
}

// report logs and delivers one decision (EventDivergence) with the views it
// was based on; err is what the command fails with, if it does.
func (d *divergence) report(slot int, dec decision, views []slotView, err error) {
	e := Event{Kind: EventDivergence, Slot: slot, Decision: dec.verdict.String(), Duration: dec.elapsed}
	for _, cl := range dec.claimants {
		if cl.id != "" {
			e.Addr = cl.addr // the highest configEpoch: the one that should win
			break
		}
	}
	if err != nil {
		e.Err = err.Error()
	}
	d.k.emit(e,
		slog.Duration("backoff", dec.backoff),
		slog.String("views", fmtViews(views)),
		slog.String("claimants", fmtClaimants(dec.claimants)))
}

// stats returns the decision counters for Client.Stats.
func (d *divergence) stats() DivergenceStats {
	return DivergenceStats{
		Converging:        d.waits.Load(),
		Recovered:         d.recovered.Load(),
		Failover:          d.failovers.Load(),
		SlotMapCorruption: d.corruptions.Load(),
	}
}
