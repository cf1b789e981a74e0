package redisguard

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// eventLog collects what OnEvent receives and what the Logger writes.
type eventLog struct {
	mu      sync.Mutex
	events  []Event   // guarded by mu
	records []logLine // guarded by mu
}

type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *eventLog) onEvent(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) kinds() []EventKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []EventKind
	for _, e := range l.events {
		out = append(out, e.Kind)
	}
	return out
}

func (l *eventLog) all() ([]Event, []logLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...), append([]logLine(nil), l.records...)
}

// logger returns a *slog.Logger that records into l at every level.
func (l *eventLog) logger() *slog.Logger { return slog.New(logHandler{l}) }

type logHandler struct{ l *eventLog }

func (logHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h logHandler) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.String()
		return true
	})
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.records = append(h.l.records, line)
	return nil
}
func (h logHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logHandler) WithGroup(string) slog.Handler      { return h }

func TestEventKindString(t *testing.T) {
	for _, tc := range []struct {
		k    EventKind
		want string
	}{
		{EventBreakerOpened, "breaker-opened"},
		{EventBreakerHalfOpen, "breaker-half-open"},
		{EventBreakerClosed, "breaker-closed"},
		{EventRefreshStarted, "refresh-started"},
		{EventRefreshFinished, "refresh-finished"},
		{EventRefreshFailed, "refresh-failed"},
		{EventPoolExhausted, "pool-exhausted"},
		{EventDivergence, "divergence"},
		{0, "EventKind(0)"},
		{200, "EventKind(200)"},
	} {
		assert.Equal(t, tc.want, tc.k.String())
	}
}

func TestEventStringAndJSON(t *testing.T) {
	for _, tc := range []struct {
		e    Event
		want string
	}{
		{Event{Kind: EventBreakerOpened, Addr: "10.0.0.1:6379"}, "breaker-opened addr=10.0.0.1:6379"},
		{Event{Kind: EventRefreshFailed, Duration: 3 * time.Millisecond, Err: "i/o timeout"}, `refresh-failed duration=3ms err="i/o timeout"`},
		{Event{Kind: EventPoolExhausted, Addr: "a:1", Budget: BudgetOrdinary}, "pool-exhausted addr=a:1 budget=ordinary"},
		{Event{Kind: EventPoolExhausted, Budget: BudgetLong}, "pool-exhausted budget=long"},
		{Event{Kind: EventDivergence, Slot: 0, Decision: "converging", Duration: time.Second}, "divergence slot=0 decision=converging duration=1s"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.e.String())
			body, err := json.Marshal(tc.e)
			require.NoError(t, err)
			var back Event
			require.NoError(t, json.Unmarshal(body, &back))
			assert.Equal(t, tc.e, back, "round trip through JSON: %s", body)
		})
	}
}

