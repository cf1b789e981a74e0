package redisguard

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventBreakerOpened: a node failed NodeFailureThreshold times in a row
	// (or failed a command right after its recovery probe was answered),
	// or it left every command sent to it unanswered for HungNodeAfter
	// (Decision DecisionSilent, Duration the silence); its commands now
	// fail fast with ErrNodeUnavailable while the client probes it on
	// connections of its own. Addr is the node.
	EventBreakerOpened EventKind = iota + 1
	// EventBreakerHalfOpen: a recovery probe was answered; the node's
	// commands are let through again, the first answered one closes the
	// breaker and the first failure opens it again. Addr is the node.
	EventBreakerHalfOpen
	// EventBreakerClosed: the node answered a command after its probe; it
	// serves normally. Addr is the node; Duration is how long it was out,
	// from the opening of its breaker.
	EventBreakerClosed
	// EventRefreshStarted: a CLUSTER SLOTS is about to be sent (Cluster
	// mode; refreshes answered from the shared, rate-limited map send
	// nothing and report nothing). Exactly one EventRefreshFinished or
	// EventRefreshFailed follows it.
	EventRefreshStarted
	// EventRefreshFinished: the slot map was fetched. Duration is how long
	// that took.
	EventRefreshFinished
	// EventRefreshFailed: the fetch failed, or the node's breaker refused
	// it; go-redis asks another node. Duration and Err say how long and why.
	EventRefreshFailed
	// EventPoolExhausted: a command waited PoolTimeout for capacity and
	// failed with ErrPoolExhausted; nothing was sent. Budget says which
	// budget ran dry; Addr is the node for the ordinary budget, which is
	// per node, and empty for the long budget, which all nodes share.
	EventPoolExhausted
	// EventDivergence: a command met a MOVED cycle on Slot and redisguard
	// decided what to do (Decision). Duration is the time since the first
	// cycle on the slot; Addr is the claimant with the highest configEpoch,
	// if any; Err is the error the command fails with, if it fails.
	EventDivergence
	// EventProbeFailed: a recovery probe of a node whose breaker is open
	// failed; the next follows later (see Config.NodeRecoveryTime). Addr
	// and Err say which node and why. Logged at debug level.
	EventProbeFailed
	// EventNodeSlow: the node answers far slower than its peers and is
	// marked slow (see Config.SlowNodeFactor): few callers may wait on it
	// at once, and the others get ErrNodeSlow. Addr is the node; Duration
	// its latency; PeerLatency the median of its peers'.
	EventNodeSlow
	// EventNodeSlowEnded: the node's slow mark ended. Decision says why:
	// "recovered" (it has been fast again for a while) or "expired" (its
	// mark ran out; it is marked again, for longer, if it is still slow).
	// Duration and PeerLatency are as in EventNodeSlow.
	EventNodeSlowEnded
	// EventSubscriptionMoved: a subscription whose connection broke, or
	// was closed because its node stopped answering, subscribed again on a
	// new connection. Messages published during the Duration before Time
	// may have been missed: pub/sub is at-most-once. Addr is the node it
	// left, To the node it is on now, Channels what it is subscribed to.
	EventSubscriptionMoved
	// EventReplicaReadsStarted: with ReadFromMasterPreferred, a master's
	// breaker is open and a replica of its shard served the first of its
	// reads. Addr is the master; the log names the replica.
	EventReplicaReadsStarted
	// EventReplicaReadsStopped: the master's reads go to it again. Addr is
	// the master; Duration is how long a replica served them.
	EventReplicaReadsStopped
)

