package redisguard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The sentinel errors below are what redisguard adds to go-redis's own error
// set. Test for them with errors.Is; they survive wrapping.
//
// None of them looks retryable to go-redis: they are plain values with no
// Timeout method, they are not net.Error, and they do not wrap
// pool.ErrPoolTimeout. That matters because go-redis's cluster client retries
// (and marks nodes failing on) anything that looks like a network fault; an
// open breaker or an exhausted budget must end the command instead.
var (
	// ErrClosed is returned by every operation on a Client after Close.
	ErrClosed = errors.New("redisguard: client is closed")

	// ErrInvalidConfig is wrapped by every configuration error, whether from
	// NewClient or from parsing a URL. The wrapping error names the field.
	ErrInvalidConfig = errors.New("redisguard: invalid config")

	// ErrNodeUnavailable means the node's circuit breaker is open: the node
	// failed NodeFailureThreshold times in a row and has not yet passed a
	// recovery probe. The command was not sent. It arrives wrapped in a
	// *NodeError naming the node.
	ErrNodeUnavailable = errors.New("redisguard: node unavailable")

	// ErrNodeSlow means the node is marked slow (see Config.SlowNodeFactor)
	// and the command was refused at once, not sent: as many callers as the
	// node may serve meanwhile are already waiting on it, or the command's
	// deadline would pass before the node answers at its current latency. It
	// wraps ErrNodeUnavailable, so a fallback written for a node that is
	// down serves a node that is slow too. It arrives wrapped in a
	// *NodeError naming the node.
	ErrNodeSlow = fmt.Errorf("redisguard: node slow: %w", ErrNodeUnavailable)

	// ErrPoolExhausted means no capacity (an ordinary connection, or a long
	// permit for a blocking command or subscription) became free within
	// PoolTimeout. The command was not sent. It is never retried and never
	// counts against a node's breaker.
	ErrPoolExhausted = errors.New("redisguard: pool exhausted")

	// ErrClusterFailover means a slot's ownership is contested between nodes
	// and did not converge within ClusterNodeTimeout, or the claimant with the
	// highest configEpoch is unreachable.
	ErrClusterFailover = errors.New("redisguard: cluster failover in progress")

	// ErrSlotMapCorruption means the cluster's nodes agree on a slot's owner
	// but the client still bounced between nodes: the client's own slot map
	// was wrong. A refresh has been forced; retrying is reasonable.
	ErrSlotMapCorruption = errors.New("redisguard: slot map corruption")
	// ErrOutcomeUnknown means the connection failed (reset, closed, timed
	// out) after a command not known to be safe to repeat may have reached
	// the server: RPUSH, INCR, SET NX, DEL, EVAL, an unknown command and the
	// like (see repeatable in classify.go). It may or may not have run, so
	// it was not retried. It arrives wrapped in a
	// *NodeError naming the node, with the network error's text. Read back
	// before retrying by hand.
	ErrOutcomeUnknown = errors.New("redisguard: outcome unknown")

	// ErrBlockingInWatch is returned at once, with nothing sent, for a
	// blocking command (or a non-transactional batch containing one) issued
	// on the Tx inside Watch. There it would park the transaction's own
	// connection, which is ordinary capacity, for as long as it blocks.
	// Queue it in TxPipelined instead, where Redis never blocks, or issue it
	// outside Watch.
	ErrBlockingInWatch = errors.New("redisguard: blocking command inside Watch")

	// ErrHoldingCommand is returned at once for SUBSCRIBE, PSUBSCRIBE,
	// SSUBSCRIBE and MONITOR sent as plain commands (Do, Process, Monitor or
	// in a pipeline): each turns a pooled connection into a push stream that
	// nothing reads. Use Subscribe, PSubscribe or SSubscribe. MONITOR is not
	// supported at all: go-redis v9's MonitorCmd reads its connection from a
	// goroutine after handing it back to the pool, which races with the
	// pool's own reads (RESP3) and can deadlock Start; use redis-cli.
	ErrHoldingCommand = errors.New("redisguard: SUBSCRIBE or MONITOR sent as a plain command")

	errSubscribeCommand = fmt.Errorf("%w; use Subscribe, PSubscribe or SSubscribe", ErrHoldingCommand)
	errMonitorCommand   = fmt.Errorf("%w; MONITOR is not supported, use redis-cli", ErrHoldingCommand)
)

// NodeError is the one typed error: a failure attributable to one node. Err
// is a sentinel above (ErrNodeUnavailable, ErrPoolExhausted) or the cause
// from go-redis, so errors.Is(err, ErrNodeUnavailable) sees through it.
type NodeError struct {
	Addr string // host:port of the node
	Err  error
}

func (e *NodeError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	b.WriteString(" (node ")
	b.WriteString(e.Addr)
	b.WriteString(")")
	return b.String()
}

func (e *NodeError) Unwrap() error { return e.Err }

// redirectOf parses a MOVED or ASK reply: "MOVED 3999 127.0.0.1:6381".
func redirectOf(err error) (slot int, addr string, ok bool) {
	if err == nil {
		return 0, "", false
	}
	re, ok := errors.AsType[redis.Error](err)
	if !ok {
		return 0, "", false
	}
	kind, rest, _ := strings.Cut(re.Error(), " ")
	if kind != "MOVED" && kind != "ASK" {
		return 0, "", false
	}
	s, addr, _ := strings.Cut(rest, " ")
	slot, perr := strconv.Atoi(s)
	if perr != nil || slot < 0 || slot >= 16384 || addr == "" {
		return 0, "", false
	}
	return slot, addr, true
}

// isRedirect reports whether err is a MOVED or ASK reply.
func isRedirect(err error) bool {
	_, _, ok := redirectOf(err)
	return ok
}
