package redisguardotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardotel"
	"github.com/redisguard/redisguard/internal/redistest"
)

// A breaker that opens and closes again on a real server shows in every
// signal: the Stats instruments, the conventions' pool instruments, the
// event counter and the outage histogram; and an OnEvent already in the
// Config still sees every event.
func TestBreakerOpensAndCloses(t *testing.T) {
	srv := redistest.StartServer(t)
	tel := newTelemetry(t)
	var userSaw atomic.Int64
	client, reg, err := redisguardotel.NewClient(redisguard.Config{
		Addrs:                []string{srv.Addr},
		NodeFailureThreshold: 2,
		NodeRecoveryTime:     50 * time.Millisecond,
		MaxConnections:       7,
		OnEvent:              func(redisguard.Event) { userSaw.Add(1) },
	}, redisguardotel.WithMeterProvider(tel.mp), redisguardotel.WithAttributes(attribute.String("client", "test")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister(); _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	who := attribute.String("client", "test")
	node := func(name string, kv ...attribute.KeyValue) string {
		return point(name, append(kv, who, attribute.String("server.address", "127.0.0.1"), attribute.Int("server.port", srv.Port))...)
	}
	state := func(s string) string {
		return node("redisguard.node.breaker.state", attribute.String("redisguard.breaker.state", s))
	}
	event := func(kind string) string {
		return node("redisguard.events", attribute.String("redisguard.event.kind", kind))
	}
	pool := attribute.String("db.client.connection.pool.name", srv.Addr)
	long := attribute.String("db.client.connection.pool.name", "long")
	healthy := tel.collect(t)
	expect(t, healthy, map[string]float64{
		state("closed"): 1, state("half-open"): 0, state("open"): 0,
		node("redisguard.node.consecutive_failures"): 0,
		node("redisguard.node.breaker.opens"):        0,
		node("redisguard.node.in_flight"):            0,
		node("redisguard.node.outcome_unknown"):      0,
		node("redisguard.node.probes"):               0,
		node("redisguard.node.probe.failures"):       0,
		node("redisguard.node.slow"):                 0,
		node("redisguard.node.replica.reads"):        0,
		node("db.client.connection.max", pool):       7,
		node("db.client.connection.timeouts", pool):  0,
		point("db.client.connection.max", who, long): 7,
		point("db.client.connection.count", who, long, attribute.String("db.client.connection.state", "used")):        0,
		point("db.client.connection.timeouts", who, long):                                                             0,
		point("redisguard.topology.refreshes", who):                                                                   0,
		point("redisguard.subscription.moves", who):                                                                   0,
		point("redisguard.divergence.decisions", who, attribute.String("redisguard.divergence.decision", "failover")): 0,
		event("breaker-opened"): -1,
	})
	// One command in 64 is timed on a healthy node.
	redistest.WaitFor(t, 10*time.Second, "a latency sample", func() error {
		for range 64 {
			if err := client.Get(ctx, "k").Err(); err != nil {
				return err
			}
		}
		if v, ok := tel.collect(t)[node("redisguard.node.latency")]; !ok || v <= 0 {
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
		if v := tel.collect(t)[node("redisguard.node.probe.failures")]; v < 1 {
			return fmt.Errorf("probe failures %v", v)
		}
		return nil
	})
	down := tel.collect(t)
	expect(t, down, map[string]float64{
		state("closed"): 0, state("open"): 1,
		node("redisguard.node.breaker.opens"): 1,
		event("breaker-opened"):               1,
	})
	if down[node("redisguard.node.probes")] < 1 || down[event("probe-failed")] < 1 {
		t.Errorf("probes %v, probe-failed events %v; want at least 1 each",
			down[node("redisguard.node.probes")], down[event("probe-failed")])
	}

	srv.Restart(t)
	redistest.WaitFor(t, 10*time.Second, "the breaker closed", func() error {
		if err := client.Get(ctx, "k").Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if v := tel.collect(t)[state("closed")]; v != 1 {
			return fmt.Errorf("closed = %v", v)
		}
		return nil
	})
	up := tel.collect(t)
	expect(t, up, map[string]float64{
		state("closed"): 1, state("half-open"): 0, state("open"): 0,
		node("redisguard.node.breaker.opens"):         1,
		event("breaker-opened"):                       1,
		event("breaker-half-open"):                    1,
		event("breaker-closed"):                       1,
		point("redisguard.node.outage.duration", who): 1,
	})
	if s := up[point("redisguard.node.outage.duration.sum", who)]; s <= 0 || s > 10 {
		t.Errorf("outage lasted %vs by the histogram", s)
	}
	if n, events := userSaw.Load(), sumOf(up, "redisguard.events"); float64(n) != events {
		t.Errorf("the Config's own OnEvent saw %d events, the counter recorded %v", n, events)
	}

	// Unregistering stops the Stats instruments; the client goes on.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if v, ok := tel.collect(t)[state("closed")]; ok {
		t.Errorf("breaker state still observed after Unregister: %v", v)
	}
}

// A Config NewClient refuses yields no client and no registration.
func TestNewClientInvalidConfig(t *testing.T) {
	client, reg, err := redisguardotel.NewClient(redisguard.Config{})
	if err == nil || client != nil || reg != nil {
		t.Fatalf("NewClient(Config{}) = %v, %v, %v; want an error alone", client, reg, err)
	}
}
