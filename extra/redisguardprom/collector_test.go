package redisguardprom_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardprom"
	"github.com/redisguard/redisguard/internal/redistest"
)

// gather scrapes reg and returns each sample by `name{label="value",...}`,
// labels in name order; a histogram gives its _count and _sum.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(kv)
			labels := ""
			if len(kv) > 0 {
				labels = "{" + strings.Join(kv, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[f.GetName()+labels] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[f.GetName()+labels] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[f.GetName()+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[f.GetName()+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// expect checks exact values, and that a name given with want < 0 is absent.
func expect(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := got[k]
		switch {
		case want[k] < 0 && ok:
			t.Errorf("%s = %v, want no such series", k, v)
		case want[k] >= 0 && !ok:
			t.Errorf("%s missing", k)
		case want[k] >= 0 && v != want[k]:
			t.Errorf("%s = %v, want %v", k, v, want[k])
		}
	}
}

// A breaker that opens and closes again on a real server shows in every
// signal: the Stats gauges and counters, the event counts and the outage
// histogram; and an OnEvent already in the Config still sees every event.
func TestBreakerOpensAndCloses(t *testing.T) {
	srv := redistest.StartServer(t)
	var userSaw atomic.Int64
	client, metrics, err := redisguardprom.NewClient(redisguard.Config{
		Addrs:                []string{srv.Addr},
		NodeFailureThreshold: 2,
		NodeRecoveryTime:     50 * time.Millisecond,
		MaxConnections:       7,
		OnEvent:              func(redisguard.Event) { userSaw.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	node := func(name string) string { return name + `{node="` + srv.Addr + `"}` }
	state := func(s string) string {
		return `redisguard_node_breaker_state{node="` + srv.Addr + `",state="` + s + `"}`
	}
	event := func(kind string) string {
		return `redisguard_events_total{kind="` + kind + `",node="` + srv.Addr + `"}`
	}
	healthy := gather(t, reg)
	expect(t, healthy, map[string]float64{
		state("closed"): 1, state("half-open"): 0, state("open"): 0,
		node("redisguard_node_consecutive_failures"):                 0,
		node("redisguard_node_breaker_opens_total"):                  0,
		node("redisguard_node_in_flight"):                            0,
		node("redisguard_node_pool_exhaustions_total"):               0,
		node("redisguard_node_outcome_unknown_total"):                0,
		node("redisguard_node_probes_total"):                         0,
		node("redisguard_node_probe_failures_total"):                 0,
		node("redisguard_node_slow"):                                 0,
		node("redisguard_node_replica_reads_total"):                  0,
		"redisguard_max_connections":                                 7,
		"redisguard_max_long_connections":                            7,
		"redisguard_long_connections_in_use":                         0,
		"redisguard_long_exhaustions_total":                          0,
		"redisguard_topology_refreshes_total":                        0,
		"redisguard_subscription_moves_total":                        0,
		`redisguard_divergence_decisions_total{decision="failover"}`: 0,
		"redisguard_node_outage_duration_seconds_count":              0,
		event("breaker-opened"):                                      -1,
	})
	// One command in 64 is timed on a healthy node.
	redistest.WaitFor(t, 10*time.Second, "a latency sample", func() error {
		for range 64 {
			if err := client.Get(ctx, "k").Err(); err != nil {
				return err
			}
		}
		if v, ok := gather(t, reg)[node("redisguard_node_latency_seconds")]; !ok || v <= 0 {
			return fmt.Errorf("latency %v (reported %v)", v, ok)
		}
		return nil
	})

	srv.Kill(t)
	var last error
	for i := 0; i < 10 && !errors.Is(last, redisguard.ErrNodeUnavailable); i++ {
		last = client.Get(ctx, "k").Err()
	}
	if !errors.Is(last, redisguard.ErrNodeUnavailable) {
		t.Fatalf("GET on a killed server: %v, want ErrNodeUnavailable", last)
	}
	redistest.WaitFor(t, 10*time.Second, "a failed recovery probe", func() error {
		if v := gather(t, reg)[node("redisguard_node_probe_failures_total")]; v < 1 {
			return fmt.Errorf("probe failures %v", v)
		}
		return nil
	})
	down := gather(t, reg)
	expect(t, down, map[string]float64{
		state("closed"): 0, state("open"): 1,
		node("redisguard_node_breaker_opens_total"):     1,
		event("breaker-opened"):                         1,
		"redisguard_node_outage_duration_seconds_count": 0,
	})
	if down[node("redisguard_node_probes_total")] < 1 || down[event("probe-failed")] < 1 {
		t.Errorf("probes %v, probe-failed events %v; want at least 1 each",
			down[node("redisguard_node_probes_total")], down[event("probe-failed")])
	}

	srv.Restart(t)
	redistest.WaitFor(t, 10*time.Second, "the breaker closed", func() error {
		if err := client.Get(ctx, "k").Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if v := gather(t, reg)[state("closed")]; v != 1 {
			return fmt.Errorf("closed = %v", v)
		}
		return nil
	})
	up := gather(t, reg)
	expect(t, up, map[string]float64{
		state("closed"): 1, state("half-open"): 0, state("open"): 0,
		node("redisguard_node_breaker_opens_total"):     1,
		event("breaker-opened"):                         1,
		event("breaker-half-open"):                      1,
		event("breaker-closed"):                         1,
		"redisguard_node_outage_duration_seconds_count": 1,
	})
	if s := up["redisguard_node_outage_duration_seconds_sum"]; s <= 0 || s > 10 {
		t.Errorf("outage lasted %vs by the histogram", s)
	}
	var events float64
	for k, v := range up {
		if strings.HasPrefix(k, "redisguard_events_total{") {
			events += v
		}
	}
	if n := userSaw.Load(); float64(n) != events {
		t.Errorf("the Config's own OnEvent saw %d events, the collector counted %v", n, events)
	}

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// A Config NewClient refuses yields no Collector.
func TestNewClientInvalidConfig(t *testing.T) {
	client, metrics, err := redisguardprom.NewClient(redisguard.Config{})
	if err == nil || client != nil || metrics != nil {
		t.Fatalf("NewClient(Config{}) = %v, %v, %v; want an error alone", client, metrics, err)
	}
}
