package redisguard

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
)

// The two halves of the error translation, the node guard's (callerError)
// and the facade's (translate), meet in either order: the facade inside the
// guard in Standalone and Sentinel mode, outside it in Cluster mode. Every
// error a command can fail with ends the same in both.
func TestErrorTranslationInEitherOrder(t *testing.T) {
	cfg, err := Config{Addrs: []string{"127.0.0.1:7000"}}.resolve()
	require.NoError(t, err)
	k := newCore(cfg, clock.NewFake(time.Unix(1000, 0)))
	f := &facade{k: k}
	const addr = "127.0.0.1:7000"
	n := &node{addr: addr, unavailable: &NodeError{Addr: addr, Err: ErrNodeUnavailable},
		exhausted: &NodeError{Addr: addr, Err: ErrPoolExhausted}}
	// guard is the node guard's ending of a failed command.
	guard := func(ctx context.Context, cmd redis.Cmder, err error) error {
		if err == nil || isRedisReply(err) {
			return err
		}
		unrepeatable := !k.closed.Load() && mayHaveRun(ctx, err) && !repeatable(cmd)
		return n.callerError(ctx, cmd, err, false, unrepeatable)
	}

	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	raw := map[string]error{
		"a read timeout":          &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
		"a reset":                 io.EOF,
		"a refused dial":          setupFailure(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false),
		"a pool timeout":          redis.ErrPoolTimeout,
		"a closed node client":    redis.ErrClosed,
		"the caller's deadline":   context.DeadlineExceeded,
		"an error reply":          redis.ErrCrossSlot,
		"redis.Nil":               redis.Nil,
		"the breaker's refusal":   n.unavailable,
		"a bare refusal":          ErrNodeUnavailable,
		"redisguard's Close":      ErrClosed,
		"something else entirely": errors.New("boom"),
	}
	check := func(state string, ctx context.Context) {
		for _, cmd := range []redis.Cmder{redis.NewIntCmd(live, "incr", "n"), redis.NewStringCmd(live, "get", "k")} {
			for name, e := range raw {
				clusterOrder := f.translate(ctx, guard(ctx, cmd, e))
				standaloneOrder := guard(ctx, cmd, f.translate(ctx, e))
				what := state + ", " + cmd.Name() + ", " + name
				require.Equal(t, clusterOrder == nil, standaloneOrder == nil, what)
				if clusterOrder == nil {
					continue
				}
				assert.Equal(t, clusterOrder.Error(), standaloneOrder.Error(), what)
				for _, sentinel := range []error{ErrNodeUnavailable, ErrNodeFailed, ErrOutcomeUnknown, ErrPoolExhausted, ErrClosed,
					context.Canceled, context.DeadlineExceeded, redis.Nil} {
					assert.Equal(t, errors.Is(clusterOrder, sentinel), errors.Is(standaloneOrder, sentinel), "%s: errors.Is %v", what, sentinel)
				}
				var a, b *NodeError
				assert.Equal(t, errors.As(clusterOrder, &a), errors.As(standaloneOrder, &b), what)
			}
		}
	}
	check("live", live)
	check("the caller gone", gone)
	k.closed.Store(true)
	check("closed", live)

	// A pool timeout names its node in every mode.
	k.closed.Store(false)
	err = guard(live, redis.NewStringCmd(live, "get", "k"), f.translate(live, redis.ErrPoolTimeout))
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, addr, ne.Addr)
	assert.ErrorIs(t, err, ErrPoolExhausted)
}
