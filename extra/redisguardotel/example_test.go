package redisguardotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardotel"
)

// NewClient replaces redisguard.NewClient; its metrics go to the
// MeterProvider, here one read by hand.
func ExampleNewClient() {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	client, reg, err := redisguardotel.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}},
		redisguardotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	defer reg.Unregister()

	if err := client.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		log.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "redisguard.node.breaker.state" {
			for _, p := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				state, _ := p.Attributes.Value("redisguard.breaker.state")
				fmt.Println(state.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// closed 1
	// half-open 0
	// open 0
}
