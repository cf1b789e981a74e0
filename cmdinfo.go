package redisguard

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// stepCountHook keeps go-redis's cluster client on its cached command-info
// path. With ContextTimeoutEnabled, which redisguard needs so that deadlines
// reach the sockets, ClusterClient looks up the step count of every command
// that carries none under a fresh five-second context and timer (routeAndRun
// and cmdInfo in go-redis's osscluster*.go): four allocations and a timer per
// command, a few percent of a cluster GET. The step count is read only for
// commands go-redis splits across shards, and every such command has a
// routing policy; a command with none is given step 1, which nothing reads,
// and go-redis skips the look-up. Commands with a policy keep go-redis's own
// path.
type stepCountHook struct{ cc *redis.ClusterClient }

func (stepCountHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h stepCountHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if r := h.cc.GetResolver(); r != nil && r.GetCommandPolicy(ctx, cmd) == nil {
			cmd.SetStepCount(1)
		}
		return next(ctx, cmd)
	}
}

func (stepCountHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
