package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redisguard/redisguard"
)

// main sends a few commands and prints their spans and the metrics to
// stdout; a service would configure an OTLP exporter instead.
func main() {
	addrs := flag.String("addr", "localhost:6379", "comma-separated Redis addresses (several: Cluster)")
	flag.Parse()

	spans, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	metrics, err := stdoutmetric.New()
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewPeriodicReader(metrics)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx := context.Background()
	defer func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) }()

	c, reg, err := setup(redisguard.Config{
		Addrs:    strings.Split(*addrs, ","),
		Password: os.Getenv("REDIS_PASSWORD"),
		Logger:   slog.Default(),
	}, tp, mp)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	defer reg.Unregister()

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "otel:example", "v", time.Minute).Err(); err != nil {
		log.Fatal(err)
	}
	c.Get(ctx, "otel:example")
	c.BLPop(ctx, 100*time.Millisecond, "otel:queue") // a span from its dedicated connection
	if err := reader.ForceFlush(ctx); err != nil {
		log.Print(err)
	}
}
