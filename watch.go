package redisguard

import (
	"context"
	"runtime"

	"github.com/redis/go-redis/v9"
)

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
		return next(ctx, cmd)
	}
}

func (watchGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !batchIsBlocking(cmds) {
			return next(ctx, cmds)
		}
		err := ErrBlockingInWatch
		for _, cmd := range cmds {
			if classifyCmd(cmd) == classHolding {
				err = holdingErr(cmd)
			}
		}
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	}
}

// watchRunner is the go-redis function on the stack while a Watch
// transaction's hook chain is built (newTx, and any AddHook inside fn).
const watchRunner = "github.com/redis/go-redis/v9.(*Client).Watch"

// buildingWatch reports whether the hook chain being built belongs to a
// Watch transaction. In Standalone and Sentinel mode the Tx clones the
// client's hooks, facadeHook included, and facadeHook must not send the
// Tx's blocking commands to the long client: they would leave the watched
// connection. A hook only learns which chain it joins from the stack. The
// cost is paid when a chain is built (per Watch, per Conn, per new
// connection's handshake), never per command. A Conn opened inside a Watch
// function counts as part of the transaction.
func (a *admission) buildingWatch() bool {
	return a.c.cfg.Mode != ModeCluster && onStack(watchRunner)
}

// onStack reports whether fn, a fully qualified function name as
// runtime.Frame spells it, is among the current goroutine's callers.
func onStack(fn string) bool {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if f.Function == fn {
			return true
		}
		if !more {
			return false
		}
	}
}
