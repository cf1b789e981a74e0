package redisguardprom

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redisguard/redisguard"
)

// Events the breaker test cannot cause on one server are counted by kind and
// node, and refreshes are timed by result. They are fed directly: a slot-map
// refresh needs a cluster.
func TestCountEvents(t *testing.T) {
	m := newCollector()
	for _, e := range []redisguard.Event{
		{Kind: redisguard.EventRefreshStarted},
		{Kind: redisguard.EventRefreshFinished, Duration: 3 * time.Millisecond},
		{Kind: redisguard.EventRefreshStarted},
		{Kind: redisguard.EventRefreshFailed, Duration: time.Second, Err: "i/o timeout"},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetOrdinary, Addr: "a:1"},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetLong},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetLong},
		{Kind: redisguard.EventNodeSlow, Addr: "a:1", Duration: 80 * time.Millisecond},
	} {
		m.count(e)
	}
	for _, tc := range []struct {
		kind, node string
		want       float64
	}{
		{"refresh-started", "", 2},
		{"refresh-finished", "", 1},
		{"refresh-failed", "", 1},
		{"pool-exhausted", "a:1", 1},
		{"pool-exhausted", "", 2},
		{"node-slow", "a:1", 1},
	} {
		if got := testutil.ToFloat64(m.events.WithLabelValues(tc.kind, tc.node)); got != tc.want {
			t.Errorf("events_total{kind=%q,node=%q} = %v, want %v", tc.kind, tc.node, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m.refresh); n != 2 {
		t.Errorf("%d refresh duration series, want ok and failed", n)
	}
	if n := testutil.CollectAndCount(m.outage); n != 1 {
		t.Errorf("%d outage series, want 1", n)
	}
}