func (k EventKind) String() string {
	switch k {
	case EventBreakerOpened:
		return "breaker-opened"
	case EventBreakerHalfOpen:
		return "breaker-half-open"
	case EventBreakerClosed:
		return "breaker-closed"
	case EventRefreshStarted:
		return "refresh-started"
	case EventRefreshFinished:
		return "refresh-finished"
	case EventRefreshFailed:
		return "refresh-failed"
	case EventPoolExhausted:
		return "pool-exhausted"
	case EventDivergence:
		return "divergence"
	case EventProbeFailed:
		return "probe-failed"
	case EventNodeSlow:
		return "node-slow"
	case EventNodeSlowEnded:
		return "node-slow-ended"
	case EventSubscriptionMoved:
		return "subscription-moved"
	case EventReplicaReadsStarted:
		return "replica-reads-started"
	case EventReplicaReadsStopped:
		return "replica-reads-stopped"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// DecisionSilent is the Decision of an EventBreakerOpened whose node left
// every command sent to it unanswered for Config.HungNodeAfter.
const DecisionSilent = "silent"

// Budget names a capacity budget (see Config.MaxConnections and
// Config.MaxLongConnections).
type Budget string

const (
	// BudgetOrdinary is a node's MaxConnections.
	BudgetOrdinary Budget = "ordinary"
	// BudgetLong is the MaxLongConnections permits that blocking commands
	// and subscriptions share across nodes.
	BudgetLong Budget = "long"
)

// Event is one thing worth telling an operator about: a breaker transition,
// a topology refresh, a command refused for lack of capacity, a decision
// about a contested slot. It is a plain value, safe to keep, compare and
// marshal. Only the fields the Kind documents are set; the others are zero.
//
// An Event never contains a password: Err has the configured passwords
// removed, and no other field is derived from credentials.
type Event struct {
	Kind EventKind `json:"kind"`
	// Time is when it happened, by the client's clock.
	Time time.Time `json:"time"`
	// Addr is the node (host:port, or "sentinel-master:<name>" for a
	// Sentinel-managed master whose address is not known yet).
	Addr string `json:"addr,omitempty"`
	// Duration is how long a refresh took, how long a slot has been
	// contested, how long a recovered node was out, or the window in which
	// a moved subscription may have missed messages.
	Duration time.Duration `json:"duration_ns,omitempty"`
	// Err is the failure, as text.
	Err string `json:"err,omitempty"`
	// Budget is the budget that ran dry (EventPoolExhausted).
	Budget Budget `json:"budget,omitempty"`
	// Slot is the contested hash slot (EventDivergence).
	Slot int `json:"slot,omitempty"`
	// Decision is what was decided about the slot (EventDivergence):
	// "converging" (wait and retry), "failover" (fail with
	// ErrClusterFailover) or "slot-map-corruption" (fail with
	// ErrSlotMapCorruption); why a slow mark ended (EventNodeSlowEnded);
	// DecisionSilent on a breaker that opened because its node went silent
	// (EventBreakerOpened).
	Decision string `json:"decision,omitempty"`
	// PeerLatency is the median latency of the other nodes
	// (EventNodeSlow, EventNodeSlowEnded).
	PeerLatency time.Duration `json:"peer_latency_ns,omitempty"`
	// To is the node a subscription moved to (EventSubscriptionMoved).
	To string `json:"to,omitempty"`
	// Channels is what a moved subscription is subscribed to, sorted and
	// comma-separated: "channel a, pattern p*, shard channel s"
	// (EventSubscriptionMoved).
	Channels string `json:"channels,omitempty"`
}

// String renders the event as one line, as a log would.
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	add := func(k, v string) {
		if v != "" {
			b.WriteString(" ")
			b.WriteString(k)
			b.WriteString("=")
			b.WriteString(v)
		}
	}
	add("addr", e.Addr)
	add("to", e.To)
	add("budget", string(e.Budget))
	if e.Kind == EventDivergence {
		add("slot", strconv.Itoa(e.Slot))
	}
	add("decision", e.Decision)
	if e.Channels != "" {
		add("channels", strconv.Quote(e.Channels))
	}
	if e.Duration != 0 {
		add("duration", e.Duration.String())
	}
	if e.PeerLatency != 0 {
		add("peer_latency", e.PeerLatency.String())
	}
	if e.Err != "" {
		add("err", strconv.Quote(e.Err))
	}
	return b.String()
}

// level is the slog level an event is logged at: what an operator must act
// on is a warning, routine recovery is info, and the refresh chatter is
// debug.
func (e Event) level() slog.Level {
	switch e.Kind {
	case EventBreakerOpened, EventRefreshFailed, EventPoolExhausted, EventNodeSlow, EventSubscriptionMoved:
		return slog.LevelWarn
	case EventRefreshStarted, EventRefreshFinished, EventProbeFailed:
		return slog.LevelDebug
	case EventDivergence:
		if e.Err != "" {
			return slog.LevelWarn
		}
		return slog.LevelInfo
	}
	return slog.LevelInfo
}

// message is the log message for the event's kind.
func (k EventKind) message() string {
	switch k {
	case EventBreakerOpened:
		return "redisguard: node breaker opened"
	case EventBreakerHalfOpen:
		return "redisguard: node answered its probe, traffic let through"
	case EventBreakerClosed:
		return "redisguard: node recovered, breaker closed"
	case EventRefreshStarted:
		return "redisguard: topology refresh started"
	case EventRefreshFinished:
		return "redisguard: topology refreshed"
	case EventRefreshFailed:
		return "redisguard: topology refresh failed"
	case EventPoolExhausted:
		return "redisguard: pool exhausted"
	case EventDivergence:
		return "redisguard: redirect cycle on slot"
	case EventProbeFailed:
		return "redisguard: recovery probe failed"
	case EventNodeSlow:
		return "redisguard: node marked slow"
	case EventNodeSlowEnded:
		return "redisguard: node no longer marked slow"
	case EventSubscriptionMoved:
		return "redisguard: subscription moved, messages may have been missed"
	case EventReplicaReadsStarted:
		return "redisguard: master unavailable, a replica serves its reads"
	case EventReplicaReadsStopped:
		return "redisguard: master serves its reads again"
	}
	return "redisguard: event"
}

// attrs are the event's fields as log attributes, the set ones only.
func (e Event) attrs(extra []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, 0, 6+len(extra))
	out = append(out, slog.String("event", e.Kind.String()))
	if e.Addr != "" {
		out = append(out, slog.String("node", e.Addr))
	}
	if e.To != "" {
		out = append(out, slog.String("to", e.To))
	}
	if e.Budget != "" {
		out = append(out, slog.String("budget", string(e.Budget)))
	}
	if e.Channels != "" {
		out = append(out, slog.String("channels", e.Channels))
	}
	if e.Kind == EventDivergence {
		out = append(out, slog.Int("slot", e.Slot), slog.String("decision", e.Decision))
	}
	if e.Kind == EventNodeSlowEnded || (e.Kind == EventBreakerOpened && e.Decision != "") {
		out = append(out, slog.String("decision", e.Decision))
	}
	if e.Duration != 0 {
		out = append(out, slog.Duration("duration", e.Duration))
	}
	if e.PeerLatency != 0 {
		out = append(out, slog.Duration("peer_latency", e.PeerLatency))
	}
	if e.Err != "" {
		out = append(out, slog.String("err", e.Err))
	}
	return append(out, extra...)
}

