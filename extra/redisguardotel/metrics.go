// Package redisguardotel observes a redisguard client with OpenTelemetry.
//
// It has two halves. NewClient stands in for redisguard.NewClient and
// reports redisguard's own signals (breaker states, recovery probes,
// exhausted budgets, outcome-unknown failures, slow marks, slot-map
// refreshes) as metrics: observable instruments read Client.Stats at each
// collection, and counters record the client's events. InstrumentTracing
// and InstrumentMetrics apply go-redis's redisotel to every go-redis client
// the redisguard client runs, for a span and timings per command:
//
//	client, reg, err := redisguardotel.NewClient(cfg, redisguardotel.WithMeterProvider(mp))
//	if err != nil { ... }
//	defer client.Close()
//	defer reg.Unregister()
//	if err := redisguardotel.InstrumentTracing(client, redisotel.WithTracerProvider(tp)); err != nil { ... }
//
// NewClient builds the client because events arrive through Config.OnEvent,
// which redisguard.NewClient copies: the counters must be in the Config
// before the client exists, and the Stats callback needs the client. One
// call leaves no order to get wrong, and an OnEvent already in the Config is
// kept.
//
// Names follow the OpenTelemetry database-client conventions where they
// have one (db.client.connection.max, db.client.connection.count,
// db.client.connection.timeouts, with db.client.connection.pool.name the
// node's address, or "long" for the budget all nodes share), and are
// redisguard.* otherwise. Per-node measurements carry server.address and
// server.port; no attribute is ever derived from credentials.
package redisguardotel

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"

	"github.com/redisguard/redisguard"
)

// ScopeName is the instrumentation scope of the metrics.
const ScopeName = "github.com/redisguard/redisguard/extra/redisguardotel"

// LongPool is the db.client.connection.pool.name of the long budget
// (Config.MaxLongConnections), which all nodes share.
const LongPool = "long"

// Option configures NewClient.
type Option interface{ apply(*config) }

type config struct {
	mp    metric.MeterProvider
	attrs []attribute.KeyValue
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets where the metrics go.
// default: otel.GetMeterProvider()
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithAttributes adds attrs to every measurement: with two clients on one
// MeterProvider, an attribute that names each keeps their series apart.
// default: none
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.attrs = append(c.attrs, attrs...) })
}

// NewClient is redisguard.NewClient with the client's signals reported as
// metrics. Its events are recorded from the first one (those reported while
// NewClient runs included), then handed to cfg.OnEvent if it is set.
// Unregister the returned Registration when the client is closed; it stops
// the instruments that read Client.Stats.
func NewClient(cfg redisguard.Config, opts ...Option) (*redisguard.Client, metric.Registration, error) {
	conf := config{mp: otel.GetMeterProvider()}
	for _, o := range opts {
		o.apply(&conf)
	}
	meter := conf.mp.Meter(ScopeName)
	ev, err := newEvents(meter, conf.attrs)
	if err != nil {
		return nil, nil, err
	}
	next := cfg.OnEvent
	cfg.OnEvent = func(e redisguard.Event) {
		ev.record(e) // first: it cannot panic, next might
		if next != nil {
			next(e)
		}
	}
	c, err := redisguard.NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	reg, err := observeStats(meter, c, conf.attrs)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, reg, nil
}

// nodeAttrs names the node addr as the conventions do. An address that is
// not host:port (sentinel-master:<name>) is server.address alone. The slice
// is clipped, so an append to it never writes into another's.
func nodeAttrs(addr string, more ...attribute.KeyValue) []attribute.KeyValue {
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		return slices.Clip(slices.Concat([]attribute.KeyValue{semconv.ServerAddress(addr)}, more))
	}
	return slices.Clip(slices.Concat([]attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(port)}, more))
}

// events records the client's events. record runs on the goroutine of the
// command that caused the event, so its attribute sets are built once per
// kind and node, and reused.
type events struct {
	total   metric.Int64Counter
	refresh metric.Float64Histogram
	outage  metric.Float64Histogram

	attrs                  []attribute.KeyValue // the user's, on every measurement
	refreshOK, refreshFail metric.MeasurementOption
	outageAt               metric.MeasurementOption
	sets                   sync.Map // eventKey -> metric.MeasurementOption
}

type eventKey struct {
	kind redisguard.EventKind
	addr string
}

