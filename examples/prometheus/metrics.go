// Command prometheus shows how to export a redisguard client's state to
// Prometheus with client_golang: a Collector that reads Client.Stats on every
// scrape, and counters fed from Config.OnEvent.
//
// It lives in a module of its own so that the core module does not depend
// on client_golang. Copy metrics.go into your service, or run it as is:
//
//	go run . -addr localhost:6379 -listen :9121
//	curl localhost:9121/metrics
package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisguard/redisguard"
)

// namespace prefixes every metric name.
const namespace = "redisguard"

// Events counts redisguard's events by kind, and times slot-map refreshes.
// Pass its OnEvent as Config.OnEvent and register it.
//
// OnEvent runs on the goroutine of the command that caused the event, so it
// does nothing but bump a counter: client_golang's counters and histograms
// are lock-free.
type Events struct {
	total   *prometheus.CounterVec
	refresh *prometheus.HistogramVec
}

// NewEvents creates the event metrics.
func NewEvents() *Events {
	return &Events{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_total",
			Help:      "redisguard events by kind (breaker-opened, refresh-failed, pool-exhausted, ...) and, for pool-exhausted, budget.",
		}, []string{"kind", "budget"}),
		refresh: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "topology_refresh_duration_seconds",
			Help:      "How long CLUSTER SLOTS refreshes took, by result (ok, failed).",
			Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"result"}),
	}
}

// OnEvent records e. Use it as Config.OnEvent.
func (m *Events) OnEvent(e redisguard.Event) {
	m.total.WithLabelValues(e.Kind.String(), string(e.Budget)).Inc()
	switch e.Kind {
	case redisguard.EventRefreshFinished:
		m.refresh.WithLabelValues("ok").Observe(e.Duration.Seconds())
	case redisguard.EventRefreshFailed:
		m.refresh.WithLabelValues("failed").Observe(e.Duration.Seconds())
	}
}

// Describe implements prometheus.Collector.
func (m *Events) Describe(ch chan<- *prometheus.Desc) {
	m.total.Describe(ch)
	m.refresh.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Events) Collect(ch chan<- prometheus.Metric) {
	m.total.Collect(ch)
	m.refresh.Collect(ch)
}

// Stats reads Client.Stats on every scrape. Stats is a cheap snapshot that
// never touches the network, so scraping cannot be slowed down by a sick
// Redis.
type Stats struct {
	client *redisguard.Client
}

// NewStats returns a collector for c's Stats.
func NewStats(c *redisguard.Client) *Stats { return &Stats{client: c} }

// breakerStates are the values of NodeStats.State, each exported as its own
// 0/1 series, as Prometheus does for enums.
var breakerStates = []string{"closed", "half-open", "open"}