// emit reports e: it logs it through Config.Logger and hands it to
// Config.OnEvent. attrs go to the log record only, for detail that is
// useful to a reader but too unwieldy for an Event field (the views behind a
// divergence decision, say).
//
// It runs on the goroutine that caused the event, usually a caller's command:
// OnEvent's promise to return quickly is what keeps the command path fast.
func (c *core) emit(e Event, attrs ...slog.Attr) {
	e = c.stamp(e)
	c.logEvent(e, 0, attrs)
	c.deliver(e)
}

// emitLimited is emit for events that may come once per command (pool
// exhaustion under overload): OnEvent sees every one, but the log gets at
// most one line per eventLogInterval from lim, which counts the lines it
// held back and reports them with the next one.
func (c *core) emitLimited(e Event, lim *logLimiter) {
	e = c.stamp(e)
	if ok, held := lim.allow(e.Time); ok {
		c.logEvent(e, held, nil)
	}
	c.deliver(e)
}

func (c *core) stamp(e Event) Event {
	if e.Time.IsZero() {
		e.Time = c.clock.Now()
	}
	if e.Err != "" {
		e.Err = c.redact(e.Err)
	}
	return e
}

func (c *core) logEvent(e Event, held uint64, extra []slog.Attr) {
	ctx := context.Background()
	level := e.level()
	if !c.log.Enabled(ctx, level) {
		return
	}
	if held > 0 {
		extra = append(extra, slog.Uint64("similar_not_logged", held))
	}
	c.log.LogAttrs(ctx, level, e.Kind.message(), e.attrs(extra)...)
}

// deliver calls Config.OnEvent. A panic in it is recovered and logged at
// error level: OnEvent also runs on go-redis's background goroutines (slot
// map reloads), where a panic could not be caught by anyone and would end
// the process, and an observer must never take the service down.
func (c *core) deliver(e Event) {
	f := c.cfg.OnEvent
	if f == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("redisguard: OnEvent panicked; event dropped",
				"event", e.Kind.String(), "panic", fmt.Sprint(r))
		}
	}()
	f(e)
}

// redact removes the configured passwords from text: events, logs and
// health reports are often shipped off the host. go-redis does not put
// passwords in its errors, but a server's reply or a future version might
// quote one.
func (c *core) redact(text string) string {
	for _, s := range []string{c.cfg.Password, c.cfg.SentinelPassword} {
		if s != "" {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
	}
	return text
}

// eventLogInterval is the least spacing of log lines from one logLimiter.
const eventLogInterval = time.Second

// logLimiter lets one log line through per eventLogInterval and counts the
// rest. The zero value is ready. It is lock-free: it sits on the path of
// commands that have just failed, possibly thousands at once.
type logLimiter struct {
	next atomic.Int64  // unix ns before which lines are held back
	held atomic.Uint64 // lines held back since the last one logged
}

// allow reports whether a line may be logged at now, and how many were held
// back before it.
func (l *logLimiter) allow(now time.Time) (ok bool, held uint64) {
	ns := now.UnixNano()
	next := l.next.Load()
	if ns < next || !l.next.CompareAndSwap(next, ns+int64(eventLogInterval)) {
		l.held.Add(1)
		return false, 0
	}
	return true, l.held.Swap(0)
}
