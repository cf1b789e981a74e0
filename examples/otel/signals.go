// Command otel shows how to observe a redisguard client with OpenTelemetry:
// go-redis's own redisotel extension, applied through Client.Instrument,
// records a span and timings for every command, blocking ones and
// pipelines included; redisguard's own signals (breaker states, recovery
// probes, slot-map refreshes, exhausted budgets, outcome-unknown failures)
// become OTel metrics read from Client.Stats and Config.OnEvent.
//
// It lives in a module of its own so that the core module does not depend
// on OpenTelemetry. Copy signals.go into your service, or run it as is:
//
//	go run . -addr localhost:6379
package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisguard/redisguard"
)

// scope names the instrumentation scope of redisguard's own metrics.
const scope = "github.com/redisguard/redisguard"

// Instrument applies redisotel's tracing and metrics to every go-redis
// client c runs, those it builds later included (the long client and the
// dedicated connections of blocking calls).
func Instrument(c *redisguard.Client, tp trace.TracerProvider, mp metric.MeterProvider) error {
	return c.Instrument(func(rdb redis.UniversalClient) error {
		return errors.Join(
			redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp)),
			redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(mp)),
		)
	})
}

// Events counts redisguard's events by kind and times slot-map refreshes.
// Pass its OnEvent as Config.OnEvent. OnEvent runs on the goroutine of the
// command that caused the event, so it only adds to OTel instruments, which
// do not block.
type Events struct {
	total   metric.Int64Counter
	refresh metric.Float64Histogram
}

// NewEvents creates the event instruments on mp.
func NewEvents(mp metric.MeterProvider) (*Events, error) {
	m := mp.Meter(scope)
	total, err := m.Int64Counter("redisguard.events",
		metric.WithDescription("redisguard events by kind (breaker-opened, probe-failed, refresh-failed, pool-exhausted, ...) and, for pool-exhausted, budget."))
	if err != nil {
		return nil, err
	}
	refresh, err := m.Float64Histogram("redisguard.topology.refresh.duration", metric.WithUnit("s"),
		metric.WithDescription("How long CLUSTER SLOTS refreshes took, by result (ok, failed)."))
	if err != nil {
		return nil, err
	}
	return &Events{total: total, refresh: refresh}, nil
}

// OnEvent records e. Use it as Config.OnEvent.
func (m *Events) OnEvent(e redisguard.Event) {
	ctx := context.Background()
	m.total.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", e.Kind.String()), attribute.String("budget", string(e.Budget))))
	switch e.Kind {
	case redisguard.EventRefreshFinished:
		m.refresh.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attribute.String("result", "ok")))
	case redisguard.EventRefreshFailed:
		m.refresh.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attribute.String("result", "failed")))
	}
}

// breakerStates are the values of NodeStats.State, each reported as its own
// 0/1 series.
var breakerStates = []string{"closed", "half-open", "open"}

// ObserveStats registers observable instruments on mp that read c.Stats at
// each collection. Stats is a snapshot that never touches the network, so a
// sick Redis cannot slow a collection down. Unregister the returned
// registration when c is closed.
func ObserveStats(c *redisguard.Client, mp metric.MeterProvider) (metric.Registration, error) {
	m := mp.Meter(scope)
	var errs []error
	gauge := func(name, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	counter := func(name, desc string) metric.Int64ObservableCounter {
		g, err := m.Int64ObservableCounter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	breaker := gauge("redisguard.node.breaker.state", "1 for the state the node's circuit breaker is in, 0 for the others.")
	opens := counter("redisguard.node.breaker.opens", "Times the node's breaker opened.")
	inFlight := gauge("redisguard.node.in_flight", "Commands and pipelines in progress on the node, including those waiting for capacity.")
	probes := counter("redisguard.node.probes", "Recovery probes sent to the node while its breaker was open.")
	probeFailures := counter("redisguard.node.probe.failures", "Recovery probes of the node that failed.")
	exhausted := counter("redisguard.node.pool.exhaustions", "Operations on the node refused with ErrPoolExhausted.")
	unknown := counter("redisguard.node.outcome_unknown", "Commands on the node that ended with ErrOutcomeUnknown.")
	longInUse := gauge("redisguard.long.in_use", "Long permits held: blocking calls in flight and open subscriptions.")
	longExhausted := counter("redisguard.long.exhaustions", "Long operations refused with ErrPoolExhausted.")
	refreshes := counter("redisguard.topology.refreshes", "CLUSTER SLOTS calls sent to a server.")
	refreshFailures := counter("redisguard.topology.refresh.failures", "CLUSTER SLOTS calls that failed.")
	slow := gauge("redisguard.node.slow", "1 while the node is marked slow beside its peers, else 0.")
	latency, err := m.Float64ObservableGauge("redisguard.node.latency", metric.WithUnit("s"),
		metric.WithDescription("The node's sampled latency (a moving average of ordinary commands)."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := c.Stats()
		for _, n := range st.Nodes {
			node := attribute.String("node", n.Addr)
			for _, state := range breakerStates {
				v := int64(0)
				if n.State == state {
					v = 1
				}
				o.ObserveInt64(breaker, v, metric.WithAttributes(node, attribute.String("state", state)))
			}
			at := metric.WithAttributes(node)
			o.ObserveInt64(opens, int64(n.Opens), at)
			o.ObserveInt64(inFlight, n.InFlight, at)
			o.ObserveInt64(probes, int64(n.Probes), at)
			o.ObserveInt64(probeFailures, int64(n.ProbeFailures), at)
			o.ObserveInt64(exhausted, int64(n.PoolExhaustions), at)
			o.ObserveInt64(unknown, int64(n.OutcomeUnknown), at)
			isSlow := int64(0)
			if n.Slow {
				isSlow = 1
			}
			o.ObserveInt64(slow, isSlow, at)
			o.ObserveFloat64(latency, n.Latency.Seconds(), at)
		}
		o.ObserveInt64(longInUse, int64(st.LongInUse))
		o.ObserveInt64(longExhausted, int64(st.LongExhaustions))
		o.ObserveInt64(refreshes, int64(st.TopologyRefreshes))
		o.ObserveInt64(refreshFailures, int64(st.TopologyRefreshFailures))
		return nil
	}, breaker, opens, inFlight, probes, probeFailures, exhausted, unknown, longInUse, longExhausted, refreshes, refreshFailures, slow, latency)
}

// setup builds the client with both halves wired in: redisotel on its
// go-redis clients, and redisguard's signals as metrics.
func setup(cfg redisguard.Config, tp trace.TracerProvider, mp metric.MeterProvider) (*redisguard.Client, metric.Registration, error) {
	events, err := NewEvents(mp)
	if err != nil {
		return nil, nil, err
	}
	cfg.OnEvent = events.OnEvent
	c, err := redisguard.NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	reg, err := ObserveStats(c, mp)
	if err == nil {
		err = Instrument(c, tp, mp)
	}
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, reg, nil
}