var (
	descBreaker = prometheus.NewDesc(namespace+"_node_breaker_state",
		"1 for the state the node's circuit breaker is in, 0 for the others.", []string{"node", "state"}, nil)
	descOpens = prometheus.NewDesc(namespace+"_node_breaker_opens_total",
		"Times the node's breaker opened.", []string{"node"}, nil)
	descFailures = prometheus.NewDesc(namespace+"_node_consecutive_failures",
		"Consecutive connection failures or timeouts on the node, towards NodeFailureThreshold.", []string{"node"}, nil)
	descInFlight = prometheus.NewDesc(namespace+"_node_in_flight",
		"Commands and pipelines in progress on the node, including those waiting for capacity.", []string{"node"}, nil)
	descNodeExhausted = prometheus.NewDesc(namespace+"_node_pool_exhaustions_total",
		"Operations on the node refused with ErrPoolExhausted.", []string{"node"}, nil)
	descOutcomeUnknown = prometheus.NewDesc(namespace+"_node_outcome_unknown_total",
		"Commands on the node that ended with ErrOutcomeUnknown (not safe to repeat; the connection failed after they may have run).", []string{"node"}, nil)
	descProbes = prometheus.NewDesc(namespace+"_node_probes_total",
		"Recovery probes sent to the node while its breaker was open.", []string{"node"}, nil)
	descProbeFailures = prometheus.NewDesc(namespace+"_node_probe_failures_total",
		"Recovery probes of the node that failed.", []string{"node"}, nil)
	descSlow = prometheus.NewDesc(namespace+"_node_slow",
		"1 while the node is marked slow beside its peers, else 0.", []string{"node"}, nil)
	descLatency = prometheus.NewDesc(namespace+"_node_latency_seconds",
		"The node's sampled latency (a moving average of ordinary commands).", []string{"node"}, nil)
	descMaxConns = prometheus.NewDesc(namespace+"_max_connections",
		"Ordinary connection budget per node (MaxConnections).", nil, nil)
	descMaxLong = prometheus.NewDesc(namespace+"_max_long_connections",
		"Long budget shared by all nodes (MaxLongConnections).", nil, nil)
	descLongInUse = prometheus.NewDesc(namespace+"_long_in_use",
		"Long permits held: blocking calls in flight and open subscriptions.", nil, nil)
	descLongExhausted = prometheus.NewDesc(namespace+"_long_exhaustions_total",
		"Long operations refused with ErrPoolExhausted.", nil, nil)
	descRefreshes = prometheus.NewDesc(namespace+"_topology_refreshes_total",
		"CLUSTER SLOTS calls sent to a server.", nil, nil)
	descRefreshFailures = prometheus.NewDesc(namespace+"_topology_refresh_failures_total",
		"CLUSTER SLOTS calls that failed.", nil, nil)
	descLastRefresh = prometheus.NewDesc(namespace+"_topology_last_refresh_duration_seconds",
		"How long the last CLUSTER SLOTS call took.", nil, nil)
	descDivergence = prometheus.NewDesc(namespace+"_divergence_decisions_total",
		"Decisions on commands that met a MOVED cycle, by decision.", []string{"decision"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBreaker, descOpens, descFailures, descInFlight, descNodeExhausted, descOutcomeUnknown, descSlow, descLatency,
		descProbes, descProbeFailures,
		descMaxConns, descMaxLong, descLongInUse, descLongExhausted, descRefreshes, descRefreshFailures, descLastRefresh, descDivergence} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	st := s.client.Stats()
	for _, n := range st.Nodes {
		for _, state := range breakerStates {
			v := 0.0
			if n.State == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, v, n.Addr, state)
		}
		ch <- prometheus.MustNewConstMetric(descOpens, prometheus.CounterValue, float64(n.Opens), n.Addr)
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.GaugeValue, float64(n.ConsecutiveFailures), n.Addr)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(n.InFlight), n.Addr)
		ch <- prometheus.MustNewConstMetric(descNodeExhausted, prometheus.CounterValue, float64(n.PoolExhaustions), n.Addr)
		ch <- prometheus.MustNewConstMetric(descOutcomeUnknown, prometheus.CounterValue, float64(n.OutcomeUnknown), n.Addr)
		ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(n.Probes), n.Addr)
		ch <- prometheus.MustNewConstMetric(descProbeFailures, prometheus.CounterValue, float64(n.ProbeFailures), n.Addr)
		slow := 0.0
		if n.Slow {
			slow = 1
		}
		ch <- prometheus.MustNewConstMetric(descSlow, prometheus.GaugeValue, slow, n.Addr)
		ch <- prometheus.MustNewConstMetric(descLatency, prometheus.GaugeValue, n.Latency.Seconds(), n.Addr)
	}
	ch <- prometheus.MustNewConstMetric(descMaxConns, prometheus.GaugeValue, float64(st.MaxConnections))
	ch <- prometheus.MustNewConstMetric(descMaxLong, prometheus.GaugeValue, float64(st.MaxLongConnections))
	ch <- prometheus.MustNewConstMetric(descLongInUse, prometheus.GaugeValue, float64(st.LongInUse))
	ch <- prometheus.MustNewConstMetric(descLongExhausted, prometheus.CounterValue, float64(st.LongExhaustions))
	ch <- prometheus.MustNewConstMetric(descRefreshes, prometheus.CounterValue, float64(st.TopologyRefreshes))
	ch <- prometheus.MustNewConstMetric(descRefreshFailures, prometheus.CounterValue, float64(st.TopologyRefreshFailures))
	ch <- prometheus.MustNewConstMetric(descLastRefresh, prometheus.GaugeValue, st.LastRefreshDuration.Seconds())
	for decision, n := range map[string]uint64{
		"converging":          st.Divergence.Converging,
		"recovered":           st.Divergence.Recovered,
		"failover":            st.Divergence.Failover,
		"slot-map-corruption": st.Divergence.SlotMapCorruption,
	} {
		ch <- prometheus.MustNewConstMetric(descDivergence, prometheus.CounterValue, float64(n), decision)
	}
}