// A node's breaker going open, half-open and closed again is reported to
// OnEvent and to the log, at the levels an operator needs, with the node, the
// client's clock and, on recovery, how long the node was out. Failed
// recovery probes are reported at debug level.
func TestBreakerEvents(t *testing.T) {
	srv := miniredis.RunT(t)
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	rec := &eventLog{}
	c, err := newClient(Config{
		Addrs: []string{srv.Addr()}, NodeFailureThreshold: 2,
		DialTimeout: time.Second, ReadTimeout: time.Second,
		OnEvent: rec.onEvent, Logger: rec.logger(),
	}, clk)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Empty(t, rec.kinds(), "a healthy command reports nothing")

	srv.Close() // refused dials count as failures
	for range 2 {
		require.Error(t, c.Get(ctx, "k").Err())
	}
	require.ErrorIs(t, c.Get(ctx, "k").Err(), ErrNodeUnavailable)
	require.Equal(t, []EventKind{EventBreakerOpened}, breakerKinds(rec.kinds()))
	redistest.WaitFor(t, 10*time.Second, "a failed probe", func() error {
		if !slices.Contains(rec.kinds(), EventProbeFailed) {
			return errors.New("no probe-failed event")
		}
		return nil
	})

	require.NoError(t, srv.Restart())
	redistest.WaitFor(t, 10*time.Second, "a probe to reach the restarted server", func() error {
		if !slices.Contains(rec.kinds(), EventBreakerHalfOpen) {
			return errors.New("no half-open event")
		}
		return nil
	})
	clk.Advance(time.Minute)
	require.NoError(t, c.Get(ctx, "k").Err())
	require.Equal(t, []EventKind{EventBreakerOpened, EventBreakerHalfOpen, EventBreakerClosed}, breakerKinds(rec.kinds()))

	events, lines := rec.all()
	require.Len(t, lines, len(events))
	var probeFailed, breakers []int
	for i, e := range events {
		assert.Equal(t, srv.Addr(), e.Addr)
		assert.Equal(t, e.Kind.message(), lines[i].msg)
		assert.Equal(t, e.Kind.String(), lines[i].attrs["event"])
		assert.Equal(t, srv.Addr(), lines[i].attrs["node"])
		if e.Kind == EventProbeFailed {
			probeFailed = append(probeFailed, i)
			assert.Equal(t, slog.LevelDebug, lines[i].level)
			assert.Contains(t, e.Err, "connection refused")
		} else {
			breakers = append(breakers, i)
		}
	}
	assert.Equal(t, uint64(len(probeFailed)), c.Stats().Nodes[0].ProbeFailures)
	assert.Equal(t, uint64(len(probeFailed)+1), c.Stats().Nodes[0].Probes)

	wantLevels := []slog.Level{slog.LevelWarn, slog.LevelInfo, slog.LevelInfo}
	wantFrom := []string{"closed", "open", "half-open"}
	wantTime := []time.Time{clk.Now().Add(-time.Minute), clk.Now().Add(-time.Minute), clk.Now()}
	wantDuration := []time.Duration{0, 0, time.Minute}
	require.Len(t, breakers, 3)
	for j, i := range breakers {
		e := events[i]
		assert.Equal(t, wantTime[j], e.Time, "event time comes from the client's clock")
		assert.Equal(t, wantDuration[j], e.Duration, "%v: how long the node was out", e.Kind)
		assert.Zero(t, e.Err+string(e.Budget)+e.Decision)
		assert.Equal(t, wantLevels[j], lines[i].level, "log level of %v", e.Kind)
		assert.Equal(t, wantFrom[j], lines[i].attrs["from"])
	}
}

// breakerKinds drops the probe failures from kinds: how many there are
// depends on timing.
func breakerKinds(kinds []EventKind) []EventKind {
	return slices.DeleteFunc(kinds, func(k EventKind) bool { return k == EventProbeFailed })
}

// A command that waits PoolTimeout for a connection is reported once, with
// the node and the budget, and counted in Stats.
func TestPoolExhaustedEvent(t *testing.T) {
	srv := miniredis.RunT(t)
	proxy, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	rec := &eventLog{}
	c := newTestClient(t, Config{
		Addrs: []string{proxy.Addr()}, MaxConnections: 1, PoolTimeout: 100 * time.Millisecond,
		ReadTimeout: 2 * time.Second, OnEvent: rec.onEvent, Logger: rec.logger(),
	})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Ping(ctx).Err())

	// One command hangs on the only connection; the next finds none free.
	require.NoError(t, proxy.SetMode(faultproxy.Blackhole))
	hung := make(chan error, 1)
	go func() { hung <- c.Get(ctx, "k").Err() }()
	// Counted in flight from when it asks the pool for the connection:
	// wait until it also holds it, or the loop below could take it first.
	require.Eventually(t, func() bool {
		return c.Stats().Nodes[0].InFlight == 1 && c.PoolStats().IdleConns == 0
	}, 5*time.Second, time.Millisecond)
	st := c.Stats()
	assert.Equal(t, 1, st.MaxConnections)
	assert.Equal(t, 1, st.MaxLongConnections)

	for range 3 {
		err = c.Get(ctx, "k").Err()
		require.ErrorIs(t, err, ErrPoolExhausted)
	}
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "a")
		p.Get(ctx, "b")
		return nil
	})
	require.ErrorIs(t, err, ErrPoolExhausted)
	require.NoError(t, proxy.SetMode(faultproxy.Pass))
	require.Error(t, <-hung, "the hung command times out")

	events, lines := rec.all()
	require.Len(t, events, 4, "one event per operation, the pipeline included: %v", events)
	for _, e := range events {
		assert.Equal(t, Event{Kind: EventPoolExhausted, Addr: proxy.Addr(), Budget: BudgetOrdinary, Time: e.Time}, e)
	}
	// The log gets one line a second: an overloaded service must not also
	// drown in its own warnings.
	require.Len(t, lines, 1, "%v", lines)
	assert.Equal(t, slog.LevelWarn, lines[0].level)
	assert.Equal(t, "ordinary", lines[0].attrs["budget"])

	st = c.Stats()
	assert.Equal(t, uint64(4), st.PoolExhaustions)
	assert.Equal(t, uint64(4), st.Nodes[0].PoolExhaustions)
	assert.Zero(t, st.Nodes[0].InFlight)
}

