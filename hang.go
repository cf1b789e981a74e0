package redisguard

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redisguard/redisguard/internal/background"
	"github.com/redisguard/redisguard/internal/clock"
)

// hangWatch recognises a hung node from its silence rather than from
// ReadTimeout: a node that has been sent something on one of its
// connections and has sent nothing back, on any of them, for its silence
// bound (Config.HungNodeAfter, more for a node whose latency is high) is
// hung, and trip opens its breaker.
//
// What the watch listens to is the node's connections (connSet.listen),
// not the callers: a command that waits for a connection, or whose caller
// gives up before it is written, was never put to the node, and a reply
// that arrives after its caller gave up was still sent. So a caller whose
// 200ms deadline ends on a hung node counts through the node's silence,
// and callers whose 1ms deadlines keep ending on a healthy node count for
// nothing: the silence must include a connection the node kept waiting for
// two ticks (hangKeptListens), which callers that give up sooner never
// leave. A timeout counts as it always did.
//
// The client's own stalls must not look like a node's: a pause of the whole
// process (a long GC, a starved container) shows as a tick of the watch that
// comes late, after which every node is judged afresh; and where several
// nodes wait for replies and none of the others has answered lately, the
// client is taken to be the one not hearing, and nothing is tripped.
//
// A command pays for it with two stores on its connection's own cache line,
// and one load of running when it is written. The watch runs one goroutine
// while any connection waits for a reply, waking every hangTick, and stops
// once none has for hangIdleStop; the next command written starts it again
// (wake).
type hangWatch struct {
	clock clock.Clock
	floor time.Duration // Config.HungNodeAfter
	nodes func() []*node
	// trip opens n's breaker, which has heard nothing from it for silent.
	trip func(n *node, silent time.Duration)

	running atomic.Bool      // a watch goroutine runs, or is about to
	bg      background.Group // the watch goroutine; closed by close

	// Touched only by the goroutine that judges.
	last  time.Time              // the previous judgement; zero before the first of a run
	quiet map[*node]*nodeSilence // what each node was last heard to say
}

// nodeSilence is what the watch last heard from a node.
type nodeSilence struct {
	since time.Time // when it last answered, or last had nothing to answer
	heard time.Time // when it last answered
	// quietFrom is the first judgement of the run of judgements that have
	// found it asked and not answering; zero while it answers, or is asked
	// nothing. Late ticks do not restart it (see node.silent).
	quietFrom time.Time
	// kept: since since, one of its connections was kept waiting for a
	// reply (connSet.listen). Silence made only of waits that their callers
	// cut shorter than that is a caller's impatience, not the node's: on a
	// loaded node every reply may come after its caller gave up.
	kept bool
}

const (
	// hangTick is how often the watch judges while work is outstanding.
	hangTick = 25 * time.Millisecond
	// hangLate is how late a tick may come before the watch takes the
	// client itself to have stalled, and judges every node afresh.
	hangLate = 4 * hangTick
	// hangIdleStop is how long every node must have had nothing
	// outstanding before the watch goroutine ends.
	hangIdleStop = time.Second
	// hangHeard is how recent an answer from another node must be for the
	// client to be taken to hear its nodes while one of them is silent.
	hangHeard = 4 * hangTick
	// hangFactor times a node's latency (its own or its peers', the
	// larger) is its silence bound where that is more than the floor.
	hangFactor = 8
	// hangKeptListens is how many judgements in a row must find one
	// connection waiting, with nothing read, for the node to have kept it
	// waiting: two ticks (50ms) at least. A node whose callers all give up
	// sooner is never judged silent; their timeouts decide, as before.
	hangKeptListens = 3
)

func newHangWatch(clk clock.Clock, floor time.Duration, nodes func() []*node, trip func(*node, time.Duration)) *hangWatch {
	return &hangWatch{clock: clk, floor: floor, nodes: nodes, trip: trip, quiet: make(map[*node]*nodeSilence)}
}

// wake makes sure the watch runs: a connection has just been asked
// something. It costs one atomic load while the watch runs.
func (w *hangWatch) wake() {
	if w.running.Load() || !w.running.CompareAndSwap(false, true) {
		return
	}
	if !w.bg.Go(w.run) {
		w.running.Store(false)
	}
}

// close stops the watch and waits for it.
func (w *hangWatch) close() { w.bg.Close() }

