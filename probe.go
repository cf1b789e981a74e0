package redisguard

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/background"
	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
)

// probeIdleAfter is how long a node's breaker may stay open with no command
// asking for the node before its prober stops, unless the client's
// topology still names the node (nodeSet.wanted). A node that went away
// for good (a replaced pod, a removed cluster member) is not probed for
// ever; the next command that meets its open breaker, or the next slot map
// that names it again, starts probing again. A node the client still knows
// is probed until it answers, however long nobody sends to it: an idle
// client finds its node back without a command paying for it.
const probeIdleAfter = time.Minute

// prober finds out when a node whose breaker is open answers again, and
// recovers its breaker then. It probes on connections of its own, so a probe
// never spends a caller's request, deadline or pooled connection.
//
// It runs one goroutine per open node, none for the others, plus one per
// probe in flight (at most maxProbesInFlight a node); the delays between
// probes come from the node's breaker.Schedule.
type prober struct {
	// probe dials addr afresh, with the node's own handshake, and sends
	// PING, waiting at most wait for each step.
	probe       func(ctx context.Context, addr string, wait time.Duration) error
	clock       clock.Clock
	readTimeout time.Duration
	// failed reports a probe that failed; it runs on the prober's goroutine.
	failed func(n *node, err error)
	// wanted reports whether n, whose breaker is open, is still worth
	// probing at now.
	wanted func(n *node, now time.Time) bool

	bg background.Group // the probing goroutines; closed by close
}

func newProber(probe func(context.Context, string, time.Duration) error, clk clock.Clock, readTimeout time.Duration,
	failed func(*node, error), wanted func(*node, time.Time) bool) *prober {
	return &prober{probe: probe, clock: clk, readTimeout: readTimeout, failed: failed, wanted: wanted}
}

// start probes n, first after delay, unless n is probed already.
func (p *prober) start(n *node, delay time.Duration) {
	if !n.probing.CompareAndSwap(false, true) {
		return
	}
	if !p.bg.Go(func(ctx context.Context) { p.run(ctx, n, delay) }) {
		n.probing.Store(false)
	}
}

// close stops every prober and waits for them.
func (p *prober) close() { p.bg.Close() }

func (p *prober) run(ctx context.Context, n *node, delay time.Duration) {
	for {
		p.probeUntilRecovered(ctx, n, delay)
		n.probing.Store(false)
		// A reopening that happened while this goroutine was on its way out
		// found probing set and left the node to it: take it back.
		if n.br.State() != breaker.Open || ctx.Err() != nil || !p.wanted(n, p.clock.Now()) ||
			!n.probing.CompareAndSwap(false, true) {
			return
		}
		delay = n.sched.Next(p.clock.Now(), false)
	}
}

// maxProbesInFlight bounds the probes of one node waiting at once.
const maxProbesInFlight = 2

// probeUntilRecovered sends a probe every delay, as the node's schedule
// says, until one is answered or the breaker is no longer open. Each probe
// waits for its answer up to two delays (at least ReadTimeout), so one is
// always waiting on a server that accepts connections but does not answer:
// a paused server answers it the moment it resumes. A fresh one every delay
// finds a server behind a network that lost the earlier probes' packets.
func (p *prober) probeUntilRecovered(ctx context.Context, n *node, delay time.Duration) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	results := make(chan error, maxProbesInFlight)
	inFlight := 0
	again := true    // one probe between ticks may follow a dropped connection
	refused := false // the last probe found nothing listening
	launch := func() {
		if inFlight == maxProbesInFlight {
			return
		}
		wait := max(p.readTimeout, 2*delay)
		if p.bg.Go(func(ctx context.Context) { results <- p.probe(ctx, n.addr, wait) }) {
			inFlight++
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-results:
			inFlight--
			if ctx.Err() != nil {
				return
			}
			n.probes.Add(1)
			if answered(err) {
				if n.br.Recover() {
					p.confirm(ctx, n)
				}
				return
			}
			n.probeFailures.Add(1)
			p.failed(n, err)
			refused = errors.Is(err, syscall.ECONNREFUSED)
			if isConnReset(err) && again {
				// The connection the probe was waiting on was dropped:
				// something changed (a restart, a network path back up).
				// Look again at once rather than at the next tick, but
				// only once: a node that drops every connection would
				// otherwise be probed in a loop.
				again = false
				launch()
			}
		case <-timer.C:
			if n.br.State() != breaker.Open || !p.wanted(n, p.clock.Now()) {
				return
			}
			launch()
			again = true
			delay = n.sched.Next(p.clock.Now(), refused)
			timer.Reset(delay)
		}
	}
}

// confirmAfter is how long a breaker a probe moved to half-open waits for a
// command to close it before the prober closes it with a second probe.
const confirmAfter = 200 * time.Millisecond

// confirm settles n's breaker, half-open after an answered probe, when no
// command comes to do it: a node nobody sends to would otherwise stay
// half-open for ever, and its outage, told when the breaker closes, would
// last until the next command. A second answered probe closes it; a failed
// one opens it again, as a failed command would.
func (p *prober) confirm(ctx context.Context, n *node) {
	t := time.NewTimer(confirmAfter)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	if n.br.State() != breaker.HalfOpen {
		return // a command closed it, or failed and opened it again
	}
	err := p.probe(ctx, n.addr, p.readTimeout)
	if ctx.Err() != nil {
		return
	}
	n.probes.Add(1)
	if answered(err) {
		n.br.Confirm()
		return
	}
	n.probeFailures.Add(1)
	p.failed(n, err)
	n.br.Trip()
}

// answered reports whether a probe's result says the node serves again: it
// replied, unless the reply is LOADING (the server is up but still reading
// its data set, and would answer every command with that error).
func answered(err error) bool {
	return err == nil || (isRedisReply(err) && !redis.IsLoadingError(err))
}

// probeAddr sends args to addr on a connection of its own, made with base's
// handshake (credentials, TLS, protocol, database, client name), and returns
// the reply. Every step waits at most wait; nothing is retried.
func probeAddr(ctx context.Context, base *redis.Options, addr string, wait time.Duration, args ...any) (*redis.Cmd, error) {
	cmd := redis.NewCmd(ctx, args...)
	probeConn(ctx, base, addr, wait, func(cl *redis.Client) { _ = cl.Process(ctx, cmd) })
	return cmd, cmd.Err()
}

// probeConn is probeAddr for a caller that sends several commands, in turn,
// with do, on one client of one pooled connection: a second command reuses
// the connection the first one set up.
func probeConn(ctx context.Context, base *redis.Options, addr string, wait time.Duration, do func(cl *redis.Client)) {
	cl := newGoRedis(clientSpec{kind: clientProbe, base: base, addr: addr, wait: wait}).(*redis.Client)
	defer cl.Close()
	// go-redis turns a context's deadline into the socket's, but not its
	// cancellation: closing the client is what ends a read in flight when
	// Close cancels a probe.
	defer context.AfterFunc(ctx, func() { _ = cl.Close() })()
	do(cl)
}
