// Command otel observes a redisguard client with OpenTelemetry through
// extra/redisguardotel: redisguard's own signals (breaker states, recovery
// probes, exhausted budgets, events, ...) as metrics, and go-redis's
// redisotel spans and timings for every command, blocking ones and
// pipelines included. It sends a few commands and prints the spans and
// metrics to stdout; a service would configure an OTLP exporter instead.
//
//	go run . -addr localhost:6379
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardotel"
)

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

// setup builds the client with redisguard's metrics on mp, and redisotel's
// tracing and metrics on every go-redis client it runs.
func setup(cfg redisguard.Config, tp trace.TracerProvider, mp metric.MeterProvider) (*redisguard.Client, metric.Registration, error) {
	c, reg, err := redisguardotel.NewClient(cfg, redisguardotel.WithMeterProvider(mp))
	if err != nil {
		return nil, nil, err
	}
	if err := errors.Join(
		redisguardotel.InstrumentTracing(c, redisotel.WithTracerProvider(tp)),
		redisguardotel.InstrumentMetrics(c, redisotel.WithMeterProvider(mp)),
	); err != nil {
		_ = reg.Unregister()
		_ = c.Close()
		return nil, nil, err
	}
	return c, reg, nil
}
