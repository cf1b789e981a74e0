package redisguard

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// withReadOnly returns the OnConnect of the node client at addr with
// ReadFromMasterPreferred: READONLY, then then. go-redis's ReadOnly, which
// would send it, stays off there; a replica answers reads only on a
// connection that has sent it, and any node may be a replica after a
// failover. A refused READONLY fails no connection, which a master does not
// need it for: it is not sent again, and no read goes to a replica
// (replicas.readonly).
func (r *replicas) withReadOnly(addr string, then func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if !r.readonly.refused() {
			if err := cn.ReadOnly(ctx).Err(); err != nil && !r.readonly.refusedBy(r.k, readonlyQuestion, addr, err) {
				return err
			}
		}
		if then != nil {
			return then(ctx, cn)
		}
		return nil
	}
}

// directNodeKey marks the context of calls a caller makes on a node client
// of its choice (ForEachShard, ForEachSlave): replicaHook leaves them where
// the caller sent them.
type directNodeKey struct{}

// replicaHook is installed on each node client of the ordinary cluster
// client, outside the node's guard (see replicas).
type replicaHook struct {
	r  *replicas
	n  *node     // the node the client talks to
	fb *fallback // its fallback state, as a master
}

func (h replicaHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// own reports whether cmd is one the hook leaves alone: sent by go-redis or
// redisguard for their own purposes, or by a caller to a node of its choice.
func own(ctx context.Context, cmd redis.Cmder) bool {
	return isNodeAdmin(cmd) || ctx.Value(directNodeKey{}) != nil
}

func (h replicaHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	r, self := h.r, h.n
	fb := h.fb
	routed := r.k.cfg.ReadFrom != ReadFromMasterPreferred // go-redis sends reads to replicas
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ci, ok := cmd.(*redis.CommandsInfoCmd); ok {
			return r.commandInfo(ctx, ci, self.addr, next)
		}
		if routed {
			if master := r.masterOf(self.addr); master != nil && !own(ctx, cmd) {
				return h.replicaRead(ctx, cmd, master, next)
			}
		}
		return r.process(ctx, cmd, self, fb, next)
	}
}

// replicaRead serves a read go-redis routed to h's replica, of master: on
// the replica if it is usable, otherwise on the master.
func (h replicaHook) replicaRead(ctx context.Context, cmd redis.Cmder, master *node, next redis.ProcessHook) error {
	r, self := h.r, h.n
	if r.usable(ctx, self) {
		self.replicaReads.Add(1)
		return next(ctx, cmd)
	}
	mc := r.client(master.addr)
	if mc == nil {
		return next(ctx, cmd) // go-redis has not built the master's client yet
	}
	return mc.Process(ctx, cmd)
}

// ProcessPipelineHook does for a pipeline of reads what ProcessHook does
// for one: a pipeline is a read when every command in it is (a transaction
// never is), and it moves whole.
func (h replicaHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	r, self := h.r, h.n
	fb := h.fb
	routed := r.k.cfg.ReadFrom != ReadFromMasterPreferred
	// go-redis's cluster client sends each node's batch from a goroutine of
	// its own, started for the batch, whose stack grows with the frames it
	// passes: a healthy master's batch passes this one frame only.
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch {
		case len(cmds) == 0:
			return next(ctx, cmds)
		case routed:
			return r.routedBatch(ctx, cmds, self, next, fb)
		case away(self):
			return r.processBatch(ctx, cmds, self, fb, next)
		}
		err := next(ctx, cmds)
		if r.falling.Load() != 0 {
			r.masterAnswered(err, self, fb)
		}
		return err
	}
}

// routedBatch is ProcessPipelineHook's batch where go-redis routes reads
// to replicas (every ReadFrom but ReadFromMasterPreferred).
//
//go:noinline
func (r *replicas) routedBatch(ctx context.Context, cmds []redis.Cmder, self *node, next redis.ProcessPipelineHook, fb *fallback) error {
	if master := r.masterOf(self.addr); master != nil && !own(ctx, cmds[0]) {
		if r.usable(ctx, self) {
			self.replicaReads.Add(uint64(len(cmds)))
			return next(ctx, cmds)
		}
		if mc := r.client(master.addr); mc != nil {
			return pipelineOn(ctx, mc, cmds)
		}
		return next(ctx, cmds)
	}
	return r.processBatch(ctx, cmds, self, fb, next)
}

// pipelineOn sends cmds as one pipeline on cl. Every command keeps its own
// reply: an error reply is not returned, which would stamp it on the
// commands that succeeded.
func pipelineOn(ctx context.Context, cl *redis.Client, cmds []redis.Cmder) error {
	pipe := cl.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, err := pipe.Exec(ctx)
	if err == nil || err == redis.Nil || isRedisReply(err) {
		return nil
	}
	return err
}

// masterMissed reports whether err says the master did not answer: not a
// reply, not the caller giving up, not Close.
func masterMissed(ctx context.Context, err error) bool {
	return err != nil && err != redis.Nil && !isRedisReply(err) && contextDone(ctx) == nil &&
		!errors.Is(err, ErrClosed)
}
