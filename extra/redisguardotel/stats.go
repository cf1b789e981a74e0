package redisguardotel

import (
	"context"
	"errors"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"

	"github.com/redisguard/redisguard"
)

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
