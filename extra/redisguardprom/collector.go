// Package redisguardprom exports a redisguard client's own signals to
// Prometheus: the guard state of Client.Stats, read on every scrape, and
// counts of the events the client reports.
//
//	client, metrics, err := redisguardprom.NewClient(cfg)
//	if err != nil { ... }
//	defer client.Close()
//	prometheus.MustRegister(metrics)
//
// NewClient stands in for redisguard.NewClient because the two halves are
// wired at different moments: events arrive through Config.OnEvent, which
// redisguard.NewClient copies, so the counter must be in the Config before
// the client exists, while Stats needs the client. One call that does both
// leaves no order to get wrong, and an OnEvent already in the Config is
// kept.
//
// Per-node series carry a node label, the node's address as the client names
// it (host:port, or sentinel-master:<name> before a Sentinel master is
// resolved); no label is ever derived from credentials. To register the
// metrics of two clients in one registry, tell them apart with a label:
//
//	prometheus.WrapRegistererWith(prometheus.Labels{"client": "cache"}, reg).MustRegister(metrics)
package redisguardprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisguard/redisguard"
)

// NewClient is redisguard.NewClient with a Collector of the client's signals.
// The Collector counts the events of cfg's client from its first one
// (those reported while NewClient runs included), then calls cfg.OnEvent if
// it is set. Register the Collector with a prometheus.Registerer; unregister
// it when the client is closed.
func NewClient(cfg redisguard.Config) (*redisguard.Client, *Collector, error) {
	m := newCollector()
	next := cfg.OnEvent
	cfg.OnEvent = func(e redisguard.Event) {
		m.count(e) // first: it cannot panic, next might
		if next != nil {
			next(e)
		}
	}
	c, err := redisguard.NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	m.client = c
	return c, m, nil
}

// Collector is a prometheus.Collector of one client's signals. Build it with
// NewClient.
type Collector struct {
	// client is set once, before NewClient returns the Collector; count,
	// which runs before that, does not use it.
	client *redisguard.Client

	// The event metrics. client_golang's counters and histograms are
	// lock-free once a series exists, which keeps count quick on the
	// goroutine of the command that caused the event.
	events  *prometheus.CounterVec
	refresh *prometheus.HistogramVec
	outage  prometheus.Histogram
}

const namespace = "redisguard"

func newCollector() *Collector {
	return &Collector{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_total",
			Help:      "Events the client reported, by kind (breaker-opened, probe-failed, node-slow, pool-exhausted, subscription-moved, ...) and node (empty for client-wide ones).",
		}, []string{"kind", "node"}),
		refresh: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "topology_refresh_duration_seconds",
			Help:      "How long CLUSTER SLOTS refreshes took, by result (ok, failed).",
			Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"result"}),
		outage: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "node_outage_duration_seconds",
			Help:      "How long nodes were out, from the opening of a breaker to its closing.",
			Buckets:   []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}),
	}
}

