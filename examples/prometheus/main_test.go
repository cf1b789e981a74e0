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

// /metrics serves redisguard's series beside the runtime's, and a breaker
// that opens shows in both its state and the event count.
func TestMetrics(t *testing.T) {
	srv := miniredis.RunT(t)
	addr := srv.Addr()
	c, reg, err := setup(redisguard.Config{Addrs: []string{addr}, NodeFailureThreshold: 2, NodeRecoveryTime: time.Hour})
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
		"go_goroutines",
	} {
		if !strings.Contains(healthy, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}

	srv.Close()
	for range 3 {
		_ = c.Get(ctx, "k").Err()
	}
	sick := scrape(t, handler(reg))
	for _, want := range []string{
		`redisguard_node_breaker_state{node="` + addr + `",state="open"} 1`,
		`redisguard_events_total{kind="breaker-opened",node="` + addr + `"} 1`,
	} {
		if !strings.Contains(sick, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