func newEvents(m metric.Meter, attrs []attribute.KeyValue) (*events, error) {
	total, err1 := m.Int64Counter("redisguard.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events the client reported, by redisguard.event.kind (breaker-opened, probe-failed, node-slow, pool-exhausted, subscription-moved, ...) and node."))
	refresh, err2 := m.Float64Histogram("redisguard.topology.refresh.duration", metric.WithUnit("s"),
		metric.WithDescription("How long CLUSTER SLOTS refreshes took, by redisguard.refresh.result (ok, failed)."),
		metric.WithExplicitBucketBoundaries(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
	outage, err3 := m.Float64Histogram("redisguard.node.outage.duration", metric.WithUnit("s"),
		metric.WithDescription("How long nodes were out, from the opening of a breaker to its closing."),
		metric.WithExplicitBucketBoundaries(.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	with := func(more ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(slices.Concat(attrs, more)...))
	}
	return &events{
		total: total, refresh: refresh, outage: outage, attrs: attrs,
		refreshOK:   with(attribute.String("redisguard.refresh.result", "ok")),
		refreshFail: with(attribute.String("redisguard.refresh.result", "failed")),
		outageAt:    with(),
	}, nil
}

func (ev *events) record(e redisguard.Event) {
	ctx := context.Background()
	k := eventKey{e.Kind, e.Addr}
	at, ok := ev.sets.Load(k)
	if !ok {
		kv := slices.Concat(ev.attrs, []attribute.KeyValue{attribute.String("redisguard.event.kind", e.Kind.String())})
		if e.Addr != "" {
			kv = nodeAttrs(e.Addr, kv...)
		}
		at, _ = ev.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	}
	ev.total.Add(ctx, 1, at.(metric.MeasurementOption))
	switch e.Kind {
	case redisguard.EventRefreshFinished:
		ev.refresh.Record(ctx, e.Duration.Seconds(), ev.refreshOK)
	case redisguard.EventRefreshFailed:
		ev.refresh.Record(ctx, e.Duration.Seconds(), ev.refreshFail)
	case redisguard.EventBreakerClosed:
		ev.outage.Record(ctx, e.Duration.Seconds(), ev.outageAt)
	}
}

// breakerStates are the values of NodeStats.State, each its own 0/1 point.
var breakerStates = []string{"closed", "half-open", "open"}

// observeStats registers the instruments that read c.Stats at each
// collection. Stats never touches the network, so a sick Redis cannot slow a
// collection down.
func observeStats(m metric.Meter, c *redisguard.Client, attrs []attribute.KeyValue) (metric.Registration, error) {
	var errs []error
	var all []metric.Observable
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs, all = append(errs, err), append(all, g)
		return g
	}
	upDown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		g, err := m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs, all = append(errs, err), append(all, g)
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		g, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs, all = append(errs, err), append(all, g)
		return g
	}
	breaker := gauge("redisguard.node.breaker.state", "1",
		"1 for the state the node's circuit breaker is in (redisguard.breaker.state: closed, half-open, open), 0 for the others.")
	failures := gauge("redisguard.node.consecutive_failures", "{failure}",
		"Consecutive connection failures or timeouts on the node, towards NodeFailureThreshold.")
	opens := counter("redisguard.node.breaker.opens", "{open}", "Times the node's breaker opened.")
	inFlight := upDown("redisguard.node.in_flight", "{operation}",
		"Commands and pipelines in progress on the node, including those waiting for capacity.")
	unknown := counter("redisguard.node.outcome_unknown", "{command}",
		"Commands on the node that ended with ErrOutcomeUnknown: their connection failed after they may have run.")
	probes := counter("redisguard.node.probes", "{probe}", "Recovery probes sent to the node while its breaker was open.")
	probeFailures := counter("redisguard.node.probe.failures", "{probe}", "Recovery probes of the node that failed.")
	slow := gauge("redisguard.node.slow", "1", "1 while the node is marked slow beside its peers, else 0.")
	replicaReads := counter("redisguard.node.replica.reads", "{read}", "Reads the node served as a replica (Config.ReadFrom).")
	refreshes := counter("redisguard.topology.refreshes", "{refresh}", "CLUSTER SLOTS calls sent to a server.")
	refreshFailures := counter("redisguard.topology.refresh.failures", "{refresh}", "CLUSTER SLOTS calls that failed.")
	divergence := counter("redisguard.divergence.decisions", "{decision}",
		"Decisions on commands that met a MOVED cycle, by redisguard.divergence.decision (converging, recovered, failover, slot-map-corruption).")
	moves := counter("redisguard.subscription.moves", "{move}",
		"Subscriptions re-established on a new connection; messages published meanwhile may have been missed.")
	latency, err := m.Float64ObservableGauge("redisguard.node.latency", metric.WithUnit("s"),
		metric.WithDescription("The node's sampled latency of ordinary commands; absent before the first sample."))
	errs, all = append(errs, err), append(all, latency)
	lastRefresh, err := m.Float64ObservableGauge("redisguard.topology.refresh.last_duration", metric.WithUnit("s"),
		metric.WithDescription("How long the last CLUSTER SLOTS call took."))
	errs, all = append(errs, err), append(all, lastRefresh)
	// The conventions' own constructors fix the names, units and
	// descriptions; the SDK takes only the instruments they wrap.
	connMaxConv, err := dbconv.NewClientConnectionMaxObservable(m)
	connMax := connMaxConv.Inst()
	errs, all = append(errs, err), append(all, connMax)
	connCountConv, err := dbconv.NewClientConnectionCountObservable(m)
	connCount := connCountConv.Inst()
	errs, all = append(errs, err), append(all, connCount)
	timeoutsConv, err := dbconv.NewClientConnectionTimeoutsObservable(m)
	timeouts := timeoutsConv.Inst()
	errs, all = append(errs, err), append(all, timeouts)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		with := func(kv ...attribute.KeyValue) metric.ObserveOption {
			return metric.WithAttributes(slices.Concat(kv, attrs)...)
		}
		st := c.Stats()
		for _, n := range st.Nodes {
			node := nodeAttrs(n.Addr)
			at := with(node...)
			for _, state := range breakerStates {
				o.ObserveInt64(breaker, int01(n.State == state), with(append(node, attribute.String("redisguard.breaker.state", state))...))
			}
			o.ObserveInt64(failures, int64(n.ConsecutiveFailures), at)
			o.ObserveInt64(opens, int64(n.Opens), at)
			o.ObserveInt64(inFlight, n.InFlight, at)
			o.ObserveInt64(unknown, int64(n.OutcomeUnknown), at)
			o.ObserveInt64(probes, int64(n.Probes), at)
			o.ObserveInt64(probeFailures, int64(n.ProbeFailures), at)
			o.ObserveInt64(slow, int01(n.Slow), at)
			o.ObserveInt64(replicaReads, int64(n.ReplicaReads), at)
			if n.Latency > 0 { // zero is "no sample yet", not a fast node
				o.ObserveFloat64(latency, n.Latency.Seconds(), at)
			}
			pool := with(append(node, semconv.DBClientConnectionPoolName(n.Addr))...)
			o.ObserveInt64(connMax, int64(st.MaxConnections), pool)
			o.ObserveInt64(timeouts, int64(n.PoolExhaustions), pool)
		}
		long := semconv.DBClientConnectionPoolName(LongPool)
		o.ObserveInt64(connMax, int64(st.MaxLongConnections), with(long))
		o.ObserveInt64(connCount, int64(st.LongInUse), with(long, semconv.DBClientConnectionStateUsed))
		o.ObserveInt64(timeouts, int64(st.LongExhaustions), with(long))
		o.ObserveInt64(refreshes, int64(st.TopologyRefreshes), with())
		o.ObserveInt64(refreshFailures, int64(st.TopologyRefreshFailures), with())
		o.ObserveFloat64(lastRefresh, st.LastRefreshDuration.Seconds(), with())
		for _, d := range []struct {
			name string
			n    uint64
		}{
			{"converging", st.Divergence.Converging},
			{"recovered", st.Divergence.Recovered},
			{"failover", st.Divergence.Failover},
			{"slot-map-corruption", st.Divergence.SlotMapCorruption},
		} {
			o.ObserveInt64(divergence, int64(d.n), with(attribute.String("redisguard.divergence.decision", d.name)))
		}
		o.ObserveInt64(moves, int64(st.SubscriptionMoves), with())
		return nil
	}, all...)
}

func int01(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