// A panicking OnEvent is the observer's bug: the command is unaffected and
// the panic is logged.
func TestOnEventPanicIsRecovered(t *testing.T) {
	srv := miniredis.RunT(t)
	rec := &eventLog{}
	clk := clock.NewFake(time.Now())
	c, err := newClient(Config{
		Addrs: []string{srv.Addr()}, NodeFailureThreshold: 1, NodeRecoveryTime: time.Minute,
		OnEvent: func(Event) { panic("observer bug") }, Logger: rec.logger(),
	}, clk)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t, 10*time.Second)
	srv.Close()
	err = c.Get(ctx, "k").Err()
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNodeUnavailable, "the failing command itself gets its own error")
	require.ErrorIs(t, c.Get(ctx, "k").Err(), ErrNodeUnavailable, "the breaker opened despite the panic")

	_, lines := rec.all()
	var found bool
	for _, l := range lines {
		if l.level == slog.LevelError && strings.Contains(l.msg, "OnEvent panicked") {
			found = l.attrs["panic"] == "observer bug" && l.attrs["event"] == "breaker-opened"
		}
	}
	assert.True(t, found, "panic not logged: %v", lines)
}

// The divergence engineer's and the admission engineer's calls, as they
// will be made: what each kind logs, and at which level.
func TestEmitLevelsAndDetail(t *testing.T) {
	const password = "pa55word-x"
	for _, tc := range []struct {
		name  string
		e     Event
		extra []slog.Attr
		level slog.Level
		want  map[string]string
	}{
		{name: "converging is routine", e: Event{Kind: EventDivergence, Slot: 42, Decision: "converging", Duration: 30 * time.Millisecond, Addr: "n1:7000"},
			extra: []slog.Attr{slog.String("views", "n1 says n2")}, level: slog.LevelInfo,
			want: map[string]string{"slot": "42", "decision": "converging", "node": "n1:7000", "duration": "30ms", "views": "n1 says n2"}},
		{name: "a failing decision warns", e: Event{Kind: EventDivergence, Slot: 7, Decision: "failover", Err: "redisguard: cluster failover in progress: " + password},
			level: slog.LevelWarn, want: map[string]string{"slot": "7", "decision": "failover", "err": "redisguard: cluster failover in progress: [redacted]"}},
		{name: "long budget", e: Event{Kind: EventPoolExhausted, Budget: BudgetLong},
			level: slog.LevelWarn, want: map[string]string{"budget": "long", "event": "pool-exhausted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &eventLog{}
			c := newTestClient(t, Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}, Password: password, OnEvent: rec.onEvent, Logger: rec.logger()})
			c.emit(tc.e, tc.extra...)
			events, lines := rec.all()
			require.Len(t, events, 1)
			require.Len(t, lines, 1)
			assert.False(t, events[0].Time.IsZero())
			assert.NotContains(t, events[0].Err, password)
			assert.Equal(t, tc.level, lines[0].level)
			for k, v := range tc.want {
				assert.Equal(t, v, lines[0].attrs[k], "attr %s", k)
			}
		})
	}
}

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1000, 0)
	for _, step := range []struct {
		at       time.Duration
		ok       bool
		wantHeld uint64
	}{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{500 * time.Millisecond, false, 0},
		{eventLogInterval - 1, false, 0},
		{eventLogInterval, true, 3},
		{eventLogInterval + 1, false, 0},
		{10 * eventLogInterval, true, 1},
	} {
		ok, held := l.allow(t0.Add(step.at))
		assert.Equal(t, step.ok, ok, "at %v", step.at)
		assert.Equal(t, step.wantHeld, held, "held back before %v", step.at)
	}
}
