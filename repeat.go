package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	cause = withoutSetup(cause)
	name := "the batch"
	if cmd != nil {
		name = strings.ToUpper(cmd.Name())
	}
	return &NodeError{Addr: n.addr, Err: fmt.Errorf("%w: %s may have run, so it was not retried: %v",
		ErrOutcomeUnknown, name, cause), cause: cause}
}

// clusterResends reports whether go-redis's cluster client sends the node
// batch cmds again by itself when it fails: its pipeline loop does, but not
// its redirect loop (an ASK's ASKING and command) or its transaction loop,
// which end on a connection's failure.
func clusterResends(cmds []redis.Cmder) bool {
	return len(cmds) == 0 || !(strings.EqualFold(cmds[0].Name(), "asking") || isTxBatch(cmds))
}

// resendable reports whether the reset retry may send a batch again: it
// resends the whole batch or nothing, so every command must be repeatable and
// none marked NoRetry (go-redis's per-command switch, which its own retry
// loops honour too). Cluster pipeline batches are go-redis's to retry
// (clusterResends).
func resendable(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if cmd.NoRetry() || !repeatable(cmd) {
			return false
		}
	}
	return true
}

// callerError is the error a command that failed on n with err (neither nil
// nor a reply) ends with, in the documented set; cmd is nil for a batch's
// own error. It is where a transport error becomes the caller's: a command
// that may have run and is not safe to repeat (unrepeatable) ends with
// ErrOutcomeUnknown; one whose connection the opening breaker cut with
// ErrNodeUnavailable; one that never reached the node or is safe to repeat
// with ErrNodeFailed. A pool timeout is ErrPoolExhausted; the caller's own
// context, go-redis's closed client (its cluster loop acts on it) and
// redisguard's decisions pass as they are. The guard seals what wraps a
// network error before go-redis's loops see it (nodeGuard.seal).
func (n *node) callerError(ctx context.Context, cmd redis.Cmder, err error, cut, unrepeatable bool) error {
	switch {
	case unrepeatable:
		return n.outcomeUnknown(cmd, err)
	case errors.Is(err, redis.ErrPoolTimeout):
		return n.exhausted
	case errors.Is(err, ErrNodeUnavailable) && !errors.As(err, new(*NodeError)):
		return n.unavailable
	case isGuardError(err), errors.Is(err, ErrClosed), errors.Is(err, redis.ErrClosed), contextDone(ctx) != nil:
		return withoutSetup(err)
	case cut:
		return n.unavailable
	case isNetworkError(err):
		return n.unreachable(err)
	}
	return withoutSetup(err)
}

// unreachable is the error for a command that failed on its connection to n
// and is safe to send again, or never ran: ErrNodeFailed, wrapping the
// network's error.
func (n *node) unreachable(cause error) error {
	cause = withoutSetup(cause)
	return &NodeError{Addr: n.addr, Err: fmt.Errorf("%w: %v", ErrNodeFailed, cause), cause: cause}
}

// sentOnce holds the commands not safe to repeat that a node may have run
// in a batch go-redis's cluster client may send again: its pipeline loop
// sends a failed node batch again whole, the commands answered before the
// failure included, and it does the same for a batch whose first command
// was answered TRYAGAIN or CLUSTERDOWN. The node guard sends none of them
// a second time (unsent), and the cluster facade forgets them when the
// caller's operation ends (forget). It is the one record the no-repeat rule
// keeps across go-redis's attempts: each attempt passes a node guard, and a
// single command's error already stops go-redis's loops (callerError).
//
// The zero value is ready; while it is empty, the guard's batch path pays
// one atomic load for it.
type sentOnce struct {
	n  atomic.Int64 // len(m), read without mu
	mu sync.Mutex
	m  map[redis.Cmder]time.Time // guarded by mu: when each was noted
}

// sentOnceLimit bounds what an operation that never reaches the facade's
// forget (a batch sent on a node client directly) can leave behind: past
// it, note drops entries older than sentOnceTTL.
const (
	sentOnceLimit = 1024
	sentOnceTTL   = time.Minute
)

// note records each command of cmds, a node's batch that failed with err,
// that is not safe to repeat and ran, or may have (ranOrMayHave).
func (s *sentOnce) note(ctx context.Context, cmds []redis.Cmder, err error, closed bool) {
	now := time.Now()
	for _, cmd := range cmds {
		if repeatable(cmd) || !ranOrMayHave(ctx, cmd.Err(), err, closed) {
			continue
		}
		s.mu.Lock()
		if s.m == nil {
			s.m = make(map[redis.Cmder]time.Time)
		}
		if _, ok := s.m[cmd]; !ok {
			s.m[cmd] = now
			if len(s.m) > sentOnceLimit {
				for c, at := range s.m {
					if now.Sub(at) > sentOnceTTL {
						delete(s.m, c)
					}
				}
			}
			s.n.Store(int64(len(s.m)))
		}
		s.mu.Unlock()
	}
}

// ranOrMayHave reports whether a command of a node's batch that failed
// with batchErr, its own error being err, ran or may have: it was answered
// (a reply that says it did not run aside), or its connection failed after
// it may have reached the server. A reply that says it did not run, in a
// batch whose connection then failed, may be an earlier attempt's: go-redis
// stamps a failure only on the commands without an error, and a command
// redirected before keeps its MOVED or ASK while it is sent again. It is
// taken to have reached the server this time.
func ranOrMayHave(ctx context.Context, err, batchErr error, closed bool) bool {
	if closed {
		return err == nil || err == redis.Nil || (isRedisReply(err) && !didNotRun(err))
	}
	switch {
	case err == nil || err == redis.Nil || errors.Is(err, ErrOutcomeUnknown):
		return true
	case isRedisReply(err) && didNotRun(err):
		return !batchAnswered(batchErr) && mayHaveRun(ctx, batchErr)
	case isRedisReply(err):
		return true
	}
	return mayHaveRun(ctx, err)
}

// pending reports whether any command is recorded.
func (s *sentOnce) pending() bool { return s.n.Load() > 0 }

// unsent returns the commands of cmds that are not recorded, and whether
// any was left out. A transaction is never split: go-redis sends one again
// only when it did not run.
func (s *sentOnce) unsent(cmds []redis.Cmder) ([]redis.Cmder, bool) {
	if isTxBatch(cmds) {
		return cmds, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []redis.Cmder
	for i, cmd := range cmds {
		if _, ok := s.m[cmd]; !ok {
			if out != nil {
				out = append(out, cmd)
			}
			continue
		}
		if out == nil {
			out = append(make([]redis.Cmder, 0, len(cmds)-1), cmds[:i]...)
		}
	}
	if out == nil {
		return cmds, false
	}
	return out, true
}

// forget drops the records of cmds, whose operation has ended.
func (s *sentOnce) forget(cmds ...redis.Cmder) {
	if !s.pending() {
		return
	}
	s.mu.Lock()
	for _, cmd := range cmds {
		delete(s.m, cmd)
	}
	s.n.Store(int64(len(s.m)))
	s.mu.Unlock()
}

// didNotRun reports whether err is a reply that says the server did not run
// the command: a redirect, or a refusal to serve it now (notServing).
func didNotRun(err error) bool {
	return isRedirect(err) || notServing(err)
}
