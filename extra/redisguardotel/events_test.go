package redisguardotel

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redisguard/redisguard"
)

// Events the breaker test cannot cause on one server are counted by kind and
// node, and refreshes are timed by result. They are fed directly: a slot-map
// refresh needs a cluster.
func TestRecordEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ev, err := newEvents(mp.Meter(ScopeName), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []redisguard.Event{
		{Kind: redisguard.EventRefreshStarted},
		{Kind: redisguard.EventRefreshFinished, Duration: 3 * time.Millisecond},
		{Kind: redisguard.EventRefreshStarted},
		{Kind: redisguard.EventRefreshFailed, Duration: time.Second, Err: "i/o timeout"},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetOrdinary, Addr: "10.0.0.1:6379"},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetLong},
		{Kind: redisguard.EventPoolExhausted, Budget: redisguard.BudgetLong},
		{Kind: redisguard.EventBreakerOpened, Addr: "sentinel-master:mymaster"},
	} {
		ev.record(e)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				kind, _ := p.Attributes.Value("redisguard.event.kind")
				host, _ := p.Attributes.Value("server.address")
				port, _ := p.Attributes.Value("server.port")
				got[m.Name+" "+kind.AsString()+" "+host.Emit()+" "+port.Emit()] = p.Value
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				result, _ := p.Attributes.Value("redisguard.refresh.result")
				got[m.Name+" "+result.AsString()] = int64(p.Count)
			}
		}
	}
	for k, want := range map[string]int64{
		"redisguard.events refresh-started  ":                        2,
		"redisguard.events refresh-finished  ":                       1,
		"redisguard.events refresh-failed  ":                         1,
		"redisguard.events pool-exhausted 10.0.0.1 6379":             1,
		"redisguard.events pool-exhausted  ":                         2,
		"redisguard.events breaker-opened sentinel-master:mymaster ": 1,
		"redisguard.topology.refresh.duration ok":                    1,
		"redisguard.topology.refresh.duration failed":                1,
	} {
		if got[k] != want {
			t.Errorf("%q = %d, want %d", k, got[k], want)
		}
	}
}
