package redisguard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// pendingMode is the ModeAuto question a Client could not settle at
// NewClient because its one server gave no answer: go-redis's constructors
// are lazy, and a service must start while Redis does not answer, so
// NewClient does not fail for it, and the Client runs Standalone until the
// server answers. The first answer decides, never the silence: the reply to
// the HELLO that opens every connection says "mode", and a MOVED or ASK says
// cluster too. A standalone server ends the question. A cluster node makes
// the Client a front of a Cluster-mode Client built then (up): every
// command, pipeline and transaction, and every method of the Client that
// depends on the mode, is handed to it from then on, so that no write is
// lost to a guess.
//
// It is a hook outermost on the ordinary client but for the user's, which
// have run by then; a Client whose mode was settled at NewClient has none.
type pendingMode struct {
	c     *core
	build func() (*Client, error) // the Cluster-mode Client

	decided atomic.Bool            // the server answered; up says how
	up      atomic.Pointer[Client] // the Cluster-mode Client, once the server said cluster

	mu     sync.Mutex
	closed bool // guarded by mu; nothing is built once set
}

// current returns the Client that serves c's commands: c, or the
// Cluster-mode Client its server's first answer called for.
func (c *Client) current() *Client {
	if c.pending != nil {
		if up := c.pending.up.Load(); up != nil {
			return up
		}
	}
	return c
}

func (p *pendingMode) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pendingMode) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if namedLikeHandshake(cmd) {
			err := next(ctx, cmd)
			if !p.decided.Load() && err == nil {
				p.heard(cmd)
			}
			return err
		}
		if up := p.up.Load(); up != nil {
			return up.Process(ctx, cmd)
		}
		err := next(ctx, cmd)
		if isRedirect(err) {
			if up := p.redirected(); up != nil {
				return up.Process(ctx, cmd) // a redirected command did not run
			}
		}
		return err
	}
}

func (p *pendingMode) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || namedLikeHandshake(cmds[0]) {
			return next(ctx, cmds)
		}
		if up := p.up.Load(); up != nil {
			return batchOn(ctx, up, cmds)
		}
		err := next(ctx, cmds)
		var redirected []redis.Cmder
		for _, cmd := range cmds {
			if isRedirect(cmd.Err()) {
				redirected = append(redirected, cmd)
			}
		}
		if len(redirected) == 0 {
			return err
		}
		up := p.redirected()
		if up == nil {
			return err
		}
		if isTxBatch(cmds) {
			for _, cmd := range cmds {
				cmd.SetErr(nil)
			}
			return batchOn(ctx, up, cmds) // it did not run: EXEC was aborted
		}
		for _, cmd := range redirected {
			cmd.SetErr(nil)
		}
		_ = batchOn(ctx, up, redirected)
		return firstErr(cmds)
	}
}

// heard reads a handshake's answer: HELLO's reply names the server's mode.
func (p *pendingMode) heard(cmd redis.Cmder) {
	hello, ok := cmd.(*redis.MapStringInterfaceCmd)
	if !ok || !isHello(cmd) {
		return
	}
	switch mode := parseHello(hello.Val()).mode; mode {
	case "cluster":
		p.cluster()
	case "":
	default:
		p.decided.Store(true)
		p.c.log.Info("redisguard: the server answered; it is no cluster node: running Standalone", "mode", mode)
	}
}

// redirected returns the Client for a command the server redirected: the
// Cluster-mode Client, built now if the server had not answered before
// (the command's own connection may have been the one that heard it); nil
// if a standalone server answered, whose redirects are its own.
func (p *pendingMode) redirected() *Client {
	if up := p.up.Load(); up != nil {
		return up
	}
	if p.decided.Load() {
		return nil
	}
	return p.cluster()
}

// cluster builds the Cluster-mode Client, once; nil if it cannot be built
// (a Config that a cluster cannot take, logged) or the Client is closed.
func (p *pendingMode) cluster() *Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up := p.up.Load(); up != nil || p.closed {
		return up
	}
	p.decided.Store(true)
	up, err := p.build() // under mu: an Instrument waits for it (instrument)
	if err != nil {
		p.c.log.Error("redisguard: the server answered as a cluster node, and the Config cannot run a cluster client; staying Standalone: set Config.Mode",
			"err", p.c.redact(err.Error()))
		return nil
	}
	p.c.log.Info("redisguard: the server answered as a cluster node: running Cluster")
	p.up.Store(up)
	return up
}

// instrument runs add, which applies fn to the Client p settles, and then
// fn to the Cluster-mode Client if there is one: under mu, so that a
// Cluster-mode Client built meanwhile gets fn exactly once (build applies
// the extensions added before it).
func (p *pendingMode) instrument(fn func(redis.UniversalClient, ClientRole) error, add func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := add(); err != nil {
		return err
	}
	if up := p.up.Load(); up != nil {
		return up.InstrumentRoles(fn)
	}
	return nil
}

// close closes the Cluster-mode Client, if there is one, and builds none
// after.
func (p *pendingMode) close() error {
	p.mu.Lock()
	p.closed = true
	up := p.up.Load()
	p.mu.Unlock()
	if up != nil {
		return up.Close()
	}
	return nil
}

// batchOn sends cmds, a batch as go-redis hands it to a pipeline hook, on
// c: a transaction (MULTI ... EXEC) as one, every other batch as a
// pipeline. Each command keeps its own reply.
func batchOn(ctx context.Context, c *Client, cmds []redis.Cmder) error {
	if isTxBatch(cmds) {
		inner := cmds[1 : len(cmds)-1]
		_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, cmd := range inner {
				_ = pipe.Process(ctx, cmd)
			}
			return nil
		})
		if err != nil {
			cmds[len(cmds)-1].SetErr(err)
		}
		return err
	}
	_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		return nil
	})
	return err
}

// PoolStats is go-redis's PoolStats, of the Cluster-mode Client once the
// server said cluster.
//
// Its PubSubStats are those of the subscriptions' own client, where
// Subscribe and PSubscribe run (subscription_client.go), added to the
// ordinary client's.
func (c *Client) PoolStats() *redis.PoolStats {
	up := c.current()
	stats := up.UniversalClient.PoolStats()
	if subs := up.subs.poolStats(); subs != nil {
		stats.PubSubStats.Created += subs.PubSubStats.Created
		stats.PubSubStats.Untracked += subs.PubSubStats.Untracked
		stats.PubSubStats.Active += subs.PubSubStats.Active
	}
	return stats
}