func (w *hangWatch) run(ctx context.Context) {
	t := time.NewTicker(hangTick)
	defer t.Stop()
	w.last = time.Time{}
	var idleSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := w.clock.Now()
		if w.judge(now) {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = now
		}
		if now.Sub(idleSince) < hangIdleStop {
			continue
		}
		// Nothing outstanding for a while. A command that found its node
		// idle after the store below starts a new watch; one that found
		// it idle before is seen by busy, and this watch goes on.
		w.running.Store(false)
		if !w.busy() || !w.running.CompareAndSwap(false, true) {
			return
		}
		idleSince = time.Time{}
	}
}

// busy reports whether any connection waits for a reply.
func (w *hangWatch) busy() bool {
	return slices.ContainsFunc(w.nodes(), func(n *node) bool { return n.conns.waiting() })
}

// judge looks at every node at now, trips the hung ones, and reports
// whether any connection waited for a reply.
func (w *hangWatch) judge(now time.Time) (busy bool) {
	// The first tick of a run has nothing to compare with, and a late one
	// may have missed answers that came while the client was stalled.
	fresh := w.last.IsZero() || now.Sub(w.last) > hangLate
	w.last = now
	nodes := w.nodes()
	type suspect struct {
		n      *node
		silent time.Duration
	}
	var suspects []suspect
	waiting := 0
	for _, n := range nodes {
		s := w.quiet[n]
		if s == nil {
			s = &nodeSilence{since: now}
			w.quiet[n] = s
		}
		heard, asked, kept := n.conns.listen()
		if heard {
			s.heard = now
		}
		busy = busy || asked
		// Silent now: something has been waiting for its answer at every
		// judgement for half the floor, and it answered nothing. A late
		// tick does not restart that count: the client stalled, and the
		// node did not answer meanwhile either.
		if heard || !asked {
			s.quietFrom = time.Time{}
			n.setSilent(false)
		} else if s.quietFrom.IsZero() {
			s.quietFrom = now
		} else if now.Sub(s.quietFrom) >= w.floor/2 {
			n.setSilent(true)
		}
		if !asked || heard || fresh || n.resolving.Load() > 0 || n.maint.active(now) {
			// A Sentinel dial spends its first wait on the sentinels,
			// which is not the master's silence; a node under an
			// announced maintenance may stay silent for the relaxed
			// timeout, and its silence counts from the window's end.
			s.since, s.kept = now, false
			continue
		}
		waiting++
		s.kept = s.kept || kept
		if silent := now.Sub(s.since); s.kept && silent >= w.floor && silent >= w.bound(n, nodes) {
			if n.conns.answeredUnread() {
				// The node answered; the client has not read it yet (its
				// readers were not scheduled, on a starved machine).
				s.since, s.kept = now, false
				continue
			}
			suspects = append(suspects, suspect{n, silent})
		}
	}
	if len(suspects) == 0 {
		return busy
	}
	if waiting > 1 && !w.heard(now, nodes, suspects[0].n) {
		// Several nodes wait to answer and none of the others has answered
		// lately either: it is more likely this client that hears nothing
		// (or the network it shares with all of them), and the timeouts
		// decide.
		return busy
	}
	for _, s := range suspects {
		w.trip(s.n, s.silent)
		// Its breaker is open and its connections cut: what comes next
		// is a new silence, if any.
		w.quiet[s.n].since, w.quiet[s.n].kept = now, false
	}
	return busy
}

// heard reports whether a node other than the suspects answered within
// hangHeard of now. Suspects are silent for their bound at least, and
// suspect is one of them.
func (w *hangWatch) heard(now time.Time, nodes []*node, suspect *node) bool {
	for _, n := range nodes {
		if s := w.quiet[n]; n != suspect && s != nil && !s.heard.IsZero() && now.Sub(s.heard) < hangHeard {
			return true
		}
	}
	return false
}

// bound is how long n may stay silent with work outstanding: the floor, or
// hangFactor times its latency or its peers' median, whichever is larger,
// so that a node whose every command takes 100ms is not judged on a
// node's that answers in 1ms.
func (w *hangWatch) bound(n *node, nodes []*node) time.Duration {
	lat, _, _, _ := n.lat.Estimate()
	var peers []time.Duration
	for _, p := range nodes {
		if d, _, _, ok := p.lat.Estimate(); ok && p != n {
			peers = append(peers, d)
		}
	}
	if len(peers) > 0 {
		slices.Sort(peers)
		lat = max(lat, peers[len(peers)/2])
	}
	return max(w.floor, hangFactor*lat)
}
