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
	// errors.Is also takes it for go-redis's redis.ErrClosed, so code
	// written for go-redis's closed client matches it; the reverse does
	// not hold: a PubSub or an AutoPipeliner closed on its own returns
	// redis.ErrClosed, which is not ErrClosed. Compare with errors.Is, not
	// with == or the message.
	ErrClosed error = closedError{}

	// ErrInvalidConfig is wrapped by every configuration error, whether from
	// NewClient or from parsing a URL. The wrapping error names the field.
	ErrInvalidConfig = errors.New("redisguard: invalid config")

	// ErrNodeUnavailable means the node's circuit breaker is open: the node
	// failed NodeFailureThreshold times in a row, or left every command
	// sent to it unanswered for HungNodeAfter, and has not yet passed a
	// recovery probe. The command was not sent, or, safe to repeat, was cut
	// short on its connection when the breaker opened (a command that is
	// not safe to repeat gets ErrOutcomeUnknown then). It arrives wrapped
	// in a *NodeError naming the node.
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
	// it was not sent again, by redisguard or go-redis, on any path. It
	// arrives in a *NodeError naming the node, which wraps the network's
	// error too. Read back before retrying by hand.
	ErrOutcomeUnknown = errors.New("redisguard: outcome unknown")

	// ErrNodeFailed means the connection to the node failed while the
	// command was sent or awaited its reply: the dial was refused, the
	// connection was reset, or the node did not answer within ReadTimeout.
	// The command either never ran or is safe to send again (a read, an
	// unconditional SET; those that are not end with ErrOutcomeUnknown),
	// and a reset was already retried once. It arrives in a *NodeError
	// naming the node, which wraps the network's error: errors.As(err,
	// &netErr) and errors.Is(err, os.ErrDeadlineExceeded) see it as they
	// would with go-redis. The node's breaker counts it.
	ErrNodeFailed = errors.New("redisguard: node failed")

	// ErrNotServing means the server answered that it could not serve the
	// command then, and did not run it: CLUSTERDOWN (between a master's
	// FAIL mark and its replica's promotion), TRYAGAIN (a slot being
	// migrated), LOADING (a server loading its data set), MASTERDOWN (a
	// replica that lost its master), READONLY (the node the client took
	// for the master is a replica) or, to a blocking call, the UNBLOCKED of
	// a master that became a replica. redisguard sent it again after a
	// back-off, for as long as the caller's deadline allowed and at most
	// ClusterNodeTimeout; the message quotes the last reply. Retrying
	// later is safe.
	ErrNotServing = errors.New("redisguard: server not serving")

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

// closedError is ErrClosed's type: a value of its own that errors.Is
// matches with redis.ErrClosed too.
type closedError struct{}

func (closedError) Error() string { return "redisguard: client is closed" }

// Is reports whether target is go-redis's closed error.
func (closedError) Is(target error) bool { return target == redis.ErrClosed }

// NodeError is the one typed error: a failure attributable to one node. Err
// is a sentinel above (ErrNodeUnavailable, ErrPoolExhausted...), or wraps
// one, so errors.Is(err, ErrNodeUnavailable) sees through it. A failure of
// the connection (ErrNodeFailed, ErrOutcomeUnknown) wraps the network's
// error as well.
type NodeError struct {
	Addr string // host:port of the node
	Err  error

	cause error // the network's error behind Err, if any
}

func (e *NodeError) Error() string {
	if e.Addr == "" {
		// A failure go-redis reported without its node (the read of a
		// cluster transaction's replies).
		return e.Err.Error()
	}
	var b strings.Builder
	b.WriteString(e.Err.Error())
	b.WriteString(" (node ")
	b.WriteString(e.Addr)
	b.WriteString(")")
	return b.String()
}

// Unwrap returns Err, and the network's error behind it if there is one.
func (e *NodeError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.cause}
}

// sealed carries a *NodeError that wraps a network's error through
// go-redis's cluster loops, which look through wrapping for network errors
// and would send the command again: it unwraps to the sentinel alone. The
// cluster facade hands the caller the NodeError itself (unseal).
type sealed struct{ e *NodeError }

func (s sealed) Error() string { return s.e.Error() }
func (s sealed) Unwrap() error { return s.e.Err }

// As lets errors.As find the NodeError, and nothing it wraps besides Err.
func (s sealed) As(target any) bool {
	if p, ok := target.(**NodeError); ok {
		*p = s.e
		return true
	}
	return false
}

// unseal returns the NodeError err carries, if it is sealed; err otherwise.
func unseal(err error) error {
	if s, ok := err.(sealed); ok {
		return s.e
	}
	return err
}

// redirectOf parses a MOVED or ASK reply: "MOVED 3999 127.0.0.1:6381".
func redirectOf(err error) (slot int, addr string, ok bool) {
	if err == nil {
		return 0, "", false
	}
	re, ok := errors.AsType[redis.Error](err)
	if !ok {
		return 0, "", false
	}
	_, slot, addr, ok = parseRedirect(re.Error())
	return slot, addr, ok
}

// parseRedirect reads a redirect's text, "MOVED 3999 127.0.0.1:6381" or
// "ASK ...": the one reader of the two, for go-redis's errors and for the
// replies redisguard reads itself. Any other text is refused before it
// costs an allocation.
func parseRedirect(text string) (kind string, slot int, addr string, ok bool) {
	kind, rest, _ := strings.Cut(text, " ")
	if kind != "MOVED" && kind != "ASK" {
		return "", 0, "", false
	}
	s, addr, _ := strings.Cut(rest, " ")
	slot, err := strconv.Atoi(s)
	if err != nil || slot < 0 || slot >= 16384 || addr == "" || strings.Contains(addr, " ") {
		return "", 0, "", false
	}
	return kind, slot, addr, true
}

// isRedirect reports whether err is a MOVED or ASK reply.
func isRedirect(err error) bool {
	_, _, ok := redirectOf(err)
	return ok
}
