package redisguard

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The error translation has one order in every mode: the node guard types
// a failure for its node (callerError), then the facade translates it for
// the caller (translate). Every error a command can fail with ends as a
// documented one: the caller's context error, unchanged; a reply from
// Redis, redis.Nil included; ErrClosed; or a *NodeError naming the node that
// wraps ErrNodeUnavailable, ErrNodeFailed, ErrOutcomeUnknown or
// ErrPoolExhausted. An error none of go-redis's, the network's or
// redisguard's (what a user's hook or Dialer returned) passes as it is. The
// frame that runs both steps in Standalone and Sentinel mode
// (facade+guard) ends each error as the two steps in that order do.
func TestErrorTranslationGuardThenFacade(t *testing.T) {
	const addr = "127.0.0.1:1" // never dialled
	// Breakers off: each error reaches the guard's ending, none a refusal.
	c := newTestClient(t, Config{Mode: ModeStandalone, Addrs: []string{addr}, NodeFailureThreshold: -1})
	k, f, n := c.core, c.fac, c.nodes.get(addr)
	// guard is the node guard's ending of a failed command (failed), but
	// for the reset retry, which sends the command again.
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
	boom := errors.New("boom")
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
		"something else entirely": boom,
	}
	documented := func(ctx context.Context, raw, err error) bool {
		if ne := (*NodeError)(nil); errors.As(err, &ne) {
			for _, sentinel := range []error{ErrNodeUnavailable, ErrNodeFailed, ErrOutcomeUnknown, ErrPoolExhausted} {
				if errors.Is(err, sentinel) {
					return ne.Addr == addr
				}
			}
			return false
		}
		switch {
		case err == redis.Nil || isRedisReply(err) || err == ErrClosed:
			return true
		case err == context.Canceled || err == context.DeadlineExceeded:
			return err == ctx.Err() // the caller's own, unchanged
		}
		return err == boom && raw == boom
	}
	check := func(state string, ctx context.Context, frame bool) {
		for _, cmd := range []redis.Cmder{redis.NewIntCmd(live, "incr", "n"), redis.NewStringCmd(live, "get", "k")} {
			for name, e := range raw {
				what := state + ", " + cmd.Name() + ", " + name
				err := f.translate(ctx, guard(ctx, cmd, e))
				require.Error(t, err, what)
				assert.True(t, documented(ctx, e, err), "%s: %v", what, err)
				assert.False(t, isSetupFailure(err), "%s: a set-up mark reached the caller", what)
				if isRedisReply(e) || e == redis.Nil {
					assert.Equal(t, e, err, "%s: an answer passes as it is", what)
				}
				if !frame {
					continue
				}
				g := c.nodes.guard(addr)
				g.facade = f
				process := g.ProcessHook(func(context.Context, redis.Cmder) error { return e })
				got := process(ctx, cmd)
				require.Error(t, got, what)
				assert.Equal(t, err.Error(), got.Error(), "%s: the facade+guard frame", what)
				for _, sentinel := range []error{ErrNodeUnavailable, ErrNodeFailed, ErrOutcomeUnknown, ErrPoolExhausted, ErrClosed,
					context.Canceled, context.DeadlineExceeded, redis.Nil} {
					assert.Equal(t, errors.Is(err, sentinel), errors.Is(got, sentinel), "%s: errors.Is %v", what, sentinel)
				}
			}
		}
	}
	check("live", live, true)
	check("the caller gone", gone, true)
	k.closed.Store(true)
	// The frame refuses every command of a closed Client before sending it
	// (TestCloseFailsFast); what one in flight got is translated so.
	check("closed", live, false)
	k.closed.Store(false)

	// A pool timeout names its node, a network's failure too.
	get := redis.NewStringCmd(live, "get", "k")
	err := f.translate(live, guard(live, get, redis.ErrPoolTimeout))
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, addr, ne.Addr)
	assert.ErrorIs(t, err, ErrPoolExhausted)
	assert.ErrorIs(t, f.translate(live, guard(live, get, io.EOF)), ErrNodeFailed)
	assert.ErrorIs(t, f.translate(live, guard(live, redis.NewIntCmd(live, "incr", "n"), io.EOF)), ErrOutcomeUnknown)
	// The caller's context outranks a network's failure, not a decision of
	// redisguard's.
	assert.Equal(t, context.Canceled, f.translate(gone, guard(gone, get, io.EOF)))
	assert.ErrorIs(t, f.translate(gone, guard(gone, get, redis.ErrPoolTimeout)), ErrPoolExhausted)
	// Close outranks everything but an answer.
	k.closed.Store(true)
	assert.Equal(t, ErrClosed, f.translate(live, guard(live, get, io.EOF)))
	assert.Equal(t, redis.Nil, f.translate(live, guard(live, get, redis.Nil)))
	k.closed.Store(false)
}
