package redisguard

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Watch is go-redis's Watch. The transaction keeps its native connection,
// ordinary capacity, until fn returns; a blocking command issued on the Tx
// fails at once with ErrBlockingInWatch instead of parking that connection.
//
// After Close it fails with ErrClosed and never runs fn, in every mode. A
// nil error always means that fn ran and returned nil: go-redis's cluster
// Watch can end its retry loop (redirects, closed node clients) with nil
// and without running fn, and that is reported as an error here.
func (c *Client) Watch(ctx context.Context, fn func(*redis.Tx) error, keys ...string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if up := c.current(); up != c {
		return up.Watch(ctx, fn, keys...)
	}
	// Where the Tx runs decides how its blocking commands are refused: in
	// Cluster mode on a node client, below facadeHook, with the Tx chain of
	// the hook table (watchGuard) added to it; in Standalone and Sentinel
	// mode on the Watch client (watchClient), whose guard runs facadeHook's
	// step marked as a Tx's. Neither asks anything of the goroutine but what
	// the hooks are handed.
	watch := c.UniversalClient.Watch
	if c.watch != nil {
		watch = c.watch.Watch
	}
	ran := false // fn runs on this goroutine, inside go-redis's Watch
	err := watch(ctx, func(tx *redis.Tx) error {
		ran = true
		if c.watch == nil {
			txHooks(tx)
			return sealTx(fn(tx))
		}
		return fn(tx)
	}, keys...)
	switch {
	case ran:
		// fn's own answer, untouched but for what the node guard sealed
		// (a Tx's command failed on its connection).
		return unsealTx(err)
	case err != nil:
		// In Cluster mode go-redis's errors reach here without passing
		// facadeHook ("redis: client is closed" after Close).
		return c.fac.translate(ctx, err)
	case c.closed.Load():
		return ErrClosed
	}
	return errWatchNotRun
}

// errWatchNotRun is what Watch returns when go-redis's cluster Watch gave up
// without running the transaction yet reported no error.
var errWatchNotRun = errors.New("redisguard: Watch gave up before the transaction ran (the slot's node kept redirecting or closing); the transaction was not sent")

// watchGuard is added to the Tx of every Watch in Cluster mode, where the
// transaction runs on a node client that facadeHook never sees. It refuses
// long commands as facadeHook does on a transaction's chain elsewhere.
type watchGuard struct{}

func (watchGuard) DialHook(next redis.DialHook) redis.DialHook { return next }

func (watchGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch classifyCmd(cmd) {
		case classBlocking:
			return ErrBlockingInWatch
		case classHolding:
			return holdingErr(cmd)
		}
		return markTx(next(ctx, cmd))
	}
}

func (watchGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !batchIsBlocking(cmds) {
			return markTx(next(ctx, cmds))
		}
		err := ErrBlockingInWatch
		for _, cmd := range cmds {
			if classifyCmd(cmd) == classHolding {
				err = holdingErr(cmd)
			}
		}
		return failBatch(cmds, err)
	}
}

// txMarked is a network's error on a Watch transaction's connection, as
// watchGuard, the Tx's innermost hook, hands it up to the node guard: the
// guard gives the Tx's caller its error unsealed (nodeGuard.seal), since
// it goes to the Watch function rather than to go-redis's cluster loop.
type txMarked struct{ err error }

func (m txMarked) Error() string { return m.err.Error() }
func (m txMarked) Unwrap() error { return m.err }

// markTx marks err for the node guard if it is a network's error.
func markTx(err error) error {
	if err == nil || isRedisReply(err) || !isNetworkError(err) {
		return err
	}
	return txMarked{err}
}

// unmarkTx returns err without markTx's mark, and whether it had one.
func unmarkTx(err error) (error, bool) {
	if m, ok := err.(txMarked); ok {
		return m.err, true
	}
	return err, false
}

// txSealed is what a Watch function returned, as Client.Watch hands it to
// go-redis's cluster Watch, whose loop runs the function again on an
// error that wraps a network's: the function's answer when a node guard
// typed a failure of its transaction, which may have run. Client.Watch
// gives the function's answer back (unsealTx).
type txSealed struct{ err error }

func (s txSealed) Error() string { return s.err.Error() }

// sealTx seals err if it carries a node guard's error with a network's
// error behind it.
func sealTx(err error) error {
	if ne, ok := errors.AsType[*NodeError](err); ok && ne.cause != nil {
		return txSealed{err}
	}
	return err
}

// unsealTx is the Watch function's own answer.
func unsealTx(err error) error {
	if s, ok := err.(txSealed); ok {
		return s.err
	}
	return unseal(err)
}
