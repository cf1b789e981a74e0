package redisguard

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
)

// probeIdleAfter is how long a node's breaker may stay open with no command
// asking for the node before its prober stops. A node that went away for
// good (a replaced pod, a removed cluster member) is not probed for ever;
// the next command that meets its open breaker starts probing again.
const probeIdleAfter = time.Minute

// prober finds out when a node whose breaker is open answers again, and
// recovers its breaker then. It probes on connections of its own, so a probe
// never spends a caller's request, deadline or pooled connection.
//
// It runs one goroutine per open node, none for the others; the delays
// between probes come from the node's breaker.Schedule. A probe that
// connects but gets no answer waits for one as long as the next probe would
// be delayed anyway (at least ReadTimeout): a paused server answers the PING
// waiting in its socket the moment it resumes, so a patient probe finds it
// sooner than a train of short ones, and costs the server fewer connections.
type prober struct {
	// probe dials addr afresh, with the node's own handshake, and sends
	// PING, waiting at most wait for each step.
	probe       func(ctx context.Context, addr string, wait time.Duration) error
	clock       clock.Clock
	readTimeout time.Duration
	// failed reports a probe that failed; it runs on the prober's goroutine.
	failed func(n *node, err error)

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool // guarded by mu; no goroutine starts once set
}

func newProber(probe func(context.Context, string, time.Duration) error, clk clock.Clock, readTimeout time.Duration, failed func(*node, error)) *prober {
	ctx, cancel := context.WithCancel(context.Background())
	return &prober{probe: probe, clock: clk, readTimeout: readTimeout, failed: failed, ctx: ctx, cancel: cancel}
}

// start probes n, first after delay, unless n is probed already.
func (p *prober) start(n *node, delay time.Duration) {
	if !n.probing.CompareAndSwap(false, true) {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		n.probing.Store(false)
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.run(n, delay)
}

// close stops every prober and waits for them.
func (p *prober) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

func (p *prober) run(n *node, delay time.Duration) {
	defer p.wg.Done()
	for {
		p.probeUntilRecovered(n, delay)
		n.probing.Store(false)
		// A reopening that happened while this goroutine was on its way out
		// found probing set and left the node to it: take it back.
		if n.br.State() != breaker.Open || p.ctx.Err() != nil || n.idle(p.clock.Now()) ||
			!n.probing.CompareAndSwap(false, true) {
			return
		}
		delay = n.sched.Next(p.clock.Now())
	}
}

func (p *prober) probeUntilRecovered(n *node, delay time.Duration) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-timer.C:
		}
		if n.br.State() != breaker.Open || n.idle(p.clock.Now()) {
			return
		}
		start := time.Now()
		err := p.probe(p.ctx, n.addr, max(p.readTimeout, delay))
		if p.ctx.Err() != nil {
			return
		}
		n.probes.Add(1)
		if answered(err) {
			n.br.Recover()
			return
		}
		n.probeFailures.Add(1)
		p.failed(n, err)
		delay = n.sched.Next(p.clock.Now())
		timer.Reset(max(0, delay-time.Since(start)))
	}
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
	opt := *base
	opt.Addr = addr
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 0, 0
	opt.MaxRetries, opt.DialerRetries = -1, 1
	opt.DialTimeout = min(opt.DialTimeout, wait)
	opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = wait, wait, wait
	opt.ContextTimeoutEnabled = true
	opt.PipelinePoolSize = noPipelinePool
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	cl := redis.NewClient(&opt)
	defer cl.Close()
	cmd := redis.NewCmd(ctx, args...)
	_ = cl.Process(ctx, cmd)
	return cmd, cmd.Err()
}
