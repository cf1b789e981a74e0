package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Repeating a command after its connection failed is at-least-once: when the
// server ran the command and only the reply was lost (a CLIENT KILL, a reset,
// a read timeout on a server that was paused and later resumed, which still
// runs what waits in its socket buffer), the command runs twice. A second GET
// reads and a second SET writes the same value, but a second RPUSH duplicates
// a queue item, a second INCR counts twice, and a second SET NX tells the
// caller that the lock it has just taken belongs to somebody else.
//
// So a failure that came after a command may have reached the server ends
// the command with ErrOutcomeUnknown, which neither redisguard's reset retry
// nor go-redis's cluster loop repeats, unless the command is known to be
// safe to run twice (repeatable, classify.go). Failures before that point (a
// dial, a pool timeout, a failed write) leave every command repeatable: it
// cannot have run.

// mayHaveRun reports whether a command that failed with err may have reached
// the server and run there: a network error or timeout after the write.
// Dials, failed connection set-ups, pool timeouts, failed writes, the
// caller's own context and replies say the command did not run, or that it
// did and the caller was told.
func mayHaveRun(ctx context.Context, err error) bool {
	if err == nil || err == redis.Nil || isRedisReply(err) || contextDone(ctx) != nil ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) || isGuardError(err) || isSetupFailure(err) {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && (opErr.Op == "dial" || opErr.Op == "write") {
		return false
	}
	var netErr net.Error
	return isConnReset(err) || errors.As(err, &netErr)
}

// outcomeUnknown is the error for an unrepeatable command whose connection
// failed after it may have run. The cause is quoted, not wrapped: go-redis's
// retry loops look for network errors through wrapping, and must not find
// one here.
func (n *node) outcomeUnknown(cmd redis.Cmder, cause error) error {
	n.outcomeUnknowns.Add(1)
	return &NodeError{Addr: n.addr, Err: fmt.Errorf("%w: %s may have run, so it was not retried: %v",
		ErrOutcomeUnknown, strings.ToUpper(cmd.Name()), cause)}
}

// resendable reports whether the reset retry may send a batch again: it
// resends the whole batch or nothing, so every command must be repeatable and
// none marked NoRetry (go-redis's per-command switch, which its own retry
// loops honour too). Cluster batches are go-redis's pipeline loop's to retry.
func resendable(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if cmd.NoRetry() || !repeatable(cmd) {
			return false
		}
	}
	return true
}
