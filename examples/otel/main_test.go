package main

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisguard/redisguard"
)

// setup wires both halves: a command leaves a span, and redisguard's and
// redisotel's metrics are both collected.
func TestSetup(t *testing.T) {
	srv := miniredis.RunT(t)
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })

	c, reg, err := setup(redisguard.Config{Addrs: []string{srv.Addr()}}, tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister(); _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	var names []string
	sets := 0
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
		if s.Name() == "set" {
			sets++
		}
	}
	if sets != 1 {
		t.Errorf("%d spans named set, want 1; spans: %v", sets, names)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	metrics := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			metrics[m.Name] = true
		}
	}
	for _, want := range []string{"redisguard.node.breaker.state", "db.client.connection.max", "db.client.connections.use_time"} {
		if !metrics[want] {
			t.Errorf("no %s among %v", want, metrics)
		}
	}
}
