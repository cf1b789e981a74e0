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
// runs what waits in its socket buffer), the command runs twice. For most
// commands that is harmless: a second SET writes the same value, a second
// GET reads. For some it is not: a second RPUSH duplicates a queue item, a
// second INCR counts twice, a second SET NX tells the caller that the lock it
// has just taken belongs to somebody else.
//
// For those, a failure that came after the command may have reached the
// server ends the command with ErrOutcomeUnknown, which neither redisguard's
// reset retry nor go-redis's cluster loop repeats. Failures before that point
// (a dial, a pool timeout, a failed write) leave the command repeatable as
// before: it cannot have run.

// unrepeatable lists the commands whose second run changes what the first did
// or what its caller is told, by lower-case name. SET is decided by its
// options (see repeatable).
var unrepeatable = map[string]bool{
	// Effects that accumulate: a second run adds, counts, inserts or removes
	// again.
	"incr": true, "incrby": true, "incrbyfloat": true, "decr": true, "decrby": true,
	"hincrby": true, "hincrbyfloat": true, "zincrby": true, "bitfield": true,
	"append": true, "lpush": true, "rpush": true, "lpushx": true, "rpushx": true, "linsert": true,
	"lrem": true, "zremrangebyrank": true, "xadd": true, "publish": true, "spublish": true,
	// The reply of a second run contradicts the first: the caller would act
	// on a lock it holds as if it did not, or on its own value as the old one.
	"setnx": true, "hsetnx": true, "msetnx": true, "renamenx": true, "rename": true,
	"getset": true, "getdel": true,
	// Scripts and functions may do any of the above.
	"eval": true, "evalsha": true, "fcall": true,
}

// Pops (LPOP, BLPOP, LMOVE, XREADGROUP...) are not listed: when a pop's reply
// is lost, what it took is lost with it, whether or not a second pop follows;
// the second one takes the next element, and duplicates nothing.

// repeatable reports whether cmd may be sent again after a failure that left
// its outcome unknown. Unknown commands are repeatable, as they were in
// go-redis.
func repeatable(cmd redis.Cmder) bool {
	name := cmd.Name()
	if unrepeatable[name] {
		return false
	}
	if name == "set" {
		// SET ... NX (a lock) and SET ... GET (a swap) answer differently the
		// second time. The options follow the key and the value.
		args := cmd.Args()
		for i := 3; i < len(args); i++ {
			if s, ok := args[i].(string); ok && (strings.EqualFold(s, "nx") || strings.EqualFold(s, "get")) {
				return false
			}
		}
	}
	return true
}

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
