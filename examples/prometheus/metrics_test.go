package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redisguard/redisguard"
)

// scrape fetches /metrics as Prometheus would.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d, %v", resp.StatusCode, err)
	}
	return string(body)
}

// A breaker that opens shows up in both halves: the Stats collector reports
// the node's state and opens, and the event counter counts the transition.
func TestMetrics(t *testing.T) {
	srv := miniredis.RunT(t)
	addr := srv.Addr()
	c, reg, err := setup(redisguard.Config{
		Addrs: []string{addr}, NodeFailureThreshold: 2, NodeRecoveryTime: time.Hour, MaxConnections: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	healthy := scrape(t, handler(reg))
	for _, want := range []string{
		`redisguard_node_breaker_state{node="` + addr + `",state="closed"} 1`,
		`redisguard_node_breaker_state{node="` + addr + `",state="open"} 0`,
		`redisguard_node_breaker_opens_total{node="` + addr + `"} 0`,
		`redisguard_node_in_flight{node="` + addr + `"} 0`,
		`redisguard_node_pool_exhaustions_total{node="` + addr + `"} 0`,
		`redisguard_node_outcome_unknown_total{node="` + addr + `"} 0`,
		`redisguard_node_probes_total{node="` + addr + `"} 0`,
		`redisguard_node_probe_failures_total{node="` + addr + `"} 0`,
		`redisguard_node_slow{node="` + addr + `"} 0`,
		`redisguard_node_latency_seconds{node="` + addr + `"}`,
		"redisguard_max_connections 7",
		"redisguard_max_long_connections 7",
		"redisguard_long_in_use 0",
		"redisguard_long_exhaustions_total 0",
		"redisguard_topology_refreshes_total 0",
		`redisguard_divergence_decisions_total{decision="failover"} 0`,
		"go_goroutines",
	} {
		if !strings.Contains(healthy, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(healthy, "redisguard_events_total") {
		t.Error("events counted before anything happened")
	}

	srv.Close()
	for range 3 {
		_ = c.Get(ctx, "k").Err()
	}
	sick := scrape(t, handler(reg))
	for _, want := range []string{
		`redisguard_node_breaker_state{node="` + addr + `",state="open"} 1`,
		`redisguard_node_breaker_state{node="` + addr + `",state="closed"} 0`,
		`redisguard_node_breaker_opens_total{node="` + addr + `"} 1`,
		`redisguard_events_total{budget="",kind="breaker-opened"} 1`,
	} {
		if !strings.Contains(sick, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}

	// The registry is consistent: every metric is described, names are
	// valid, and nothing is collected twice.
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if n, err := testutil.GatherAndCount(reg, "redisguard_node_breaker_state"); err != nil || n != 3 {
		t.Errorf("breaker state series: %d, %v; want one per state", n, err)
	}
}

// Refresh events feed the duration histogram, and pool exhaustion is
// counted by budget. The events are fed directly: a cluster needs more than
// miniredis to refresh under test.
func TestEventCounters(t *testing.T) {
	m := NewEvents()
	for _, e := range []redisguard.Event{
		{Kind: redisguard.EventRefreshStarted},
		{Kind: redisguard.EventRefreshFinished, Duration: 3 * time.Millisecond},
		{Kind: redisguard.EventRefreshStarted},
		{Kind: redisguard.EventRefreshFailed, Duration: time.Second, Err: "i/o timeout"},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetOrdinary, Addr: "a:1"},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetLong},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetLong},
	} {
		m.OnEvent(e)
	}
	for _, tc := range []struct {
		kind, budget string
		want         float64
	}{
		{"refresh-started", "", 2},
		{"refresh-finished", "", 1},
		{"refresh-failed", "", 1},
		{"pool-exhausted", "ordinary", 1},
		{"pool-exhausted", "long", 2},
	} {
		if got := testutil.ToFloat64(m.total.WithLabelValues(tc.kind, tc.budget)); got != tc.want {
			t.Errorf("events_total{kind=%q,budget=%q} = %v, want %v", tc.kind, tc.budget, got, tc.want)
		}
	}
	const want = `
# HELP redisguard_topology_refresh_duration_seconds How long CLUSTER SLOTS refreshes took, by result (ok, failed).
# TYPE redisguard_topology_refresh_duration_seconds histogram
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.001"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.0025"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.005"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.01"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.025"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.05"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.1"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.25"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="0.5"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="1"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="2.5"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="5"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="failed",le="+Inf"} 1
redisguard_topology_refresh_duration_seconds_sum{result="failed"} 1
redisguard_topology_refresh_duration_seconds_count{result="failed"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.001"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.0025"} 0
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.005"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.01"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.025"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.05"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.1"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.25"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="0.5"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="1"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="2.5"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="5"} 1
redisguard_topology_refresh_duration_seconds_bucket{result="ok",le="+Inf"} 1
redisguard_topology_refresh_duration_seconds_sum{result="ok"} 0.003
redisguard_topology_refresh_duration_seconds_count{result="ok"} 1
`
	if err := testutil.CollectAndCompare(m.refresh, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