// count records e; it is what NewClient puts in Config.OnEvent.
func (m *Collector) count(e redisguard.Event) {
	m.events.WithLabelValues(e.Kind.String(), e.Addr).Inc()
	switch e.Kind {
	case redisguard.EventRefreshFinished:
		m.refresh.WithLabelValues("ok").Observe(e.Duration.Seconds())
	case redisguard.EventRefreshFailed:
		m.refresh.WithLabelValues("failed").Observe(e.Duration.Seconds())
	case redisguard.EventBreakerClosed:
		m.outage.Observe(e.Duration.Seconds())
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
}

// The Stats metrics, read at each scrape.
var (
	descBreaker = desc("node_breaker_state",
		"1 for the state the node's circuit breaker is in (closed, half-open, open), 0 for the others.", "node", "state")
	descFailures = desc("node_consecutive_failures",
		"Consecutive connection failures or timeouts on the node, towards NodeFailureThreshold.", "node")
	descOpens = desc("node_breaker_opens_total",
		"Times the node's breaker opened.", "node")
	descInFlight = desc("node_in_flight",
		"Commands and pipelines in progress on the node, including those waiting for capacity.", "node")
	descNodeExhausted = desc("node_pool_exhaustions_total",
		"Operations on the node refused with ErrPoolExhausted for want of an ordinary connection.", "node")
	descOutcomeUnknown = desc("node_outcome_unknown_total",
		"Commands on the node that ended with ErrOutcomeUnknown: their connection failed after they may have run.", "node")
	descProbes = desc("node_probes_total",
		"Recovery probes sent to the node while its breaker was open.", "node")
	descProbeFailures = desc("node_probe_failures_total",
		"Recovery probes of the node that failed.", "node")
	descSlow = desc("node_slow",
		"1 while the node is marked slow beside its peers, else 0.", "node")
	descLatency = desc("node_latency_seconds",
		"The node's sampled latency of ordinary commands; absent before the first sample.", "node")
	descReplicaReads = desc("node_replica_reads_total",
		"Reads the node served as a replica (Config.ReadFrom).", "node")

	descMaxConns = desc("max_connections",
		"Ordinary connection budget of each node (MaxConnections).")
	descMaxLong = desc("max_long_connections",
		"Long connection budget shared by all nodes (MaxLongConnections).")
	descLongInUse = desc("long_connections_in_use",
		"Long permits held: blocking calls in flight and open subscriptions.")
	descLongExhausted = desc("long_exhaustions_total",
		"Long operations refused with ErrPoolExhausted for want of a long permit.")
	descRefreshes = desc("topology_refreshes_total",
		"CLUSTER SLOTS calls sent to a server.")
	descRefreshFailures = desc("topology_refresh_failures_total",
		"CLUSTER SLOTS calls that failed.")
	descLastRefresh = desc("topology_last_refresh_duration_seconds",
		"How long the last CLUSTER SLOTS call took.")
	descDivergence = desc("divergence_decisions_total",
		"Decisions on commands that met a MOVED cycle, by decision (converging, recovered, failover, slot-map-corruption).", "decision")
	descSubMoves = desc("subscription_moves_total",
		"Subscriptions re-established on a new connection; messages published meanwhile may have been missed.")

	statsDescs = []*prometheus.Desc{
		descBreaker, descFailures, descOpens, descInFlight, descNodeExhausted, descOutcomeUnknown,
		descProbes, descProbeFailures, descSlow, descLatency, descReplicaReads,
		descMaxConns, descMaxLong, descLongInUse, descLongExhausted,
		descRefreshes, descRefreshFailures, descLastRefresh, descDivergence, descSubMoves,
	}
)

// breakerStates are the values of NodeStats.State, each its own 0/1 series,
// as Prometheus exports an enum.
var breakerStates = []string{"closed", "half-open", "open"}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range statsDescs {
		ch <- d
	}
	m.events.Describe(ch)
	m.refresh.Describe(ch)
	m.outage.Describe(ch)
}

// Collect implements prometheus.Collector. Client.Stats never touches the
// network, so a sick Redis cannot slow a scrape down.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	st := m.client.Stats()
	for _, n := range st.Nodes {
		for _, state := range breakerStates {
			gauge(descBreaker, bool01(n.State == state), n.Addr, state)
		}
		gauge(descFailures, float64(n.ConsecutiveFailures), n.Addr)
		counter(descOpens, n.Opens, n.Addr)
		gauge(descInFlight, float64(n.InFlight), n.Addr)
		counter(descNodeExhausted, n.PoolExhaustions, n.Addr)
		counter(descOutcomeUnknown, n.OutcomeUnknown, n.Addr)
		counter(descProbes, n.Probes, n.Addr)
		counter(descProbeFailures, n.ProbeFailures, n.Addr)
		gauge(descSlow, bool01(n.Slow), n.Addr)
		if n.Latency > 0 { // zero is "no sample yet", not a fast node
			gauge(descLatency, n.Latency.Seconds(), n.Addr)
		}
		counter(descReplicaReads, n.ReplicaReads, n.Addr)
	}
	gauge(descMaxConns, float64(st.MaxConnections))
	gauge(descMaxLong, float64(st.MaxLongConnections))
	gauge(descLongInUse, float64(st.LongInUse))
	counter(descLongExhausted, st.LongExhaustions)
	counter(descRefreshes, st.TopologyRefreshes)
	counter(descRefreshFailures, st.TopologyRefreshFailures)
	gauge(descLastRefresh, st.LastRefreshDuration.Seconds())
	counter(descDivergence, st.Divergence.Converging, "converging")
	counter(descDivergence, st.Divergence.Recovered, "recovered")
	counter(descDivergence, st.Divergence.Failover, "failover")
	counter(descDivergence, st.Divergence.SlotMapCorruption, "slot-map-corruption")
	counter(descSubMoves, st.SubscriptionMoves)

	m.events.Collect(ch)
	m.refresh.Collect(ch)
	m.outage.Collect(ch)
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
