package redisguardotel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardotel"
	"github.com/redisguard/redisguard/internal/redistest"
)

// GET, BLPOP (run on a dedicated connection) and pipelines each get a span,
// and redisotel's timings cover them, in standalone and cluster alike.
func TestSpansForEveryCommand(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		checkSpans(t, redisguard.Config{Addrs: []string{srv.Addr}})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		checkSpans(t, redisguard.Config{Addrs: cl.Addrs(), Mode: redisguard.ModeCluster})
	})
}

func checkSpans(t *testing.T, cfg redisguard.Config) {
	tel := newTelemetry(t)
	c, err := redisguard.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// The mistake these functions replace.
	if err := redisotel.InstrumentTracing(c); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("redisotel.InstrumentTracing(*redisguard.Client) = %v, want its refusal", err)
	}
	if err := redisguardotel.InstrumentTracing(c, redisotel.WithTracerProvider(tel.tp)); err != nil {
		t.Fatal(err)
	}
	if err := redisguardotel.InstrumentMetrics(c, redisotel.WithMeterProvider(tel.mp)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if err := c.Set(ctx, "otel:{k}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "otel:{k}").Result(); err != nil || v != "v" {
		t.Fatalf("GET: %q, %v", v, err)
	}
	if err := c.BLPop(ctx, 10*time.Millisecond, "otel:{q}").Err(); err != redis.Nil {
		t.Fatalf("BLPOP: %v, want redis.Nil", err)
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "otel:{k}")
		p.Incr(ctx, "otel:{k}:n")
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	names := tel.spanNames()
	for _, want := range []string{"get", "blpop", "redis.pipeline get incr"} {
		if names[want] != 1 {
			t.Errorf("%d spans named %q, want 1; spans: %v", names[want], want, names)
		}
	}
	if n := sumOf(tel.collect(t), "db.client.connections.use_time"); n < 4 {
		t.Errorf("redisotel timed %v operations, want at least 4 (SET, GET, BLPOP, pipeline)", n)
	}
}
